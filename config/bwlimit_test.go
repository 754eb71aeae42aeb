package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestABadBandwidthLimitNamesTheValueItsSourceAndWhatToWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, []byte("upload:\n  concurrency: 2\n  bwlimit: \"08:00,512k 25:00,1M\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noEnv := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		name string
		load func() (*Config, error)
		want []string
	}{
		{"file", func() (*Config, error) { return Load(file, noEnv) }, []string{
			"upload.bwlimit (from file " + file + ":3)", `time "25:00"`, `got "08:00,512k 25:00,1M"`}},
		{"env", func() (*Config, error) {
			return Load("", func(k string) (string, bool) {
				if k == "TILECTL_UPLOAD_BWLIMIT" {
					return "10X", true
				}
				return "", false
			})
		}, []string{"upload.bwlimit (from env TILECTL_UPLOAD_BWLIMIT)", `unknown unit "X"`, `got "10X"`}},
		{"flag", func() (*Config, error) {
			c, err := Load("", noEnv)
			if err == nil {
				err = c.SetFrom(Source{Kind: SourceFlag, Name: "--bwlimit"}, "upload.bwlimit", "fast")
			}
			return c, err
		}, []string{"upload.bwlimit (from flag --bwlimit)", `got "fast"`}},
	} {
		c, err := tc.load()
		if err != nil {
			t.Fatalf("%s: load: %v", tc.name, err)
		}
		c.CacheDir = dir
		c.Complete()
		err = c.Validate()
		for _, want := range append(tc.want, "512k, 10M or 1.5M", `"08:00,512k 18:00,10M 23:00,off"`) {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: Validate() = %v, want it to say %q", tc.name, err, want)
			}
		}
	}
}
