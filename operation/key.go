package operation

import (
	"errors"
	"fmt"
)

// Idempotency-Key length limits (docs/provider-api.md).
const (
	MinIdempotencyKeyLen = 16
	MaxIdempotencyKeyLen = 128
)

var (
	// ErrIdempotencyKeyMissing: no key, or an empty one (400 IDEMPOTENCY_KEY_MISSING).
	ErrIdempotencyKeyMissing = errors.New("idempotency key missing")
	// ErrIdempotencyKeyInvalid is wrapped by every other rejection (400 INVALID_REQUEST).
	ErrIdempotencyKeyInvalid = errors.New("invalid idempotency key")
)

// ParseIdempotencyKey validates an Idempotency-Key header value and returns
// the bare key: 16 to 128 characters of [A-Za-z0-9_-], optionally wrapped in
// double quotes. The error says what is wrong with it.
func ParseIdempotencyKey(header string) (string, error) {
	k := header
	if len(k) > 0 && k[0] == '"' {
		if len(k) < 2 || k[len(k)-1] != '"' {
			return "", fmt.Errorf("%w: opening quote without a closing one", ErrIdempotencyKeyInvalid)
		}
		k = k[1 : len(k)-1]
	}
	if k == "" {
		return "", ErrIdempotencyKeyMissing
	}
	if len(k) < MinIdempotencyKeyLen || len(k) > MaxIdempotencyKeyLen {
		return "", fmt.Errorf("%w: %d characters, want %d to %d", ErrIdempotencyKeyInvalid, len(k), MinIdempotencyKeyLen, MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "", fmt.Errorf("%w: byte %d is %q, want only A-Z a-z 0-9 _ -", ErrIdempotencyKeyInvalid, i, c)
		}
	}
	return k, nil
}
