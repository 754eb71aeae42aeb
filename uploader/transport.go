package uploader

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/uploader/concurrency"
)

// exchange is one logical request (a batch, or a GET) and its resends.
// retryablehttp drives the loop; exchange supplies the contract's rules
// through its CheckRetry and Backoff, so it lives for one request only.
type exchange struct {
	u      *HTTPTileUploader
	runCtx context.Context
	opID   string
	// seq is a sequenced batch's Client-Id and Client-Sequence, sent with
	// every attempt.
	seq batchSeq
	// accept reports whether a 2xx body is a complete answer; one that is
	// not (cut off, not JSON) means the answer was lost, so the request is
	// resent with the same key and the provider replays it.
	accept func([]byte) bool

	attempts int
	// writes counts each attempt's request writes (httptrace), one counter
	// per attempt: net/http reports a write from its own goroutine, maybe
	// after the attempt's answer came and the next attempt began. The
	// writes beyond one per attempt are replays (net/http's own silent
	// re-sends on a reused connection); attempts+replays is every time the
	// request went on the wire: the one count of transport-level sends.
	writesMu    sync.Mutex
	writes      []*atomic.Int32
	wait        time.Duration
	giveUp      error
	timeouts    int
	lastBodyErr error
	cancelled   bool // resending stopped because the run was cancelled
	// adm is the breaker's leave for the attempt on the wire (adm.probe:
	// it is the half-open probe).
	adm admission
	// budgetSpent: a resend was refused by the run's retry budget.
	budgetSpent bool
	// prevTransport is the last transport resend wait (decorrelated jitter).
	prevTransport time.Duration
	// advised, set for a batch, journals the provider's advised wait as
	// the batch's not-before (Store.DeferBatch) before the exchange waits
	// or gives up; tiles is the batch's size, for the announcement.
	advised func(ctx context.Context, wait time.Duration) (time.Time, error)
	tiles   int
	// notBefore is the last not-before journaled; deferred is set when the
	// advised wait does not fit the exchange (the cap on one wait, or the
	// run's deadline), so the batch waits apart instead of failing the run.
	notBefore   time.Time
	advisedWait time.Duration // the wait journaled, from the answer
	deferred    bool
	advice      string // what asked for the journaled wait
	// announce: the wait just scheduled was advised and is announced when
	// it starts.
	announce bool
	// probeAttempts, when > 0, is how many attempts a failure that shows
	// no provider at all (no answer, or a 2xx that is not the API) may
	// take: the first contact of a run fails fast on a wrong URL.
	probeAttempts int
	// heard, when set, is called when an attempt gets an answer (any
	// status): it stops the first contact's fuse.
	heard func()
	// batch: the exchange sends a batch, whose attempts the adaptive
	// limit learns from; attemptStart is when the attempt on the wire
	// began.
	batch        bool
	attemptStart time.Time
}

// attemptCtx returns ctx with a write trace of its own for one attempt.
func (ex *exchange) attemptCtx(ctx context.Context) context.Context {
	n := new(atomic.Int32)
	ex.writesMu.Lock()
	ex.writes = append(ex.writes, n)
	ex.writesMu.Unlock()
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { n.Add(1) },
	})
}

// replays is how many writes went beyond one per attempt so far.
func (ex *exchange) replays() int {
	ex.writesMu.Lock()
	defer ex.writesMu.Unlock()
	r := 0
	for _, n := range ex.writes {
		r += max(int(n.Load())-1, 0)
	}
	return r
}

// answer is how an exchange ended.
type answer struct {
	status   int // 0 when no answer came
	header   http.Header
	body     []byte
	bodyErr  error // the body could not be read whole
	err      error // transport error, or why resending stopped early
	attempts int
	timeouts int
	// cancelled: the run's context ended the exchange, not the provider.
	cancelled bool
	// waiting is the batch's provider-advised wait that the exchange did
	// not wait for (its not-before is journaled); nil otherwise.
	waiting *waitingError
	// budgetSpent: resending stopped because the run's retry budget was
	// empty; the caller leaves the batch open for the next run.
	budgetSpent bool
	// redact removes the provider token from provider text (the
	// uploader's redact); nil leaves text as it is.
	redact func(string) string
}

func (a answer) replayed() bool { return a.header.Get("Idempotent-Replayed") == "true" }

// do runs method path, a request without a body, with the contract's retry
// rules.
func (u *HTTPTileUploader) do(runCtx context.Context, method, path, opID string, accept func([]byte) bool) answer {
	return u.doExchange(&exchange{u: u, runCtx: runCtx, opID: opID, accept: accept}, method, path, nil, nil)
}

