package optable

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/tilectl/tilectl/operation"
)

// SequenceMiddleware enforces strict sequencing on requests that carry
// Client-Id; requests without it pass through (the mode is optional).
// Client-Id without a valid Client-Sequence (a positive integer) is
// 400 INVALID_REQUEST. Gaps answer 409 SEQUENCE_GAP with
// {"last_committed_sequence": N} in the error's details. scope returns
// the caller (nil: one scope).
//
// t, when not nil, is the idempotency table next answers through, by the
// same scope and the request's Idempotency-Key. A committed sequence
// answers its cached outcome (Idempotent-Replayed: true), else, when t
// knows the request's key, whatever next answers for it (the sealed
// outcome replayed, or an unsealed record recovered), else 409
// ALREADY_COMMITTED. A successful batch commits its number only once t
// holds its outcome sealed; if it does not, the answer is 500 and nothing
// commits (TestANumberCommitsOnlyOnceItsOutcomeIsSealed).
func SequenceMiddleware(q *Sequencer, scope func(*http.Request) string, t *Table) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			client := r.Header.Get(operation.HeaderClientID)
			if client == "" {
				next.ServeHTTP(w, r)
				return
			}
			n, err := strconv.ParseUint(strings.TrimSpace(r.Header.Get(operation.HeaderClientSequence)), 10, 63)
			if err != nil || n == 0 {
				operation.WriteError(w, http.StatusBadRequest, operation.CodeInvalidRequest,
					"Client-Sequence must be a positive integer when Client-Id is sent", nil, nil)
				return
			}
			sc := ""
			if scope != nil {
				sc = scope(r)
			}
			b := Batch{Run: func(context.Context) Outcome {
				rec := newRecorder()
				next.ServeHTTP(rec, r)
				return rec.outcome()
			}}
			if key, err := operation.ParseIdempotencyKey(r.Header.Get(operation.HeaderIdempotencyKey)); t != nil && err == nil {
				b.Known, b.Stored = tableChecks(t, Key{Scope: sc, OpID: key})
			}
			out, replayed, err := q.Do(r.Context(), sc, client, n, b)
			var gap *SequenceGapError
			switch {
			case errors.As(err, &gap):
				operation.WriteError(w, http.StatusConflict, operation.CodeSequenceGap, err.Error(), nil,
					map[string]uint64{"last_committed_sequence": gap.LastCommitted})
			case errors.Is(err, ErrAlreadyCommitted):
				operation.WriteError(w, http.StatusConflict, operation.CodeAlreadyCommitted,
					"this sequence number is committed and its outcome is no longer cached", nil, nil)
			case errors.Is(err, ErrOutcomeNotStored):
				operation.WriteError(w, http.StatusInternalServerError, operation.CodeInternalError,
					"the batch ran but its outcome was not recorded; its sequence number is not committed, send it again", nil, nil)
			case err != nil:
				operation.WriteError(w, http.StatusInternalServerError, operation.CodeInternalError, "client sequence unavailable", nil, nil)
			default:
				writeOutcome(w, out, replayed)
			}
		})
	}
}

// tableChecks are Batch.Known and Batch.Stored for key k of table t.
func tableChecks(t *Table, k Key) (known, stored func(context.Context) (bool, error)) {
	known = func(ctx context.Context) (bool, error) {
		st, _, err := t.Lookup(ctx, k)
		return err == nil && st != StateAbsent && st != StateExpired, err
	}
	stored = func(ctx context.Context) (bool, error) {
		st, _, err := t.Lookup(ctx, k)
		return err == nil && st == StateSealed, err
	}
	return known, stored
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
			operation.WriteError(w, http.StatusBadRequest, operation.CodeInvalidRequest, "missing client ID", nil, nil)
			return
		}
		sc := ""
		if scope != nil {
			sc = scope(r)
		}
		n, err := q.Last(r.Context(), sc, client)
		if err != nil {
			operation.WriteError(w, http.StatusInternalServerError, operation.CodeInternalError, "client sequence unavailable", nil, nil)
			return
		}
		writeJSON(w, http.StatusOK, operation.ClientStateResponse{ClientID: client, LastCommittedSequence: n})
	})
}
