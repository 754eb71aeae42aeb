package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// upload.order is zoom unless set; a bad value, from any source, is
// refused naming the key, the value, what is allowed and where it came from.
func TestUploadOrderIsZoomOrIDAndABadOneNamesItsSource(t *testing.T) {
	c := mustLoad(t, "", map[string]string{"HOME": "/home/pilot", "TILECTL_UPLOAD_ORDER": "id"})
	c.Complete()
	if err := c.Validate(); err != nil || c.Upload.Order != "id" {
		t.Fatalf("order %q, %v; want id from the environment", c.Upload.Order, err)
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	writeAt(t, file, "upload:\n  order: lowest\n")
	for _, tc := range []struct {
		name string
		path string
		env  map[string]string
		from string
	}{
		{"environment", "", map[string]string{"HOME": "/home/pilot", "TILECTL_UPLOAD_ORDER": "Zoom"}, "TILECTL_UPLOAD_ORDER"},
		{"file", file, map[string]string{"HOME": "/home/pilot"}, file + ":2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustLoad(t, tc.path, tc.env)
			c.Complete()
			err := c.Validate()
			if err == nil {
				t.Fatal("a bad upload.order validated")
			}
			for _, want := range []string{"upload.order", "must be one of zoom, id", tc.from} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}
