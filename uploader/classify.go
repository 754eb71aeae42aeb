package uploader

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/uploader/concurrency"
)

// This file is the one place that decides what an attempt's end means:
// classify reads an answer of docs/provider-api.md (every status and code
// of "Errors and retry advice", Retry-After, the retry extension), a
// transport error, a timeout or a malformed body, and returns one verdict.
// The sender (sender.go) acts on it; the breaker, the adaptive limit and
// the pacer listen to it; no caller decides again whether an answer is
// worth resending.

// verdictKind is what to do after one attempt.
type verdictKind int

const (
	// done: a complete 2xx answer; nothing to resend.
	done verdictKind = iota
	// retryAfter: the provider named the wait (Retry-After, the retry
	// extension's "after") on an answer that is not a throttle; resend
	// after it, never sooner. A batch journals it as its not-before.
	retryAfter
	// retryBackoff: resend after the contract table's wait or tilectl's
	// own backoff (a 5xx, 409 IDEMPOTENCY_PROCESSING, a connection that
	// never reached the provider).
	retryBackoff
	// throttled: 429 or 503; resend after the provider's advice or the
	// table's wait. The pacer and the limit on batches in flight ease off.
	throttled
	// permanent: resending as it is cannot change the answer (4xx, a
	// redirect, a certificate the machine does not trust, a retry the
	// provider forbids or whose attempts are spent); the caller reads it.
	permanent
	// unclear: the outcome is unknown (the request may have reached the
	// provider and no answer came, or a 2xx is cut off or not an answer).
	// The only safe resend is the same key and body; a batch that is not
	// resent stays open and is settled by its key or by lookups later.
	unclear
)

var verdictNames = [...]string{"done", "retry_after", "retry_backoff", "throttled", "permanent", "unclear"}

func (k verdictKind) String() string { return verdictNames[k] }

// verdict is the classifier's reading of one attempt.
type verdict struct {
	kind verdictKind
	// wait is the wait before the next attempt (retryAfter, retryBackoff,
	// throttled), before the sender's bounds; ownBackoff says tilectl's
	// transport backoff decides it instead (no answer, or a lost one).
	wait       time.Duration
	ownBackoff bool
	// floor is the least wait the provider asked for (Retry-After, or the
	// extension's "after"): where the cap on one wait cuts a wait, it
	// does not cut below it (bound).
	floor time.Duration
	// spare: the resend spares the run's retry budget (advise sets it;
	// sparesBudget).
	spare bool
	// exhausted: permanent only because the provider's max_attempts or
	// the table's limit is reached.
	exhausted bool
	// keyDead: the answer ends the key (a 4xx other than 401, 403, 404,
	// 408, 409, 425 and 429): a batch is failed and its tiles go into a
	// new batch. 401/403/404 leave it open: a rerun with a fixed token or
	// URL resends the same key.
	keyDead bool
	// breakerFailure: no answer, or a 5xx: one more failure in a row for
	// the circuit breaker.
	breakerFailure bool
	// signal is what the attempt says about the path, for the adaptive
	// limit (hasSignal false: nothing, as for a broken connection).
	signal    concurrency.Signal
	hasSignal bool
	// timeout: no answer in time, or the answer's body was cut by one.
	timeout bool

	status        int
	code, message string
	strategy      operation.Strategy
	// fromServer: the body carried a valid retry extension.
	fromServer bool
}

// sparesBudget reports whether the resend the verdict asks for takes no
// token of the run's retry budget: a refusal for load (429, 503) whose
// Retry-After names a wait ahead (seconds above 0, or an HTTP date still
// to come: whole seconds, so one a second ahead may be read as less) or
// whose retry extension's wait, as its strategy makes it, is a second or
// more (advise sets spare). The provider has then set the pace, the
// pacer keeps the run's requests to it, and a throttle that refused many
// batches at once must not leave them unsent for the run. Any other
// advice (a 409 IDEMPOTENCY_PROCESSING, a Retry-After of 0 or past, an
// extension's wait under a second) may ask for the same request again at
// once, for ever: those resends take a token
// like tilectl's own, so the budget, not only the deadline, bounds them.
func (v verdict) sparesBudget() bool { return v.kind == throttled && v.spare }

// retries reports whether the verdict asks for a resend.
func (v verdict) retries() bool {
	switch v.kind {
	case retryAfter, retryBackoff, throttled, unclear:
		return true
	}
	return false
}

// strained reports whether the attempt says the provider or the path is
// under load: a throttle (429, 503) or a timeout.
func (v verdict) strained() bool {
	return v.hasSignal && (v.signal == concurrency.Overloaded || v.signal == concurrency.TimedOut)
}

// attemptEnd is what one attempt came back with.
type attemptEnd struct {
	status  int // 0: no answer
	header  http.Header
	body    []byte // read up to the answer cap
	bodyErr error  // the body could not be read whole
	err     error  // transport error
	// attempt is the number of attempts made, this one included.
	attempt int
	// accept reports whether a 2xx body is a complete answer; nil takes
	// any readable body.
	accept func([]byte) bool
}

// classify is the one classifier of an attempt's end. now reads
// Retry-After dates.
func classify(e attemptEnd, now time.Time) verdict {
	if e.err != nil {
		return classifyTransport(e.err)
	}
	v := verdict{status: e.status, timeout: e.bodyErr != nil && isTimeout(e.bodyErr),
		breakerFailure: e.status >= 500, signal: concurrency.Answered, hasSignal: true}
	switch {
	case e.status >= 200 && e.status < 300:
		if e.bodyErr == nil && (e.accept == nil || e.accept(e.body)) {
			v.kind = done
			return v
		}
		// The provider ran the request, but its answer is lost.
		v.kind, v.ownBackoff = unclear, true
		return v
	case e.status < 400 || e.status > 599:
		// A redirect (never followed: the token must not travel) or a
		// status outside the contract.
		v.kind = permanent
		return v
	}
	v.keyDead = endsKey(e.status)
	switch e.status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		v.signal = concurrency.Overloaded
	case http.StatusGatewayTimeout:
		v.signal = concurrency.TimedOut
	default:
		if e.status >= 500 {
			v.hasSignal = false // a fault, not load
		}
	}
	advise(&v, e, now)
	return v
}

// endsKey reports whether an error status ends the key (verdict.keyDead).
func endsKey(status int) bool {
	switch status {
	case 401, 403, 404, 408, 409, 425, 429:
		return false
	}
	return status >= 400 && status < 500
}

// classifyTransport reads a request that got no answer.
func classifyTransport(err error) verdict {
	v := verdict{breakerFailure: true, timeout: isTimeout(err)}
	if v.timeout {
		v.signal, v.hasSignal = concurrency.TimedOut, true
	}
	switch {
	case untrustedCertificate(err):
		v.kind = permanent // the same certificate comes back on a resend
	case neverSent(err):
		v.kind, v.ownBackoff = retryBackoff, true
	default:
		v.kind, v.ownBackoff = unclear, true
	}
	return v
}

// untrustedCertificate: the provider's certificate is refused; a resend
// meets the same one.
func untrustedCertificate(err error) bool {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci)
}

// neverSent: the connection failed before the request could be written
// (refused, no route, DNS): the provider never saw it, so its outcome is
// known.
func neverSent(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &dns) || (errors.As(err, &op) && op.Op == "dial")
}

// isTimeout: no answer within a deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
