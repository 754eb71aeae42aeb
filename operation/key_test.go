package operation

import (
	"errors"
	"sort"
	"strings"
	"testing"
)

func TestParseIdempotencyKey(t *testing.T) {
	t.Parallel()
	k16 := strings.Repeat("a", 16)
	k128 := strings.Repeat("Z", 128)
	tests := []struct {
		in, want string
		wantErr  error
		mention  string
	}{
		{k16, k16, nil, ""},
		{k128, k128, nil, ""},
		{`"` + k16 + `"`, k16, nil, ""},
		{"0190d5f2-7c1e-7a3b-9f00-abcdef012345", "0190d5f2-7c1e-7a3b-9f00-abcdef012345", nil, ""},
		{"abc_DEF-0123456789", "abc_DEF-0123456789", nil, ""},
		{"", "", ErrIdempotencyKeyMissing, ""},
		{`""`, "", ErrIdempotencyKeyMissing, ""},
		{strings.Repeat("a", 15), "", ErrIdempotencyKeyInvalid, "15 characters"},
		{strings.Repeat("a", 129), "", ErrIdempotencyKeyInvalid, "129 characters"},
		{`"` + k16, "", ErrIdempotencyKeyInvalid, "quote"},
		{`"`, "", ErrIdempotencyKeyInvalid, "quote"},
		{k16 + `"`, "", ErrIdempotencyKeyInvalid, `'"'`},
		{"aaaaaaaa aaaaaaaa", "", ErrIdempotencyKeyInvalid, "byte 8"},
		{"aaaaaaaa.aaaaaaaa", "", ErrIdempotencyKeyInvalid, `'.'`},
		{"aaaaaaaaaaaaaaaé", "", ErrIdempotencyKeyInvalid, "byte 15"},
	}
	for _, tt := range tests {
		got, err := ParseIdempotencyKey(tt.in)
		if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("ParseIdempotencyKey(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.wantErr)
			continue
		}
		if tt.mention != "" && !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("ParseIdempotencyKey(%q) error %q does not say %q", tt.in, err, tt.mention)
		}
	}
}

func TestNewIDIsAValidTimeOrderedKey(t *testing.T) {
	t.Parallel()
	ids := make([]string, 200)
	seen := map[string]bool{}
	for i := range ids {
		ids[i] = NewID()
		if _, err := ParseIdempotencyKey(ids[i]); err != nil {
			t.Fatalf("NewID() = %q is not a valid key: %v", ids[i], err)
		}
		if ids[i][14] != '7' {
			t.Fatalf("NewID() = %q is not version 7", ids[i])
		}
		if seen[ids[i]] {
			t.Fatalf("duplicate id %q", ids[i])
		}
		seen[ids[i]] = true
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatal("ids minted in sequence do not sort in sequence")
	}
}

func FuzzParseIdempotencyKey(f *testing.F) {
	for _, s := range []string{"0190d5f2-7c1e-7a3b-9f00-abcdef012345", `"abcdefghijklmnop"`, `"`, "", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseIdempotencyKey(s)
		if err != nil {
			if k != "" {
				t.Fatalf("error with a key: %q, %v", k, err)
			}
			return
		}
		// A valid key parses to itself, bare and quoted.
		for _, in := range []string{k, `"` + k + `"`} {
			if k2, err := ParseIdempotencyKey(in); err != nil || k2 != k {
				t.Fatalf("ParseIdempotencyKey(%q) = %q, %v; want %q", in, k2, err, k)
			}
		}
	})
}
