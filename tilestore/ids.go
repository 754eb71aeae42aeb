package tilestore

import (
	"errors"
	"fmt"
)

// ErrInvalidID is matched by every error from ValidateFlightID and
// ValidateTileID.
var ErrInvalidID = errors.New("invalid ID")

const maxIDLen = 128

// ValidateFlightID checks that id is 1-128 characters of [A-Za-z0-9._-] and
// does not start with '.' or '-'. IDs reach file paths, URLs and log lines,
// so anything else (quotes, separators, control characters) is refused.
func ValidateFlightID(id string) error { return validateID("flight", id) }

// ValidateTileID applies the same rule as ValidateFlightID to a tile ID.
func ValidateTileID(id string) error { return validateID("tile", id) }

func validateID(kind, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: %s ID is empty", ErrInvalidID, kind)
	case len(id) > maxIDLen:
		return fmt.Errorf("%w: %s ID %q is %d bytes long (at most %d)", ErrInvalidID, kind, clip(id), len(id), maxIDLen)
	case id[0] == '.' || id[0] == '-':
		return fmt.Errorf("%w: %s ID %q starts with %q", ErrInvalidID, kind, id, id[0])
	}
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			return fmt.Errorf("%w: %s ID %q has a character outside [A-Za-z0-9._-] at byte %d", ErrInvalidID, kind, id, i)
		}
	}
	return nil
}

func idByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// clip shortens a value for an error message.
func clip(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:40] + "..."
}

func validateTileIDs(ids []string) error {
	for _, id := range ids {
		if err := ValidateTileID(id); err != nil {
			return err
		}
	}
	return nil
}
