// Package optable is the reference provider's operation table: the
// server side of the operation-ID rules, the retry state machine (its
// rules: docs/conformance.md), the Idempotency-Key rules of
// docs/provider-api.md on HTTP, and strict client sequencing. The client
// does not import it; the wire names, error bodies and codes it shares
// with the client are package operation's.
//
// A Table is the operation table over a Store (MemoryStore, or PGStore on
// Postgres after EnsureSchema). Table.Begin decides what one attempt of an
// operation does:
//
//	tk, err := table.Begin(ctx, optable.Request{Scope: caller, OpID: id,
//		Method: "upload", Fingerprint: fp, Policy: pol, Wait: 2 * time.Second})
//	switch {
//	case err != nil: // ErrConflict, ErrExpired, ErrProcessing, *IndeterminateError
//	case tk.Owner(): // run it once, then tk.Seal / tk.Release / tk.Abandon
//	default:         // tk.Outcome(): the sealed outcome, replayed
//	}
//
// What it promises (each rule is named in docs/conformance.md with its test):
//   - IDs are scoped by caller, and bound at admission to a method and a
//     payload fingerprint; a mismatch is ErrConflict and never executes.
//   - At most one execution owner per ID at a time: duplicates of a Live
//     operation attach and wait for its outcome (channels in MemoryStore,
//     a backoff poll in PGStore) or get ErrProcessing.
//   - Sealed is absorbing and replays byte for byte, failures included.
//   - Released (volatile) and Indeterminate operations run again only if
//     the method is idem; otherwise Begin fails closed with
//     *IndeterminateError, a type distinct from any sealed failure,
//     transport error or cancellation.
//   - A persist operation is never released, is Sealed only once durable,
//     and after a restart (Table.Recover) is Sealed or Indeterminate, never
//     Absent.
//   - A Live record is not left Live for good by a process that lives on:
//     an admission whose answer the store lost, or an owner whose Abandon
//     could not reach the store, is ended (as Recover would) at the key's
//     next Begin, Lookup or GC. Nothing else takes a Live record over: a
//     running operation has no lease to expire.
//   - A record is replayed for Retention after it leaves Live and kept
//     GCMargin longer, answering ErrExpired; Live records are never
//     collected; with TableOptions.IssuedAt (e.g. UUIDv7IssuedAt), an ID
//     minted before the window with no record left is also ErrExpired,
//     never admitted as new.
//
// Stores: MemoryStore keeps records for the life of the process (by value
// in sharded arenas indexed by hash; duplicates wait on channels). PGStore keeps them in
// operation_records (EnsureSchema); admit and every transition are one
// statement and one synchronous commit, so a persist operation is never
// reported Sealed before its outcome is durable; duplicates wait by
// polling the row with backoff (see PGStore for why not LISTEN/NOTIFY).
// Table.Recover runs once at start; Table.GC (or CollectEvery) collects.
// Package optabletest is the conformance suite every Store passes.
//
// IdempotencyMiddleware and OperationStateHandler put the table on HTTP;
// Sequencer, SequenceMiddleware and ClientStateHandler do strict client
// sequencing (one sequence per batch, gaps rejected, duplicates replayed
// from a bounded cache).
package optable
