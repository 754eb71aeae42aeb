package config

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeDocumentsEveryField keeps the README's configuration reference
// in step with the struct: a new field without a row fails here.
func TestReadmeDocumentsEveryField(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, f := range Default(nil).Fields() {
		row := "| `" + f.Key + "` | `" + f.Env + "` |"
		if !strings.Contains(readme, row) {
			t.Errorf("README has no configuration row starting %s", row)
		}
	}
}
