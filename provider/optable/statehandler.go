package optable

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/tilectl/tilectl/operation"
)

// OperationStateHandler serves GET /v1/operations/{op_id}: the state of the
// caller's operation ID, with the sealed outcome when there is one.
// The op ID is r.PathValue("op_id") when the route names it, else the last
// path segment. scope returns the caller, as in MiddlewareOptions.Scope
// (nil: one scope).
//
// The wire states are absent|live|sealed|indeterminate|expired; a Released
// operation is reported indeterminate: the server holds no outcome and
// will not run it on its own, and a client resends with the same key
// either way (the server then decides).
func OperationStateHandler(t *Table, scope func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opID := r.PathValue("op_id")
		if opID == "" {
			opID = r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		}
		key, err := operation.ParseIdempotencyKey(opID)
		if err != nil {
			operation.WriteError(w, http.StatusBadRequest, operation.CodeInvalidRequest, "bad operation ID: "+err.Error(), nil, nil)
			return
		}
		sc := ""
		if scope != nil {
			sc = scope(r)
		}
		st, rec, err := t.Lookup(r.Context(), Key{Scope: sc, OpID: key})
		if err != nil {
			operation.WriteError(w, http.StatusInternalServerError, operation.CodeInternalError, "operation table unavailable", nil, nil)
			return
		}
		writeJSON(w, http.StatusOK, stateBody(key, st, rec))
	})
}

func stateBody(opID string, st State, rec Record) operation.StateResponse {
	resp := operation.StateResponse{OpID: opID, State: st.String()}
	if st == StateReleased {
		resp.State = StateIndeterminate.String()
	}
	if st == StateSealed && rec.Outcome != nil {
		body := json.RawMessage(rec.Outcome.Body)
		if !json.Valid(body) {
			b, _ := json.Marshal(string(rec.Outcome.Body))
			body = b
		}
		resp.Outcome = &operation.StateOutcome{Status: rec.Outcome.Status, Body: body}
	}
	return resp
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		operation.WriteError(w, http.StatusInternalServerError, operation.CodeInternalError, "response could not be encoded", nil, nil)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
