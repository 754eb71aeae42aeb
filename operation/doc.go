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
// error envelope. ParseRetryAfter and ParseRetryExtension read the advice
// in a server's answer; Backoff and Schedule bound the waits; RetryBudget
// limits resends across a run; Sleep waits on a context. What an answer
// means, and the attempt loop, are the uploader's sender (its classify and
// doExchange), so this package decides nothing about retrying.
package operation
