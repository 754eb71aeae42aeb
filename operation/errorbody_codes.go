package operation

// Error codes of the provider API (docs/provider-api.md). Servers write them with
// WriteError; the uploader's classifier reads them with the contract's table.
const (
	CodeInvalidRequest        = "INVALID_REQUEST"
	CodeIdempotencyKeyMissing = "IDEMPOTENCY_KEY_MISSING"
	CodeUnauthenticated       = "UNAUTHENTICATED"
	CodeForbidden             = "FORBIDDEN"
	CodeFlightNotFound        = "FLIGHT_NOT_FOUND"
	CodeTileNotFound          = "TILE_NOT_FOUND"
	CodeIdempotencyProcessing = "IDEMPOTENCY_PROCESSING"
	CodeAlreadyCommitted      = "ALREADY_COMMITTED"
	CodeSequenceGap           = "SEQUENCE_GAP"
	CodeBatchTooLarge         = "BATCH_TOO_LARGE"
	CodeIdempotencyConflict   = "IDEMPOTENCY_CONFLICT"
	CodeIdempotencyExpired    = "IDEMPOTENCY_EXPIRED"
	CodeRateLimited           = "RATE_LIMITED"
	CodeInternalError         = "INTERNAL_ERROR"
	CodeIndeterminate         = "INDETERMINATE"
	CodeDependencyError       = "DEPENDENCY_ERROR"
	CodeUnavailable           = "UNAVAILABLE"
	CodeDeadlineExceeded      = "DEADLINE_EXCEEDED"
)
