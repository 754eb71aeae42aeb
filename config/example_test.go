package config

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// examplePath is the /etc/tilectl/config.yaml the package installs.
const examplePath = "../packaging/etc/config.yaml"

// The packaged example changes nothing as installed: loading it gives the
// defaults, every value still sourced "default".
func TestThePackagedExampleChangesNothingAsInstalled(t *testing.T) {
	c, err := Load(examplePath, noEnv)
	if err != nil {
		t.Fatalf("loading %s as installed: %v", examplePath, err)
	}
	for _, f := range c.Fields() {
		if s := c.Source(f.Key); s.Kind != SourceDefault {
			t.Errorf("%s is set by the example as installed (source %v); every key must stay commented out", f.Key, s)
		}
	}
}

// The example names every key, and with every "#key: value" line
// uncommented it is a valid file that sets each of them.
func TestThePackagedExampleNamesEveryKeyAndIsValidUncommented(t *testing.T) {
	b, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	uncommented := regexp.MustCompile(`(?m)^(\s*)#([a-z_]+:.*)$`).ReplaceAllString(string(b), "$1$2")
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(uncommented), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, noEnv)
	if err != nil {
		t.Fatalf("the example with its keys uncommented does not load: %v\n%s", err, uncommented)
	}
	c.Complete()
	if err := c.Validate(); err != nil {
		// The example's certificate paths name files of the machine it is
		// installed on; here only their other checks count.
		for _, e := range unwrapJoined(err) {
			var fe *FieldError
			if errors.As(e, &fe) && strings.HasPrefix(fe.Key, "provider_") && strings.Contains(fe.Allowed, "readable") {
				continue
			}
			t.Errorf("the example with its keys uncommented is not valid: %v", e)
		}
	}
	for _, f := range c.Fields() {
		if s := c.Source(f.Key); s.Kind != SourceFile {
			t.Errorf("the example has no commented line for %s (add \"#%s: <value>\" to %s)",
				f.Key, f.Key[strings.LastIndex(f.Key, ".")+1:], examplePath)
		}
	}
}

func noEnv(string) (string, bool) { return "", false }

func unwrapJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
