package config

import (
	"os"
	"path/filepath"
	"testing"
)

func writeAt(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Not parallel: it points the package's /etc path at a temporary file.
func TestConfigDiscoveryFirstFoundWins(t *testing.T) {
	dir := t.TempDir()
	home, xdg := filepath.Join(dir, "home"), filepath.Join(dir, "xdg")
	etc := filepath.Join(dir, "etc", "tilectl", "config.yaml")
	explicit := filepath.Join(dir, "explicit.yaml")
	old := systemConfigFile
	systemConfigFile = etc
	t.Cleanup(func() { systemConfigFile = old })

	writeAt(t, etc, "log_level: error\n")
	writeAt(t, filepath.Join(home, ".config", "tilectl", "config.yaml"), "log_level: warn\n")
	writeAt(t, filepath.Join(xdg, "tilectl", "config.yaml"), "log_level: debug\n")
	writeAt(t, explicit, "log_level: trace\n")

	for _, tc := range []struct {
		name string
		flag string
		env  map[string]string
		want string
	}{
		{"--config beats everything", explicit, map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg, ConfigFileEnv: etc}, "trace"},
		{"TILECTL_CONFIG beats XDG", "", map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg, ConfigFileEnv: explicit}, "trace"},
		{"XDG_CONFIG_HOME beats ~/.config", "", map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}, "debug"},
		{"~/.config when XDG_CONFIG_HOME unset", "", map[string]string{"HOME": home}, "warn"},
		{"/etc last", "", map[string]string{"HOME": filepath.Join(dir, "nohome")}, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustLoad(t, tc.flag, tc.env)
			if c.LogLevel != tc.want {
				t.Fatalf("log_level %q, want %q (file %s)", c.LogLevel, tc.want, c.File())
			}
			if src := c.Source("log_level"); src.Kind != SourceFile || src.Name != c.File() || src.Line != 1 {
				t.Fatalf("source %+v, want the file %s line 1", src, c.File())
			}
		})
	}
	if err := os.Remove(etc); err != nil {
		t.Fatal(err)
	}
	c := mustLoad(t, "", map[string]string{"HOME": filepath.Join(dir, "nohome")})
	if c.File() != "" || c.Source("log_level").Kind != SourceDefault {
		t.Fatalf("no file anywhere: got file %q source %v", c.File(), c.Source("log_level"))
	}
}

func TestEverySourceIsRecorded(t *testing.T) {
	path := writeFile(t, "cache_dir: /from/file\nupload:\n  concurrency: 7\n")
	c := mustLoad(t, path, map[string]string{"HOME": "/h", "TILECTL_PROVIDER_URL": "http://env:1"})
	if err := c.SetFrom(Source{Kind: SourceFlag, Name: "--log-level"}, "log_level", "debug"); err != nil {
		t.Fatal(err)
	}
	c.SetToken(Source{Kind: SourceFlag, Name: "--provider-token-file", File: "/run/t"}, "x")
	for key, want := range map[string]string{
		"cache_dir":          "file " + path + ":1",
		"upload.concurrency": "file " + path + ":3",
		"provider_url":       "env TILECTL_PROVIDER_URL",
		"log_level":          "flag --log-level",
		"provider_token":     "flag --provider-token-file (file /run/t)",
		"database_url":       "default",
	} {
		if got := c.Source(key).String(); got != want {
			t.Errorf("%s: source %q, want %q", key, got, want)
		}
	}
}
