package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// EnvPrefix starts every environment variable tilectl reads.
const EnvPrefix = "TILECTL_"

// ConfigFileEnv names the config file when --config is not given.
const ConfigFileEnv = "TILECTL_CONFIG"

// Field describes one settable configuration value.
type Field struct {
	Key string // YAML key path, e.g. "upload.concurrency"
	Env string // environment variable, e.g. "TILECTL_UPLOAD_CONCURRENCY"
	v   reflect.Value
}

// Fields lists every leaf field of c in declaration order. Key and Env are
// derived from the yaml tags, so the file, the environment and Set can never
// disagree about names.
func (c *Config) Fields() []Field {
	var out []Field
	walk(reflect.ValueOf(c).Elem(), "", func(key string, v reflect.Value) {
		out = append(out, Field{Key: key, Env: envName(key), v: v})
	})
	return out
}

var (
	secretType      = reflect.TypeOf(Secret{})
	durationType    = reflect.TypeOf(time.Duration(0))
	concurrencyType = reflect.TypeOf(Concurrency(0))
)

// isSection reports whether t is a nested block of keys rather than a value.
func isSection(t reflect.Type) bool { return t.Kind() == reflect.Struct && t != secretType }

func walk(v reflect.Value, prefix string, leaf func(key string, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		name := yamlName(t.Field(i))
		if name == "" {
			continue
		}
		key := prefix + name
		if isSection(t.Field(i).Type) {
			walk(v.Field(i), key+".", leaf)
			continue
		}
		leaf(key, v.Field(i))
	}
}

func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

func envName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// fieldByName finds the field of struct value v whose yaml name is name.
func fieldByName(v reflect.Value, name string) (reflect.Value, bool) {
	if name == "" {
		// yamlName is "" for unexported fields: an empty key ("?" in
		// YAML) must not reach them.
		return reflect.Value{}, false
	}
	t := v.Type()
	for i := range t.NumField() {
		if yamlName(t.Field(i)) == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// Set assigns one field by its key path from its string form, as a flag or
// an environment variable would. Durations are Go durations ("2s", "30m").
func (c *Config) Set(key, value string) error {
	for _, f := range c.Fields() {
		if f.Key == key {
			if err := setString(f.v, value); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			return nil
		}
	}
	return fmt.Errorf("unknown configuration key %q", key)
}

// Value returns a field's current value in its string form (the token shows
// as redacted), for documentation and debugging.
func (f Field) Value() string {
	if f.v.Type() == secretType {
		return f.v.Interface().(Secret).String()
	}
	if f.v.Type() == durationType {
		return f.v.Interface().(time.Duration).String()
	}
	if f.v.Type() == concurrencyType {
		return f.v.Interface().(Concurrency).String()
	}
	if strings.HasSuffix(f.Key, "_url") {
		return redactURL(f.v.String())
	}
	return fmt.Sprint(f.v.Interface())
}

// setString parses s into v. Its errors quote s, so it must never be given
// a value of the secret's type to fail on: Secret accepts any string.
func setString(v reflect.Value, s string) error {
	switch {
	case v.Type() == secretType:
		v.Set(reflect.ValueOf(NewSecret(s)))
	case v.Type() == durationType:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want a duration such as 2s or 30m, got %q", s)
		}
		v.SetInt(int64(d))
	case v.Type() == concurrencyType:
		n, err := parseConcurrency(s)
		if err != nil {
			return err
		}
		v.SetInt(int64(n))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want true or false, got %q", s)
		}
		v.SetBool(b)
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("want an integer, got %q", s)
		}
		v.SetInt(n)
	default:
		return fmt.Errorf("unsupported field type %s", v.Type())
	}
	return nil
}

// kindName says what a field wants, for errors about non-scalar YAML.
func kindName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration"
	case t == concurrencyType:
		return "auto or a number of batches"
	case t == secretType || t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Bool:
		return "true or false"
	default:
		return "an integer"
	}
}

// MarshalZerologObject logs the effective configuration, one key per field;
// the token shows as redacted.
func (c *Config) MarshalZerologObject(e *zerolog.Event) {
	for _, f := range c.Fields() {
		e.Str(f.Key, f.Value())
	}
}
