package config

import "fmt"

// SourceKind is where a configuration value came from.
type SourceKind string

const (
	SourceDefault SourceKind = "default"
	SourceFile    SourceKind = "file"
	SourceEnv     SourceKind = "env"
	SourceFlag    SourceKind = "flag"
)

// Source says where one field's value came from: Kind, and Name, which is
// the flag ("--cache-dir"), the variable ("TILECTL_CACHE_DIR"), the file
// and line ("/etc/tilectl.yaml:3") or, for a default, how it was derived
// ("$XDG_CACHE_HOME/tilectl"; may be "").
type Source struct {
	Kind SourceKind
	Name string
}

// String is how errors name a source: "flag --cache-dir", "environment
// TILECTL_CACHE_DIR", "config file /etc/tilectl.yaml:3", "default".
func (s Source) String() string {
	switch s.Kind {
	case SourceFlag:
		return "flag " + s.Name
	case SourceEnv:
		return "environment " + s.Name
	case SourceFile:
		return "config file " + s.Name
	}
	if s.Name != "" {
		return fmt.Sprintf("default (%s)", s.Name)
	}
	return "default"
}

// Source returns where the field with key path key got its value; a field
// nothing set is SourceDefault.
func (c *Config) Source(key string) Source {
	if s, ok := c.sources[key]; ok {
		return s
	}
	return Source{Kind: SourceDefault}
}

// SetFrom is Set that also records where the value came from.
func (c *Config) SetFrom(src Source, key, value string) error {
	if err := c.Set(key, value); err != nil {
		return err
	}
	c.setSource(key, src)
	return nil
}

func (c *Config) setSource(key string, src Source) {
	if c.sources == nil {
		c.sources = map[string]Source{}
	}
	c.sources[key] = src
}
