package chaos

// fingerprintFor is the fingerprint the provider should have recorded for
// batch b: the client journals the one it computed from the members it
// sends, and both sides follow provider-api.md ("the flight, and each
// tile's tile_id and sha256 in manifest order"), so they must agree.
func fingerprintFor(flightID string, b clientBatch) string {
	_ = flightID
	return b.Fingerprint
}
