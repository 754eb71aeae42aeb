package config

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"
)

// Redacted is what a set Secret shows instead of its value.
const Redacted = "[redacted]"

// Secret holds a value that must never be printed: every formatting and
// marshalling path (fmt verbs, JSON, YAML, text, zerolog) shows Redacted when
// it is set and "" when it is not. Reveal is the one way to read it, so a
// grep for Reveal finds every place the value leaves the process.
type Secret struct {
	value string
}

// NewSecret wraps a value.
func NewSecret(v string) Secret { return Secret{value: v} }

// Reveal returns the value. Use it only to put the value on the wire.
func (s Secret) Reveal() string { return s.value }

// IsSet reports whether the secret has a value.
func (s Secret) IsSet() bool { return s.value != "" }

func (s Secret) shown() string {
	if s.value == "" {
		return ""
	}
	return Redacted
}

// String shows Redacted (or "" when unset).
func (s Secret) String() string { return s.shown() }

// GoString keeps %#v from printing the struct's field.
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.shown()) }

// Format covers every fmt verb, including ones (%d, %x on a struct) that
// would otherwise print the field by reflection.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = io.WriteString(f, s.GoString())
		return
	}
	_, _ = io.WriteString(f, s.shown())
}

// MarshalJSON emits Redacted (or "").
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.shown()) }

// MarshalText emits Redacted (or "").
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.shown()), nil }

// MarshalYAML emits Redacted (or "").
func (s Secret) MarshalYAML() (any, error) { return s.shown(), nil }

// UnmarshalYAML reads a plain string. A non-string is refused without
// echoing the value.
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "") {
		return fmt.Errorf("line %d: must be a string", n.Line)
	}
	s.value = n.Value
	return nil
}

// MarshalZerologObject logs whether the secret is set, never its value.
func (s Secret) MarshalZerologObject(e *zerolog.Event) {
	e.Bool("set", s.IsSet())
	if s.IsSet() {
		e.Str("value", Redacted)
	}
}

var (
	_ fmt.Stringer               = Secret{}
	_ fmt.GoStringer             = Secret{}
	_ fmt.Formatter              = Secret{}
	_ json.Marshaler             = Secret{}
	_ yaml.Marshaler             = Secret{}
	_ yaml.Unmarshaler           = (*Secret)(nil)
	_ zerolog.LogObjectMarshaler = Secret{}
)
