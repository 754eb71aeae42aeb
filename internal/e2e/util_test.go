package e2e

import (
	"os"
	"strconv"
	"testing"

	"github.com/tilectl/tilectl/provider"
)

var noFaults = provider.FaultConfig{}

func writeFile(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
