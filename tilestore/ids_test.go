package tilestore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/tilestore"
)

func TestValidateIDAcceptsOnlySafeCharacters(t *testing.T) {
	t.Parallel()
	cases := []struct {
		id string
		ok bool
	}{
		{"F1", true},
		{"flight_2026-05-01.a", true},
		{"0", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{".hidden", false},
		{"-rf", false},
		{"a/b", false},
		{`a\b`, false},
		{"../etc", false},
		{"x'; DROP TABLE tiles; --", false},
		{`q"uote`, false},
		{"tab\there", false},
		{"nl\nhere", false},
		{"nul\x00", false},
		{"ünïcode", false},
		{"space here", false},
	}
	for _, tc := range cases {
		for name, validate := range map[string]func(string) error{
			"flight": tilestore.ValidateFlightID, "tile": tilestore.ValidateTileID,
		} {
			err := validate(tc.id)
			if tc.ok && err != nil {
				t.Errorf("%s ID %q refused: %v", name, tc.id, err)
			}
			if !tc.ok {
				if !errors.Is(err, tilestore.ErrInvalidID) {
					t.Errorf("%s ID %q: err = %v, want ErrInvalidID", name, tc.id, err)
					continue
				}
				// The message quotes the value, so control characters
				// cannot forge log lines.
				if strings.ContainsAny(err.Error(), "\n\t\x00") {
					t.Errorf("%s ID %q: message has a raw control character: %q", name, tc.id, err.Error())
				}
			}
		}
	}
}
