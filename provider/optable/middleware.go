package optable

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/operation"
)

// DefaultWaitLive is MiddlewareOptions.WaitLive when it is 0.
const DefaultWaitLive = 2 * time.Second

// processingRetry is the retry extension on 409 IDEMPOTENCY_PROCESSING:
// the API's default for that code, said explicitly.
var processingRetry = operation.RetryExtension{Allowed: true, After: time.Second, Strategy: operation.StrategyFixed}

// MiddlewareOptions configure IdempotencyMiddleware.
type MiddlewareOptions struct {
	// Method names the operation kind the wrapped handler performs; it is
	// bound to every ID with the fingerprint. Default: the request's
	// method and URL path pattern ("POST /v1/...").
	Method string
	// Policy is the method's static retry policy. Default: volatile,
	// non-idem.
	Policy Policy
	// Scope returns the caller (e.g. the authenticated principal) that
	// scopes IDs. Default: one scope, "".
	Scope func(*http.Request) string
	// Fingerprint returns the payload's fingerprint. It may read r.Body but
	// must leave it readable again. Default: SHA-256 of the whole body.
	// An error answers 400 INVALID_REQUEST.
	Fingerprint func(*http.Request) (string, error)
	// WaitLive is how long a duplicate of a Live operation waits for its
	// outcome before 409 IDEMPOTENCY_PROCESSING. Default DefaultWaitLive;
	// negative: answer 409 at once.
	WaitLive time.Duration
	// Transient reports a handler status that must not be sealed for an
	// idem method, so that a retry runs it again (rate limiting, a busy
	// dependency). Default: 429 and every 5xx. A non-idem method seals
	// whatever its handler answered: running it again is not allowed.
	Transient func(status int) bool
	// Log receives an error line whenever the operation table's store
	// fails under a request (an admission, a seal or an abandon), with the
	// key: the client sees only 500 INTERNAL_ERROR. Default: discarded.
	Log zerolog.Logger
}

func (o MiddlewareOptions) withDefaults() MiddlewareOptions {
	if o.Scope == nil {
		o.Scope = func(*http.Request) string { return "" }
	}
	if o.Fingerprint == nil {
		o.Fingerprint = BodyFingerprint
	}
	if o.WaitLive == 0 {
		o.WaitLive = DefaultWaitLive
	}
	if o.WaitLive < 0 {
		o.WaitLive = 0
	}
	if o.Transient == nil {
		o.Transient = func(s int) bool { return s == http.StatusTooManyRequests || s >= 500 }
	}
	return o
}

// BodyFingerprint is the default fingerprint: hex SHA-256 of the body,
// which it puts back for the handler.
func BodyFingerprint(r *http.Request) (string, error) {
	if r.Body == nil {
		return hex.EncodeToString(sha256.New().Sum(nil)), nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return "", fmt.Errorf("read body to fingerprint it: %w", err)
	}
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// IdempotencyMiddleware applies the Idempotency-Key rules of docs/provider-api.md
// to next, over the operation table t. The first attempt of a key runs next
// into a buffer, seals its status, headers and body, and sends them; later
// attempts get them again byte for byte with Idempotent-Replayed: true.
//
// Cancellation: for a persist method the handler runs on a context that a
// client disconnect does not cancel (retry.cancel.implicit.persist). For a
// volatile one, a handler that returns after the client went away with
// nothing written or a 5xx is Released (retry.cancel.implicit.volatile);
// whatever else it wrote is sealed. A panicking handler abandons the
// operation (Released, or Indeterminate when persist) and re-panics.
func IdempotencyMiddleware(t *Table, opts MiddlewareOptions) func(http.Handler) http.Handler {
	o := opts.withDefaults()
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serveIdempotent(t, o, next, w, r)
		})
	}
}

func serveIdempotent(t *Table, o MiddlewareOptions, next http.Handler, w http.ResponseWriter, r *http.Request) {
	key, err := operation.ParseIdempotencyKey(r.Header.Get(operation.HeaderIdempotencyKey))
	if errors.Is(err, operation.ErrIdempotencyKeyMissing) {
		operation.WriteError(w, http.StatusBadRequest, operation.CodeIdempotencyKeyMissing, "the Idempotency-Key header is required", nil, nil)
		return
	}
	if err != nil {
		operation.WriteError(w, http.StatusBadRequest, operation.CodeInvalidRequest, err.Error(), nil, nil)
		return
	}
	fp, err := o.Fingerprint(r)
	if err != nil {
		operation.WriteError(w, http.StatusBadRequest, operation.CodeInvalidRequest, "the request body cannot be fingerprinted: "+err.Error(), nil, nil)
		return
	}
	method := o.Method
	if method == "" {
		method = r.Method + " " + r.Pattern
	}
	tk, err := t.Begin(r.Context(), Request{
		Scope: o.Scope(r), OpID: key, Method: method, Fingerprint: fp, Policy: o.Policy, Wait: o.WaitLive,
	})
	if err != nil {
		writeBeginError(w, r, err, o.Log.With().Str("op_id", key).Logger())
		return
	}
	if !tk.Owner() {
		writeOutcome(w, tk.Outcome(), true)
		return
	}
	runOwner(r.Context(), t, o, tk, next, w, r)
}

