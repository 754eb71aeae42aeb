package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
)

// SourceKind says where a configuration value came from.
type SourceKind string

// Where a value can come from, lowest precedence first.
const (
	SourceDefault SourceKind = "default"
	SourceFile    SourceKind = "file"
	SourceEnv     SourceKind = "env"
	SourceFlag    SourceKind = "flag"
)

// Source is where one field's value came from: its kind and, for a file,
// the file's path and line; for the environment, the variable; for a flag,
// the flag (and, for a file-valued flag such as --provider-token-file, the
// file). Error messages and `tilectl config view` print it so an operator
// knows what to change.
type Source struct {
	Kind SourceKind `json:"kind"`
	// Name is the config file's path, the environment variable or the flag
	// ("--provider-url"); "" for a default.
	Name string `json:"name,omitempty"`
	// Line is the line in the config file, 0 otherwise.
	Line int `json:"line,omitempty"`
	// File is the file a flag or variable named (--provider-token-file).
	File string `json:"file,omitempty"`
}

// String is the source as an error message says it: "default", "env
// TILECTL_PROVIDER_URL", "file /etc/tilectl/config.yaml:4", "flag
// --provider-url", "flag --provider-token-file (file /run/secrets/t)".
func (s Source) String() string {
	switch s.Kind {
	case "", SourceDefault:
		return "default"
	case SourceFile:
		if s.Line > 0 {
			return fmt.Sprintf("file %s:%d", s.Name, s.Line)
		}
		return "file " + s.Name
	}
	out := string(s.Kind) + " " + s.Name
	if s.File != "" {
		out += " (file " + s.File + ")"
	}
	return out
}

// Source returns where the field with key path key got its value; the zero
// Source (a default) for a field nobody set.
func (c *Config) Source(key string) Source {
	if s, ok := c.sources[key]; ok {
		return s
	}
	return Source{Kind: SourceDefault}
}

// Origin names key with where its value came from, as FieldError does, for
// errors about the value found later: "database_url (from flag --database-url)".
func (c *Config) Origin(key string) string {
	return fmt.Sprintf("%s (from %s)", key, c.Source(key))
}

// SetFrom assigns one field, as Set does, and records src as its source.
// A value that does not parse is an error naming the key and src.
func (c *Config) SetFrom(src Source, key, value string) error {
	for _, f := range c.Fields() {
		if f.Key == key {
			if err := setString(f.v, value); err != nil {
				return fmt.Errorf("%s (from %s): %w", key, src, err)
			}
			c.noteSource(key, src)
			return nil
		}
	}
	if err := c.Set(key, value); err != nil {
		return err
	}
	c.noteSource(key, src)
	return nil
}

// SetToken sets the provider token and records where it came from; the
// root command uses it for --provider-token-file.
func (c *Config) SetToken(src Source, token string) {
	c.ProviderToken = NewSecret(token)
	c.noteSource("provider_token", src)
}

// noteSource copies the map before changing it: a Config is copied by value
// (a test hands each run a copy of its configuration, and the flags are
// set on that copy) and copies must not share later changes.
func (c *Config) noteSource(key string, src Source) {
	m := maps.Clone(c.sources)
	if m == nil {
		m = map[string]Source{}
	}
	m[key] = src
	c.sources = m
}

// File is the config file that was read, "" when none was.
func (c *Config) File() string { return c.file }

// SystemConfigFile is the last place discovery looks.
const SystemConfigFile = "/etc/tilectl/config.yaml"

// systemConfigFile is SystemConfigFile; tests point it elsewhere.
var systemConfigFile = SystemConfigFile

// Discover returns the config file to read when --config is not given: the
// first of $TILECTL_CONFIG, $XDG_CONFIG_HOME/tilectl/config.yaml (else
// ~/.config/tilectl/config.yaml) and /etc/tilectl/config.yaml that exists.
// $TILECTL_CONFIG is returned whether or not it exists (naming a missing
// file is a mistake to report); "" means no file.
func Discover(env LookupEnv) (string, error) {
	if env == nil {
		env = os.LookupEnv
	}
	getenv := func(k string) string { v, _ := env(k); return v }
	if p := getenv(ConfigFileEnv); p != "" {
		return p, nil
	}
	for _, p := range discoveryPaths(getenv) {
		_, err := os.Stat(p)
		switch {
		case err == nil:
			return p, nil
		case errors.Is(err, fs.ErrNotExist):
			continue
		default:
			return "", fmt.Errorf("look for a config file at %s: %w", p, err)
		}
	}
	return "", nil
}

// DiscoveryPaths lists, in order, where Discover looks after
// $TILECTL_CONFIG, for help texts and `config view`.
func DiscoveryPaths(env LookupEnv) []string {
	if env == nil {
		env = os.LookupEnv
	}
	return discoveryPaths(func(k string) string { v, _ := env(k); return v })
}

func discoveryPaths(getenv func(string) string) []string {
	var out []string
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		out = append(out, filepath.Join(x, "tilectl", "config.yaml"))
	} else if home := homeDir(getenv); home != "" {
		out = append(out, filepath.Join(home, ".config", "tilectl", "config.yaml"))
	}
	return append(out, systemConfigFile)
}

func homeDir(getenv func(string) string) string {
	if h := getenv("HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}
