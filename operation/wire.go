package operation

import "encoding/json"

// Header names of the idempotency protocol (docs/provider-api.md).
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

// Header names of strict client sequencing.
const (
	HeaderClientID       = "Client-Id"
	HeaderClientSequence = "Client-Sequence"
)

// StateResponse is the body of GET /v1/operations/{op_id}.
type StateResponse struct {
	OpID    string        `json:"op_id"`
	State   string        `json:"state"`
	Outcome *StateOutcome `json:"outcome,omitempty"`
}

// StateOutcome is a sealed outcome on the wire. Body is the sealed body
// itself when it is JSON, else the body as a JSON string.
type StateOutcome struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// ClientStateResponse is the body of GET /v1/clients/{client_id}/state.
type ClientStateResponse struct {
	ClientID              string `json:"client_id"`
	LastCommittedSequence uint64 `json:"last_committed_sequence"`
}
