package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadYAML: no input makes the loader panic, and whatever it accepts
// validates or fails with an error, never a panic. Seeds: testdata/seeds.
func FuzzLoadYAML(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "seeds", "*.yaml"))
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("upload:\n  concurrency: 8\nretry:\n  backoff_base: 2s\n"))
	f.Add([]byte("a: &x {b: *x}\n"))
	f.Add([]byte("upload: &u {concurrency: 2}\nretry: *u\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := Default(func(string) string { return "" })
		if err := c.applyYAML(data); err != nil {
			return
		}
		c.Complete()
		_ = c.Validate()
	})
}
