package operation

import "github.com/google/uuid"

// NewID mints an operation ID: a UUIDv7, so IDs sort by creation time
// (useful in tables and logs), and its 36 characters of hex and '-' are a
// valid Idempotency-Key. It panics only if the system's random source fails,
// after which nothing else would work either.
func NewID() string {
	return uuid.Must(uuid.NewV7()).String()
}
