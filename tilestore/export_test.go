package tilestore

// PendingUploadsSQL lets the tests EXPLAIN the real query.
const PendingUploadsSQL = pendingUploadsSQL

// AfterClaimLock makes s run f in every ClaimBatch between the lock of the
// candidates and their check, where another claim may commit.
func (s *Store) AfterClaimLock(f func()) { s.afterClaimLock = f }
