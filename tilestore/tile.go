// Package tilestore keeps tile metadata in Postgres and tile bytes in a
// filesystem cache, and is the only code that writes the tiles, flights,
// upload_batches, upload_rejections and upload_client_sequences tables.
//
// It promises: set-based statements where many rows change, typed errors for
// what callers tell apart (ErrTileNotFound, ErrFlightNotFound), blob
// paths that can never leave the cache root, and, for strict client
// sequencing, a batch's number journaled with it and one open batch per
// client sequence stream (sequence.go).
package tilestore

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// VotingStatus is where a tile stands. The navigation system's voting sets
// pending, trusted and rejected; the uploader sets uploaded and upload_giveup.
type VotingStatus string

const (
	StatusPending      VotingStatus = "pending"
	StatusTrusted      VotingStatus = "trusted"
	StatusRejected     VotingStatus = "rejected"
	StatusUploaded     VotingStatus = "uploaded"
	StatusUploadGiveup VotingStatus = "upload_giveup"
)

// VotingStatuses are every status, in the order tilectl shows them.
var VotingStatuses = []VotingStatus{StatusPending, StatusTrusted, StatusRejected, StatusUploaded, StatusUploadGiveup}

// zeroCounts is a count for every status, each 0.
func zeroCounts() map[VotingStatus]int64 {
	m := make(map[VotingStatus]int64, len(VotingStatuses))
	for _, s := range VotingStatuses {
		m[s] = 0
	}
	return m
}

// Uploadable reports whether tiles in this status are sent to the provider:
// pending and trusted are; rejected (by the vote), uploaded and upload_giveup
// are not.
func (s VotingStatus) Uploadable() bool { return s == StatusPending || s == StatusTrusted }

// Valid reports whether s is one of the known statuses.
func (s VotingStatus) Valid() bool {
	switch s {
	case StatusPending, StatusTrusted, StatusRejected, StatusUploaded, StatusUploadGiveup:
		return true
	}
	return false
}

// FlightState says whether a flight's aircraft is still in the air.
type FlightState string

const (
	FlightAirborne FlightState = "airborne"
	FlightOnGround FlightState = "on_ground"
)

// Tile is one map tile's metadata. Its bytes live at BlobPath under the
// cache root.
type Tile struct {
	ID             string
	FlightID       string
	Z              int
	X, Y           int64
	ContentType    string
	SizeBytes      int64
	SHA256         string // 64 lowercase hex characters
	BlobPath       string // relative to the cache root, slash-separated
	CapturedAt     time.Time
	VotingStatus   VotingStatus
	UploadAttempts int
	UploadedAt     *time.Time
	CreatedAt      time.Time
}

// Flight is a flight and its state.
type Flight struct {
	ID        string
	State     FlightState
	CreatedAt time.Time
	UpdatedAt time.Time
}

// FlightCounts is how many of a flight's tiles are in each status.
type FlightCounts struct {
	FlightID string
	State    FlightState
	ByStatus map[VotingStatus]int64
}

// GiveUp is a tile that ran out of upload attempts.
type GiveUp struct {
	TileID      string
	FlightID    string
	Attempts    int
	LastReason  string
	LastMessage string
	GaveUpAt    time.Time
	// Generation numbers the tile's give-ups: 1 for its first, one more
	// each time it gives up again after being moved back to pending (a
	// requeue). It names this give-up (the FDR key), whatever the attempt
	// count it happened at.
	Generation int
}

// Rejection is one answer that rejected one tile: a provider's rejection in a
// settled batch (OpID is the batch's operation ID) or a local one such as a
// missing blob. (OpID, TileID) is unique: recording it twice is a no-op.
type Rejection struct {
	OpID    string
	TileID  string
	Reason  string
	Message string
}

// Batch is an upload operation as recorded before its first byte is sent.
type Batch struct {
	OpID        string
	FlightID    string
	Fingerprint string
	TileIDs     []string
	SHA256s     []string
	Sends       int
	CreatedAt   time.Time
	// ClientID and ClientSeq are the batch's strict client sequence
	// (Client-Id, Client-Sequence): set by a claim with a Claim.Stream, and
	// sent with every resend of the batch. "" and 0 for a batch without.
	ClientID  string
	ClientSeq uint64
	// NotBefore is when the provider's advice lets the batch go again
	// (Store.DeferBatch), by the database's clock; nil when it asked for
	// no wait. NotBeforeIn is how long that was from the read, by the same
	// clock (0 when due), so a host whose clock differs still waits as
	// long as advised.
	NotBefore   *time.Time
	NotBeforeIn time.Duration
}

// Settlement is what a batch's answer decided, applied in one transaction.
type Settlement struct {
	OpID       string
	Uploaded   []string    // accepted or duplicate: marked uploaded
	Rejections []Rejection // recorded for the retry decorator to count
	HTTPStatus int
	Detail     string
}

// CountResult is what counting rejections did.
type CountResult struct {
	Counted  int            // rejections added to upload_attempts
	Attempts map[string]int // tile ID -> attempts after counting
	GaveUp   []GiveUp       // tiles moved to upload_giveup
	// Last is the greatest tile ID counted (in the database's order), the
	// cursor of CountRejectionsUpTo's next chunk; "" when none was.
	Last string
}

// ErrTileNotFound is returned when a named tile does not exist.
var ErrTileNotFound = errors.New("tile not found")

// ErrFlightNotFound is returned when a named flight does not exist.
var ErrFlightNotFound = errors.New("flight not found")

// ErrBatchNotFound is returned when an operation ID names no recorded batch.
var ErrBatchNotFound = errors.New("upload batch not found")

// UnknownTilesError names tiles that an operation referred to but that do
// not exist. errors.Is(err, ErrTileNotFound) holds.
type UnknownTilesError struct{ IDs []string }

func (e *UnknownTilesError) Error() string {
	const show = 5
	ids := e.IDs
	more := ""
	if len(ids) > show {
		more = fmt.Sprintf(" and %d more", len(ids)-show)
		ids = ids[:show]
	}
	return fmt.Sprintf("unknown tile(s) %s%s", strings.Join(ids, ", "), more)
}

func (e *UnknownTilesError) Is(target error) bool { return target == ErrTileNotFound }
