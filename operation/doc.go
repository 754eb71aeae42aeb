// Package operation is what tilectl's uploader needs of the operation-ID
// rules of docs/provider-api.md: the wire names and bodies, and the retry
// advice that reads a server's answers. It holds no server state; the
// reference provider's operation table, which applies the same rules on
// the server side, is package provider/optable, which imports this one
// for the wire.
//
// NewID mints IDs (UUIDv7); ParseIdempotencyKey validates them. The
// Idempotency-Key and strict-sequencing headers, StateResponse (GET
// /v1/operations/{op_id}) and ClientStateResponse (GET
// /v1/clients/{client_id}/state) are the wire's names and bodies;
// ErrorBody, the Code constants, ParseErrorBody and WriteError are its
// error envelope. Advise, ParseRetryAfter and ParseRetryExtension turn a
// server's answer into retry advice; Backoff and Schedule bound the
// waits; RetryBudget limits resends across a run; Sleep waits on a
// context. The attempt loop itself is the uploader's (retryablehttp with
// the contract's CheckRetry), so this package has none.
package operation
