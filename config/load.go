package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// LookupEnv reads an environment variable; os.LookupEnv in production, a map
// in tests.
type LookupEnv func(key string) (string, bool)

// Load builds a Config from the defaults, then the YAML file at path (when
// path is "", the file Discover finds: $TILECTL_CONFIG,
// $XDG_CONFIG_HOME/tilectl/config.yaml or ~/.config/tilectl/config.yaml,
// /etc/tilectl/config.yaml; no file when none exists), then the
// environment. Flags are applied afterwards by the caller (SetFrom),
// followed by Complete and Validate. Every value set records its Source.
func Load(path string, env LookupEnv) (*Config, error) {
	if env == nil {
		env = os.LookupEnv
	}
	getenv := func(k string) string { v, _ := env(k); return v }
	c := Default(getenv)
	if path == "" {
		p, err := Discover(env)
		if err != nil {
			return nil, err
		}
		path = p
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config file: %w", err)
		}
		c.file = path
		if err := c.applyYAML(data); err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	if err := c.applyEnv(env); err != nil {
		return nil, err
	}
	return c, nil
}

// applyEnv sets every field whose TILECTL_* variable is set and non-empty.
func (c *Config) applyEnv(env LookupEnv) error {
	var errs []error
	for _, f := range c.Fields() {
		s, ok := env(f.Env)
		if !ok || s == "" {
			continue
		}
		if err := setString(f.v, s); err != nil {
			errs = append(errs, fmt.Errorf("environment %s: %w", f.Env, err))
			continue
		}
		c.noteSource(f.Key, Source{Kind: SourceEnv, Name: f.Env})
	}
	return errors.Join(errs...)
}

// applyYAML overlays a YAML document on c. It walks the node tree itself,
// rather than decoding into the struct, so that an unknown key and a bad
// value are both reported with their full key path and line, and so that a
// value is parsed exactly as its environment variable would be.
func (c *Config) applyYAML(data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil // empty file: nothing to overlay
	}
	root := doc.Content[0]
	if isNull(root) {
		return nil
	}
	var errs []error
	note := func(key string, line int) { c.noteSource(key, Source{Kind: SourceFile, Name: c.file, Line: line}) }
	applyMapping(reflect.ValueOf(c).Elem(), root, "", note, &errs)
	return errors.Join(errs...)
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func applyMapping(v reflect.Value, n *yaml.Node, prefix string, note func(key string, line int), errs *[]error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		where := strings.TrimSuffix(prefix, ".")
		if where == "" {
			where = "top level"
		}
		*errs = append(*errs, fmt.Errorf("line %d: %s: want a mapping of keys, got %s", n.Line, where, nodeKind(n)))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		key := prefix + kn.Value
		fv, ok := fieldByName(v, kn.Value)
		if kn.Kind != yaml.ScalarNode || !ok {
			*errs = append(*errs, fmt.Errorf("line %d: unknown key %q (known keys here: %s)",
				kn.Line, key, strings.Join(knownKeys(v.Type()), ", ")))
			continue
		}
		if vn.Kind == yaml.AliasNode {
			vn = vn.Alias
		}
		if isSection(fv.Type()) {
			if isNull(vn) {
				continue // "upload:" with nothing under it changes nothing
			}
			applyMapping(fv, vn, key+".", note, errs)
			continue
		}
		if vn.Kind != yaml.ScalarNode {
			*errs = append(*errs, fmt.Errorf("line %d: %s: want %s, got %s", vn.Line, key, kindName(fv.Type()), nodeKind(vn)))
			continue
		}
		val := vn.Value
		if isNull(vn) {
			if fv.Kind() != reflect.String && fv.Type() != secretType {
				*errs = append(*errs, fmt.Errorf("line %d: %s: want %s, got nothing", vn.Line, key, kindName(fv.Type())))
				continue
			}
			val = ""
		}
		if err := setString(fv, val); err != nil {
			*errs = append(*errs, fmt.Errorf("line %d: %s: %w", vn.Line, key, err))
			continue
		}
		note(key, vn.Line)
	}
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a single value"
	}
	return "nothing"
}

func knownKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if n := yamlName(t.Field(i)); n != "" {
			keys = append(keys, n)
		}
	}
	sort.Strings(keys)
	return keys
}
