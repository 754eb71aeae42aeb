package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConcurrencyIsAutoByDefaultAndTakesAutoOrANumberFromEverySource(t *testing.T) {
	c := Default(func(string) string { return "" })
	c.Complete()
	if c.Upload.Concurrency != ConcurrencyAuto {
		t.Fatalf("default concurrency %v, want auto", c.Upload.Concurrency)
	}
	if got := valueOf(t, c, "upload.concurrency"); got != "auto" {
		t.Fatalf("default shows as %q, want auto", got)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() of the defaults = %v", err)
	}
	for _, tc := range []struct {
		in   string
		want Concurrency
	}{{"auto", ConcurrencyAuto}, {" AUTO ", ConcurrencyAuto}, {"1", 1}, {"256", 256}} {
		c := Default(func(string) string { return "" })
		if err := c.SetFrom(Source{Kind: SourceEnv, Name: "TILECTL_UPLOAD_CONCURRENCY"}, "upload.concurrency", tc.in); err != nil {
			t.Fatalf("set %q: %v", tc.in, err)
		}
		c.Complete()
		if err := c.Validate(); err != nil || c.Upload.Concurrency != tc.want {
			t.Errorf("set %q: concurrency %v, Validate() = %v; want %v", tc.in, c.Upload.Concurrency, err, tc.want)
		}
	}
}

func TestABadConcurrencySaysWhereItCameFromAndWhatIsAllowed(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"fast", `want auto or a number of batches from 1 to 256, got "fast"`},
		{"1e9999", `want auto or a number of batches from 1 to 256, got "1e9999"`},
	} {
		c := Default(func(string) string { return "" })
		err := c.SetFrom(Source{Kind: SourceEnv, Name: "TILECTL_UPLOAD_CONCURRENCY"}, "upload.concurrency", tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "upload.concurrency") {
			t.Errorf("set %q: error %v, want one naming upload.concurrency and containing %q", tc.in, err, tc.want)
		}
	}
	// A number out of range is Validate's to refuse, after every source
	// is applied, so that a flag can override it.
	for _, n := range []string{"257", "0", "-3"} {
		c := Default(func(string) string { return "" })
		if err := c.SetFrom(Source{Kind: SourceEnv, Name: "TILECTL_UPLOAD_CONCURRENCY"}, "upload.concurrency", n); err != nil {
			t.Fatal(err)
		}
		c.Complete()
		want := "upload.concurrency (from env TILECTL_UPLOAD_CONCURRENCY): must be auto or 1..256, got " + n
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q", err, want)
		}
	}
	// From a file, the line is named.
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("upload:\n  concurrency: many\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path, func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), `line 2: upload.concurrency: want auto or a number of batches from 1 to 256, got "many"`) {
		t.Errorf("Load = %v, want the line and the key", err)
	}
}

func TestAClientIDMakesAutoConcurrencyOne(t *testing.T) {
	c := Default(func(string) string { return "" })
	if err := c.SetFrom(Source{Kind: SourceFile, Name: "c.yaml"}, "upload.concurrency", "auto"); err != nil {
		t.Fatal(err)
	}
	c.Upload.ClientID = "ground-1"
	c.Complete()
	if c.Upload.Concurrency != 1 {
		t.Fatalf("concurrency %v with a client ID and auto, want 1", c.Upload.Concurrency)
	}
}

func valueOf(t *testing.T, c *Config, key string) string {
	t.Helper()
	for _, f := range c.Fields() {
		if f.Key == key {
			return f.Value()
		}
	}
	t.Fatalf("no field %s", key)
	return ""
}
