package provider

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/tilectl/tilectl/operation"
)

type callerKey struct{}

// callerOf is the authenticated caller: the scope of operation IDs and
// client sequences, so two callers' keys never collide.
func callerOf(r *http.Request) string {
	c, _ := r.Context().Value(callerKey{}).(string)
	return c
}

// authenticate answers 401 for a missing or unknown bearer token and 403
// for a flight outside the allow list. Tokens are compared in constant
// time and never logged.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		caller := ""
		if ok {
			for known, who := range s.callers {
				if subtle.ConstantTimeCompare([]byte(tok), []byte(known)) == 1 {
					caller = who
				}
			}
		}
		if caller == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tileprovider"`)
			operation.WriteError(w, http.StatusUnauthorized, operation.CodeUnauthenticated, "missing or invalid bearer token", nil, nil)
			return
		}
		if f := r.PathValue("flight_id"); f != "" && s.allowed != nil && !s.allowed[f] {
			operation.WriteError(w, http.StatusForbidden, operation.CodeForbidden, "this token has no rights to flight "+f, nil, nil)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, caller)))
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		operation.WriteError(w, http.StatusInternalServerError, operation.CodeInternalError, "answer could not be encoded", nil, nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