// doExchange runs method path on an exchange the caller made (the
// capabilities probe sets its short fuse; a batch send sets its tiles and
// sequence). body is nil for a request without one; onAttempt runs before
// every attempt of a body request (the journal's NoteSend) and stops the
// exchange if it fails.
func (u *HTTPTileUploader) doExchange(ex *exchange, method, path string, body *batchBody, onAttempt func(context.Context) error) answer {
	runCtx, opID := ex.runCtx, ex.opID
	// A batch already on the wire is allowed to finish when the run is
	// cancelled (it is journaled either way); no further resend starts.
	reqCtx := runCtx
	if body != nil {
		reqCtx = context.WithoutCancel(runCtx)
		if dl, ok := runCtx.Deadline(); ok {
			var cancel context.CancelFunc
			reqCtx, cancel = context.WithDeadline(reqCtx, dl)
			defer cancel()
		}
	}
	// Every write of the request is seen, so a re-send that net/http makes
	// on its own cannot go uncounted; each attempt gets its own trace
	// (PrepareRetry below).
	baseCtx := reqCtx
	reqCtx = ex.attemptCtx(baseCtx)
	var raw any
	ready := false // the first call comes from NewRequest, to learn the length
	if body != nil {
		raw = retryablehttp.ReaderFunc(func() (io.Reader, error) {
			if ready {
				if err := runCtx.Err(); err != nil {
					return nil, err
				}
				if onAttempt != nil {
					if err := onAttempt(runCtx); err != nil {
						return nil, &journalError{err}
					}
				}
			}
			return body.paced(baseCtx, u.pace), nil
		})
	}
	req, err := retryablehttp.NewRequestWithContext(reqCtx, method, u.endpoint(path), raw)
	if err != nil {
		return answer{err: fmt.Errorf("build %s %s: %w", method, path, err)}
	}
	ready = true
	if body != nil {
		// Without GetBody net/http cannot replay the batch on its own after
		// a reused connection fails (it would, for a request with an
		// Idempotency-Key): the failure comes back to checkRetry, and the
		// resend goes through the observed path (NoteSend, resends).
		req.GetBody = nil
		req.Header.Set("Content-Type", body.contentType())
		req.Header.Set("Idempotency-Key", opID)
		setSequenceHeaders(req.Header, ex.seq)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", u.ua)
	if u.token != "" {
		req.Header.Set("Authorization", "Bearer "+u.token)
	}
	// The breaker decides whether the first attempt may go at all; resends
	// ask it again in checkRetry.
	adm, err := u.breaker.acquire(runCtx)
	if err != nil {
		return answer{err: err, cancelled: runCtx.Err() != nil}
	}
	ex.adm = adm
	defer func() {
		if ex.adm.probe {
			u.breaker.abandon()
		}
	}()
	u.budget.OnFirstAttempt()
	ex.batch = body != nil
	ex.attemptStart = u.now()
	rc := &retryablehttp.Client{
		HTTPClient:   u.client,
		Logger:       leveled{u.log.With().Str("op_id", opID).Logger()},
		RetryMax:     u.resends,
		CheckRetry:   ex.checkRetry,
		Backoff:      ex.backoff,
		ErrorHandler: func(resp *http.Response, err error, _ int) (*http.Response, error) { return resp, err },
		// retryablehttp hands each resend a fresh shallow copy of the
		// request: give it its own write trace.
		PrepareRetry: func(r *http.Request) error {
			*r = *r.WithContext(ex.attemptCtx(baseCtx))
			ex.attemptStart = u.now()
			return nil
		},
	}
	resp, err := rc.Do(req)
	sends := ex.attempts + ex.replays()
	if t := tallyOf(runCtx); t != nil {
		t.exchange(sends, ex.timeouts, ex.budgetSpent)
	}
	a := answer{err: err, attempts: sends, timeouts: ex.timeouts, budgetSpent: ex.budgetSpent, redact: u.redact,
		cancelled: ex.cancelled || (err != nil && runCtx.Err() != nil && errors.Is(err, runCtx.Err()))}
	if resp != nil {
		// checkRetry already read the body (capped) and put it back.
		a.status, a.header = resp.StatusCode, resp.Header
		a.body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		a.bodyErr = ex.lastBodyErr
	}
	if ex.giveUp != nil {
		a.err = ex.giveUp
	}
	if ex.deferred && ex.giveUp == nil {
		a.waiting = &waitingError{w: Wait{Reason: WaitProviderAdvice, OpID: opID, Tiles: ex.tiles, Until: ex.notBefore,
			Detail: ex.advice}, left: ex.advisedWait}
	}
	return a
}

// journalError is a failure to record an attempt in the local journal: a
// database problem, never the provider's, whatever it answered before.
type journalError struct{ err error }

func (e *journalError) Error() string {
	return "record the send in the upload journal: " + e.err.Error()
}
func (e *journalError) Unwrap() error { return e.err }

// checkRetry applies docs/provider-api.md: final 4xx are never resent; 409
// PROCESSING, 429 and 5xx follow operation.Advise; a broken connection or a
// lost 2xx answer is ambiguous, so the same key and body go again.
//
// Every attempt's result goes to the run's breaker; a resend waits its
// backoff, then for the breaker, then takes a token from the run's retry
// budget, and is not made when any of them says no.
func (ex *exchange) checkRetry(_ context.Context, resp *http.Response, err error) (bool, error) {
	ex.attempts++
	if resp != nil && ex.heard != nil {
		ex.heard()
	}
	if ex.runCtx.Err() == nil {
		ex.u.breaker.record(ex.adm, err == nil && resp.StatusCode < 500)
		ex.adm.probe = false
		if sig, ok := pathSignal(resp, err); ok && ex.batch {
			ex.u.adaptive.Observe(concurrency.Sample{Start: ex.attemptStart, End: ex.u.now(), Signal: sig})
		}
	}
	retry, cerr := ex.decide(resp, err)
	if !retry || ex.attempts > ex.u.resends {
		if retry && ex.deferJournaled() {
			// Out of resends, but this answer's wait is journaled. The
			// run's resend budget and breaker still bound how often the
			// batch goes.
			return false, nil
		}
		return retry, cerr // retryablehttp stops at RetryMax by itself
	}
	if ex.announce {
		ex.announce = false
		ex.u.announce(ex.runCtx, Wait{Reason: WaitProviderAdvice, OpID: ex.opID, Tiles: ex.tiles,
			Until: ex.u.now().Add(ex.wait), Detail: ex.advice})
	}
	// No resend starts once the run is cancelled; an answer that came
	// is still used.
	_ = ex.u.sleep(ex.runCtx, ex.wait)
	if rerr := ex.runCtx.Err(); rerr != nil {
		ex.cancelled = true
		return false, rerr
	}
	adm, berr := ex.u.breaker.acquire(ex.runCtx)
	if berr != nil {
		ex.cancelled = ex.runCtx.Err() != nil
		ex.giveUp = berr
		return false, nil
	}
	if !ex.u.budget.TryResend() {
		if adm.probe {
			ex.u.breaker.abandon()
		}
		ex.budgetSpent = true
		ex.giveUp = errResendBudget
		return false, nil
	}
	ex.adm = adm
	return true, nil
}

// errResendBudget: the run's retry budget refused a resend.
var errResendBudget = errors.New("the run's resend budget is spent (upload.resend_budget): resending no more in this run")

func (ex *exchange) decide(resp *http.Response, err error) (bool, error) {
	if err != nil {
		if isTimeout(err) {
			ex.timeouts++
		}
		if permanentTransport(err) || ex.probeSpent() {
			return false, err
		}
		return ex.schedule(ex.transportAdvice()), nil
	}
	body, rerr := readCapped(resp.Body, ex.u.maxBody)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	ex.lastBodyErr = rerr
	if rerr != nil && isTimeout(rerr) {
		ex.timeouts++
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if rerr == nil && (ex.accept == nil || ex.accept(body)) || ex.probeSpent() {
			return false, nil
		}
		return ex.schedule(ex.transportAdvice()), nil
	case resp.StatusCode < 400:
		return false, nil // a redirect: refused, handled by the caller
	}
	if ex.probeSpent() && !json.Valid(body) {
		return false, nil // an error page, not the API's error body
	}
	adv := operation.Advise(resp.StatusCode, resp.Header, body, ex.attempts, ex.u.now())
	if !adv.Retry {
		return false, nil
	}
	if ex.advised != nil && adv.MinDelay > 0 && !ex.journalAdvice(adv) {
		return false, nil
	}
	return ex.schedule(adv), nil
}

// journalAdvice journals the provider's advised wait as the batch's
// not-before, cut to MaxAdvisedWait, before the exchange waits for it or
// leaves it to a later run: a run that dies meanwhile, or any other run,
// then waits for it too. It reports false, with giveUp set, when the
// journal cannot be written.
func (ex *exchange) journalAdvice(adv operation.Advice) bool {
	wait := min(adv.MinDelay, MaxAdvisedWait)
	jctx, cancel := journalCtx(ex.runCtx)
	defer cancel()
	nb, err := ex.advised(jctx, wait)
	if err != nil {
		ex.giveUp = &journalError{err}
		return false
	}
	ex.notBefore, ex.advisedWait, ex.advice, ex.announce = nb, wait, adviceDetail(adv, wait), true
	return true
}

// probeSpent reports whether a probe has used its short fuse.
func (ex *exchange) probeSpent() bool { return ex.probeAttempts > 0 && ex.attempts >= ex.probeAttempts }

// schedule fits the advised wait into the cap and the run's deadline. A
// wait that does not fit ends the exchange with a clear error instead of
// sleeping past the deadline.
func (ex *exchange) schedule(adv operation.Advice) bool {
	remaining := operation.NoDeadline
	if dl, ok := ex.runCtx.Deadline(); ok {
		remaining = dl.Sub(ex.u.now())
	}
	d, ok := adv.Bound(ex.u.maxDelay, remaining)
	if !ok && ex.deferJournaled() {
		return false
	}
	if !ok && adv.Status == 0 {
		// No answer came (a broken connection, a lost answer): the wait
		// is tilectl's own backoff, not the provider's advice.
		ex.giveUp = fmt.Errorf("no answer from the provider, and the next resend's backoff of %s goes past the run's deadline or the %s cap: giving this request up",
			d.Round(time.Millisecond), ex.u.maxDelay)
		return false
	}
	if !ok {
		ex.giveUp = fmt.Errorf("provider asks to wait %s before resending (status %d), beyond the %s cap or the run's deadline: giving this request up",
			d.Round(time.Second), adv.Status, ex.u.maxDelay)
		return false
	}
	ex.wait = d
	return true
}

// deferJournaled reports whether this exchange's last answer asked for a
// wait that is journaled as the batch's not-before; if so the batch waits
// apart (dueBatches) or stays open for a later run instead of failing the
// exchange: a wait for one batch is not a failure of the run.
func (ex *exchange) deferJournaled() bool {
	if !ex.announce {
		return false
	}
	ex.announce, ex.deferred = false, true
	return true
}

// backoff tells retryablehttp to wait no further: checkRetry already
// waited through the injected Sleep (so tests never sleep) and the breaker.
func (ex *exchange) backoff(_, _ time.Duration, _ int, _ *http.Response) time.Duration {
	return 0
}

// transportAdvice is the rule for a broken connection or a lost answer:
// exponential from 500 ms, capped at 30 s, jittered as configured
// (decorrelated jitter draws from [500 ms, 3 x the previous wait]).
func (ex *exchange) transportAdvice() operation.Advice {
	b := TransportBackoff(ex.u.jitter)
	ex.u.randMu.Lock()
	d := b.Delay(ex.attempts, ex.u.rand, ex.prevTransport)
	ex.u.randMu.Unlock()
	ex.prevTransport = d
	return operation.Advice{Retry: true, Delay: d, Strategy: operation.StrategyExponential}
}

func readCapped(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return b, err
	}
	if int64(len(b)) > limit {
		return b[:limit], fmt.Errorf("answer longer than %d bytes", limit)
	}
	return b, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// pathSignal is what an attempt's end says about the path to the provider,
// for the adaptive limit: an answer's round trip, a throttle (429, 503), or
// a timeout (no answer in time, or 504 from a gateway that waited for one).
// A broken connection and other failures say nothing about load.
func pathSignal(resp *http.Response, err error) (concurrency.Signal, bool) {
	switch {
	case err != nil:
		return concurrency.TimedOut, isTimeout(err)
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusServiceUnavailable:
		return concurrency.Overloaded, true
	case resp.StatusCode == http.StatusGatewayTimeout:
		return concurrency.TimedOut, true
	case resp.StatusCode >= 500:
		return 0, false
	}
	return concurrency.Answered, true
}

// permanentTransport errors will not change on a resend: a bad certificate.
func permanentTransport(err error) bool {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci)
}

// leveled adapts zerolog to retryablehttp's LeveledLogger. Requests are
// logged by URL only; headers (the token) never reach it.
type leveled struct{ l zerolog.Logger }

func (l leveled) Error(msg string, kv ...any) { l.l.Warn().Fields(kv).Msg(msg) }
func (l leveled) Info(msg string, kv ...any)  { l.l.Info().Fields(kv).Msg(msg) }
func (l leveled) Debug(msg string, kv ...any) { l.l.Debug().Fields(kv).Msg(msg) }
func (l leveled) Warn(msg string, kv ...any)  { l.l.Warn().Fields(kv).Msg(msg) }

var _ retryablehttp.LeveledLogger = leveled{}