func writeBeginError(w http.ResponseWriter, r *http.Request, err error, log zerolog.Logger) {
	var ie *IndeterminateError
	switch {
	case errors.Is(err, ErrConflict):
		operation.WriteError(w, http.StatusUnprocessableEntity, operation.CodeIdempotencyConflict,
			"this Idempotency-Key was used with a different request", nil, nil)
	case errors.Is(err, ErrExpired):
		operation.WriteError(w, http.StatusUnprocessableEntity, operation.CodeIdempotencyExpired,
			"this Idempotency-Key is older than the retention window", nil, nil)
	case errors.Is(err, ErrProcessing):
		retry := processingRetry
		operation.WriteError(w, http.StatusConflict, operation.CodeIdempotencyProcessing,
			"a request with this Idempotency-Key is still in progress", &retry, nil)
	case errors.As(err, &ie):
		operation.WriteError(w, http.StatusInternalServerError, operation.CodeIndeterminate,
			"the outcome of this operation is unknown and it cannot safely run again", nil, nil)
	case r.Context().Err() != nil:
		// The client is gone; nobody reads an answer.
	default:
		log.Error().Err(err).Msg("admitting the operation failed; answered 500")
		operation.WriteError(w, http.StatusInternalServerError, operation.CodeInternalError, "operation table unavailable", nil, nil)
	}
}

func runOwner(ctx context.Context, t *Table, o MiddlewareOptions, tk *Ticket, next http.Handler,
	w http.ResponseWriter, r *http.Request) {
	if o.Policy.Persist {
		// Dropped interest must not stop a persist execution.
		r = r.WithContext(context.WithoutCancel(ctx))
	}
	// Ownership must end even if the client is gone.
	finishCtx := context.WithoutCancel(ctx)
	log := o.Log.With().Str("op_id", tk.Record().OpID).Logger()
	abandon := func() {
		if err := untilStored(finishCtx, tk.Abandon); err != nil && !errors.Is(err, ErrNotOwner) {
			log.Error().Err(err).Msg("abandoning the operation failed; the table ends it at the key's next look")
		}
	}
	rec := newRecorder()
	finished := false
	defer func() {
		if !finished {
			_ = tk.Abandon(finishCtx) // the handler panicked; re-panics below
		}
	}()
	next.ServeHTTP(rec, r)
	finished = true
	out := rec.outcome()

	if !o.Policy.Persist && ctx.Err() != nil && (!rec.wrote || out.Status >= 500) {
		_ = tk.Release(finishCtx)
		return
	}
	if o.Policy.Idem && o.Transient(out.Status) {
		// Not an outcome worth keeping: free the ID so the retry runs again.
		abandon()
		writeOutcome(w, out, false)
		return
	}
	if err := untilStored(finishCtx, func(ctx context.Context) error { _, err := tk.Seal(ctx, out); return err }); err != nil && !errors.Is(err, ErrNotOwner) {
		log.Error().Err(err).Msg("recording the operation's outcome failed; answered 500")
		abandon()
		operation.WriteError(w, http.StatusInternalServerError, operation.CodeInternalError, "the outcome could not be recorded", nil, nil)
		return
	}
	// Sealed, or a recovery took the operation first: the handler's answer
	// is still the truth about this execution.
	writeOutcome(w, out, false)
}

// finishRetryFor bounds how long an owner keeps trying to record how its
// execution ended while the store is unavailable.
const finishRetryFor = 30 * time.Second

// untilStored runs an owner's Seal or Abandon until the store takes it,
// ErrNotOwner says another decided, or finishRetryFor passes, so that a
// database restart does not end an execution as Indeterminate that could
// have been sealed. An Abandon still failing then leaves the record to
// the table, which ends it at the key's next look (Table.Begin, Lookup,
// GC): a record left Live in a process that lives on would have every
// resend of the key answered 409 IDEMPOTENCY_PROCESSING.
func untilStored(ctx context.Context, finish func(context.Context) error) error {
	deadline := time.Now().Add(finishRetryFor)
	delay := 20 * time.Millisecond
	for {
		err := finish(ctx)
		if err == nil || errors.Is(err, ErrNotOwner) || time.Now().Add(delay).After(deadline) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

func writeOutcome(w http.ResponseWriter, out Outcome, replayed bool) {
	h := w.Header()
	for k, v := range out.Header {
		// A copy: the sealed header is shared with every later replay.
		h[k] = append([]string(nil), v...)
	}
	if replayed {
		h.Set(operation.HeaderIdempotentReplayed, "true")
	}
	w.WriteHeader(out.Status)
	_, _ = w.Write(out.Body)
}
