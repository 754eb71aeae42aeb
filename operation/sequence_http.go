package operation

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// Header names of strict client sequencing.
const (
	HeaderClientID       = "Client-Id"
	HeaderClientSequence = "Client-Sequence"
)

// SequenceMiddleware enforces strict sequencing on requests that carry
// Client-Id; requests without it pass through (the mode is optional).
// Client-Id without a valid Client-Sequence (a positive integer) is
// 400 INVALID_REQUEST. Gaps answer 409 SEQUENCE_GAP with
// {"last_committed_sequence": N} in the error's details; a committed
// sequence answers its cached outcome (Idempotent-Replayed: true) or
// 409 ALREADY_COMMITTED. scope returns the caller (nil: one scope).
func SequenceMiddleware(q *Sequencer, scope func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			client := r.Header.Get(HeaderClientID)
			if client == "" {
				next.ServeHTTP(w, r)
				return
			}
			n, err := strconv.ParseUint(strings.TrimSpace(r.Header.Get(HeaderClientSequence)), 10, 63)
			if err != nil || n == 0 {
				WriteError(w, http.StatusBadRequest, CodeInvalidRequest,
					"Client-Sequence must be a positive integer when Client-Id is sent", nil, nil)
				return
			}
			sc := ""
			if scope != nil {
				sc = scope(r)
			}
			out, replayed, err := q.Do(r.Context(), sc, client, n, func(context.Context) Outcome {
				rec := newRecorder()
				next.ServeHTTP(rec, r)
				return rec.outcome()
			})
			var gap *SequenceGapError
			switch {
			case errors.As(err, &gap):
				WriteError(w, http.StatusConflict, CodeSequenceGap, err.Error(), nil,
					map[string]uint64{"last_committed_sequence": gap.LastCommitted})
			case errors.Is(err, ErrAlreadyCommitted):
				WriteError(w, http.StatusConflict, CodeAlreadyCommitted,
					"this sequence number is committed and its outcome is no longer cached", nil, nil)
			case err != nil:
				WriteError(w, http.StatusInternalServerError, CodeInternalError, "client sequence unavailable", nil, nil)
			default:
				writeOutcome(w, out, replayed)
			}
		})
	}
}

// ClientStateResponse is the body of GET /v1/clients/{client_id}/state.
type ClientStateResponse struct {
	ClientID              string `json:"client_id"`
	LastCommittedSequence uint64 `json:"last_committed_sequence"`
}

// ClientStateHandler serves GET /v1/clients/{client_id}/state. The client
// ID is r.PathValue("client_id"), else the path segment before "/state".
func ClientStateHandler(q *Sequencer, scope func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := r.PathValue("client_id")
		if client == "" {
			p := strings.TrimSuffix(r.URL.Path, "/state")
			client = p[strings.LastIndexByte(p, '/')+1:]
		}
		if client == "" {
			WriteError(w, http.StatusBadRequest, CodeInvalidRequest, "missing client ID", nil, nil)
			return
		}
		sc := ""
		if scope != nil {
			sc = scope(r)
		}
		n, err := q.Last(r.Context(), sc, client)
		if err != nil {
			WriteError(w, http.StatusInternalServerError, CodeInternalError, "client sequence unavailable", nil, nil)
			return
		}
		writeJSON(w, http.StatusOK, ClientStateResponse{ClientID: client, LastCommittedSequence: n})
	})
}
