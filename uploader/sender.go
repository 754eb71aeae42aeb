package uploader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/uploader/concurrency"
)

// The sender is the one place where the uploader's requests are admitted,
// sent, classified and waited for, in the shape of rclone's lib/pacer: every
// request path (a batch, a tile lookup, the capabilities, an operation's
// state, a client's sequence state) goes through doExchange, one loop that
// for each attempt
//
//  1. admits it: the circuit breaker (breaker.go), then for a resend
//     (but one after a throttle's advised wait: verdict.sparesBudget) the run's retry budget (operation.RetryBudget),
//     then the pacer (pacer.go);
//  2. sends it, journaling a batch's attempt first (NoteSend; a batch's
//     first attempt right after its claim is counted by the claim);
//  3. classifies its end with classify (classify.go), the one decider of
//     what an answer means;
//  4. tells the verdict to its listeners: the breaker, the adaptive limit
//     on batches in flight (concurrency.Controller) and the pacer;
//  5. waits as the verdict says, within a cap on one wait and the run's
//     deadline, journaling a provider's advised wait as a batch's
//     not-before (DeferBatch) and handing the batch to a goroutine of its
//     own (dueBatches) rather than holding its slot while it waits.
//
// The loop is the uploader's own and not go-retryablehttp's: that loop
// waits between attempts on a real timer over the request's context,
// where these waits are shared with the breaker's cool-down and the
// pacer, go through the injected clock (so tests and the pacer run on a
// fake one), and end with the run's context while a batch's request
// context outlives it on purpose (a batch on the wire finishes and its
// answer is journaled). Its CheckRetry and Backoff would have nothing left
// to decide.

// exchange is one logical request (a batch, or a GET) and its resends.
type exchange struct {
	u      *Client
	runCtx context.Context
	// report counts the exchange and hears the waits it announces: the
	// call's runReport, or nil for a request outside UploadPendingTiles
	// (Capabilities, LookUpTile), which no report counts.
	report *runReport
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
	writesMu  sync.Mutex
	writes    []*atomic.Int32
	wait      time.Duration
	giveUp    error
	timeouts  int
	cancelled bool // resending stopped because the run was cancelled
	// adm is the breaker's leave for the attempt on the wire (adm.probe:
	// it is the half-open probe).
	adm admission
	// budgetSpent: a resend was refused by the run's retry budget.
	budgetSpent bool
	// prior is how many times this upload call (of this process) sent
	// the batch before this exchange, which began after it waited apart
	// for the provider's advised time (0: none). Its first attempt here is
	// then a resend, counted as one (and taken from the retry budget unless
	// the wait spares it: priorSpare), and its attempts count on from prior: a provider's limit on attempts
	// (max_attempts, the contract table's) is of the request's, not of one
	// exchange's. Sends of earlier calls or processes (the journal's
	// Batch.Sends) are not counted: a batch adopted after a crash is
	// resent whatever it cost before, or it might never be settled.
	prior      int
	priorSpare bool
	// priorOwn is how many of the batch's resends in this call before this
	// exchange tilectl decided on its own, after an answer that named no
	// wait; own is this exchange's. MaxResends and the transport backoff
	// count on from priorOwn: the sends a provider asked for by naming a
	// wait spend neither (its max_attempts, the contract table's limits,
	// the retry budget but after a throttle's advised wait
	// (verdict.sparesBudget), and the deadline bound those).
	priorOwn, own int
	// asked is how many of this exchange's resends followed a wait the
	// answer named (a sequenced batch waits its advice here): they are
	// not tilectl's own (ownSent). spareNext: the resend about to go
	// takes no token of the retry budget (verdict.sparesBudget).
	asked     int
	spareNext bool
	// prevTransport is the last transport resend wait (decorrelated jitter).
	prevTransport time.Duration
	// lostOnce: an answer of this exchange was lost already (resend).
	lostOnce bool
	// advised, set for a batch, journals the provider's advised wait as
	// the batch's not-before (Store.DeferBatch) before the batch waits for
	// it; tiles is the batch's size, for the announcement.
	advised func(ctx context.Context, wait time.Duration) (time.Time, error)
	tiles   int
	// notBefore is the last not-before journaled, advisedWait the wait
	// journaled from the answer, advice what asked for it; deferred is
	// set when the batch waits apart (a *waitingError) instead of here.
	notBefore   time.Time
	advisedWait time.Duration
	deferred    bool
	advice      string
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
	// limit learns from; attemptStart is when the attempt went on the
	// wire, less its wait for the pacer (paced).
	batch        bool
	attemptStart time.Time
	paced        time.Duration
	// dialed is when the attempt got a connection it had to open (zero:
	// it reused one), under writesMu.
	dialed time.Time
	// wire, when set, is set once an attempt goes on the wire: it got a
	// connection to the provider (the transport writes it next), or an
	// answer (a transport that tells no connection). An attempt that the
	// request's end cut before either never left (sendOpts.wire).
	wire *atomic.Bool
}

// attemptCtx returns ctx with a trace of its own for one attempt: its
// writes, and when it got a new connection.
func (ex *exchange) attemptCtx(ctx context.Context) context.Context {
	n := new(atomic.Int32)
	ex.writesMu.Lock()
	ex.writes = append(ex.writes, n)
	ex.dialed = time.Time{}
	ex.writesMu.Unlock()
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { n.Add(1) },
		GotConn: func(info httptrace.GotConnInfo) {
			if ex.wire != nil {
				ex.wire.Store(true)
			}
			if info.Reused {
				return
			}
			now := ex.u.now()
			ex.writesMu.Lock()
			ex.dialed = now
			ex.writesMu.Unlock()
		},
	})
}

// newConn reports whether the last attempt opened its connection.
func (ex *exchange) newConn() bool {
	ex.writesMu.Lock()
	defer ex.writesMu.Unlock()
	return !ex.dialed.IsZero()
}

// onWire is when the attempt that started at asked (its wait for the
// pacer included) went on the wire: a connection it had to open first
// moves its start to when it got it. Opening a connection takes its own
// round trips (TCP's handshake, TLS's), once per connection, which say
// nothing about a queue on the path: a limit that grows opens a
// connection per new slot, and read as round trips of batches those
// handshakes look like a queue as long again as the link.
func (ex *exchange) onWire(asked time.Time) time.Time {
	ex.writesMu.Lock()
	defer ex.writesMu.Unlock()
	if ex.dialed.After(asked) {
		return ex.dialed.Add(-ex.paced)
	}
	return asked.Add(-ex.paced)
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

// exchangeResult is how an exchange ended.
type exchangeResult struct {
	status   int // 0 when no answer came
	header   http.Header
	body     []byte
	bodyErr  error // the body could not be read whole
	err      error // transport error, or why resending stopped early
	attempts int
	timeouts int
	// verdict is the classifier's reading of the last attempt.
	verdict verdict
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

func (a exchangeResult) replayed() bool { return a.header.Get("Idempotent-Replayed") == "true" }

// query runs method path, a request without a body, through the sender.
// rep counts it (nil: no report does).
func (u *Client) query(runCtx context.Context, rep *runReport, method, path, opID string, accept func([]byte) bool) exchangeResult {
	return u.doExchange(&exchange{u: u, runCtx: runCtx, report: rep, opID: opID, accept: accept}, method, path, nil, nil)
}

// doExchange runs method path on an exchange the caller made (the
// capabilities probe sets its short fuse; a batch send sets its tiles and
// sequence). body is nil for a request without one; onAttempt runs before
// every attempt of a body request (the journal's NoteSend) and stops the
// exchange if it fails.
func (u *Client) doExchange(ex *exchange, method, path string, body *batchBody, onAttempt func(context.Context) error) exchangeResult {
	runCtx := ex.runCtx
	// A batch already on the wire is allowed to finish when the run is
	// cancelled (it is journaled either way); no further resend starts.
	// A lost lease is the exception: from then on another run may take
	// the batch over, so its request ends at once.
	reqCtx := runCtx
	if body != nil {
		var cancel context.CancelCauseFunc
		reqCtx, cancel = context.WithCancelCause(context.WithoutCancel(runCtx))
		defer cancel(nil)
		if dl, ok := runCtx.Deadline(); ok {
			var cancelDl context.CancelFunc
			reqCtx, cancelDl = context.WithDeadline(reqCtx, dl)
			defer cancelDl()
		}
		if lost := leaseLostOf(runCtx); lost != nil {
			stop := context.AfterFunc(lost, func() { cancel(context.Cause(lost)) })
			defer stop()
		}
	}
	ex.batch = body != nil
	defer func() {
		if ex.adm.probe {
			u.breaker.abandon()
		}
	}()
	var end attemptEnd
	var v verdict
	for {
		if ex.attempts > 0 && !ex.waitToResend() {
			break
		}
		if !ex.admit() {
			if ex.attempts == 0 {
				// Nothing was sent: the breaker or the pacer stopped the
				// first send, or the retry budget refused the resend of a
				// batch back from a wait apart, which is then left open
				// as any refused resend is (budgetSpent), and the refusal
				// counted.
				if ex.budgetSpent && ex.report != nil {
					ex.report.exchange(0, 0, true, true)
				}
				return exchangeResult{err: ex.giveUp, cancelled: ex.cancelled, budgetSpent: ex.budgetSpent}
			}
			break
		}
		e, sent := ex.send(reqCtx, method, path, body, onAttempt)
		if !sent {
			if ex.attempts == 0 {
				return exchangeResult{err: e.err, cancelled: runCtx.Err() != nil && errors.Is(e.err, runCtx.Err())}
			}
			ex.giveUp = e.err
			break
		}
		end = e
		ex.attempts++
		end.attempt = ex.prior + ex.attempts
		v = classify(end, u.now())
		ex.listen(v)
		if !ex.resend(v, end) {
			break
		}
	}
	sends := ex.attempts + ex.replays()
	if ex.report != nil {
		ex.report.exchange(sends, ex.timeouts, ex.budgetSpent, ex.prior > 0)
	}
	a := exchangeResult{err: end.err, attempts: sends, timeouts: ex.timeouts, budgetSpent: ex.budgetSpent, redact: u.redact,
		verdict: v, status: end.status, header: end.header, body: end.body, bodyErr: end.bodyErr}
	if ex.giveUp != nil {
		a.err = ex.giveUp
	}
	a.cancelled = ex.cancelled || (a.err != nil && runCtx.Err() != nil && errors.Is(a.err, runCtx.Err()))
	if ex.deferred && ex.giveUp == nil {
		a.waiting = &waitingError{w: Wait{Reason: WaitProviderAdvice, OpID: ex.opID, Tiles: ex.tiles, Until: ex.notBefore,
			Detail: ex.advice}, left: ex.advisedWait, past: carried{sent: ex.prior + ex.attempts, own: ex.priorOwn + ex.own, spare: ex.spareNext}}
	}
	return a
}

// admit takes the attempt's leave: the breaker's, the retry budget's for a
// resend (the first attempt adds to it), then the pacer's. It reports false,
// with giveUp (and cancelled) set, when the attempt may not go.
func (ex *exchange) admit() bool {
	u := ex.u
	adm, err := u.breaker.acquire(ex.runCtx)
	if err != nil {
		ex.cancelled, ex.giveUp = ex.runCtx.Err() != nil, err
		return false
	}
	ex.adm = adm
	switch {
	case ex.attempts == 0 && ex.prior == 0:
		u.budget.OnFirstAttempt()
	case ex.attempts == 0 && ex.priorSpare, ex.attempts > 0 && ex.spareNext:
		// A resend after a throttle's advised wait, waited apart or here
		// (verdict.sparesBudget).
	case !u.budget.TryResend():
		ex.budgetSpent, ex.giveUp = true, errResendBudget
		return false
	}
	asked := u.now()
	if err := u.pacer.wait(ex.runCtx); err != nil {
		ex.cancelled, ex.giveUp = true, err
		return false
	}
	ex.paced = u.now().Sub(asked)
	return true
}

// send makes one attempt: a batch's is journaled first (onAttempt), and
// none starts once the run is cancelled. sent is false when the request
// did not go (e.err says why).
func (ex *exchange) send(reqCtx context.Context, method, path string, body *batchBody, onAttempt func(context.Context) error) (e attemptEnd, sent bool) {
	u := ex.u
	if body != nil {
		if err := ex.runCtx.Err(); err != nil {
			return attemptEnd{err: err}, false
		}
		if onAttempt != nil {
			if err := onAttempt(ex.runCtx); err != nil {
				return attemptEnd{err: &journalError{err}}, false
			}
		}
	}
	// Every write of the request is seen, so a re-send that net/http makes
	// on its own cannot go uncounted.
	req, err := http.NewRequestWithContext(ex.attemptCtx(reqCtx), method, u.endpoint(path), nil)
	if err != nil {
		return attemptEnd{err: fmt.Errorf("build %s %s: %w", method, path, err)}, false
	}
	if body != nil {
		// Without GetBody net/http cannot replay the batch on its own after
		// a reused connection fails (it would, for a request with an
		// Idempotency-Key): the failure comes back here, and the resend
		// goes through the journal (NoteSend) and the resends' bounds.
		r := body.paced(reqCtx, u.pace)
		req.Body, req.ContentLength, req.GetBody = r, int64(r.Len()), nil
		req.Header.Set("Content-Type", body.contentType())
		req.Header.Set(operation.HeaderIdempotencyKey, ex.opID)
		setSequenceHeaders(req.Header, ex.seq)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", u.ua)
	if u.token != "" {
		req.Header.Set("Authorization", "Bearer "+u.token)
	}
	// The attempt's time counts its wait for the pacer: a batch that
	// waits for it is a batch queued on the path, as the adaptive limit
	// sees it.
	asked := u.now()
	resp, err := u.client.Do(req)
	ex.attemptStart = ex.onWire(asked)
	if err == nil && ex.wire != nil {
		ex.wire.Store(true)
	}
	if err != nil {
		return attemptEnd{err: err, accept: ex.accept}, true
	}
	if ex.heard != nil {
		ex.heard()
	}
	// The answer shows the protocol, which decides whether connections
	// are dialed ahead (warm.go).
	if resp.ProtoMajor >= 2 {
		u.warm.multiplexed() // one connection carries every request
	} else {
		u.warm.http1() // a request at a time per connection
	}
	b, rerr := readCapped(resp.Body, u.maxBody)
	resp.Body.Close()
	return attemptEnd{status: resp.StatusCode, header: resp.Header, body: b, bodyErr: rerr, accept: ex.accept}, true
}

// listen tells the verdict to the breaker, the adaptive limit (a batch's
// attempts only) and the pacer. An attempt the run's cancellation cut
// says nothing about the provider.
func (ex *exchange) listen(v verdict) {
	u := ex.u
	if v.timeout {
		ex.timeouts++
	}
	if ex.runCtx.Err() != nil {
		return
	}
	u.breaker.record(ex.adm, !v.breakerFailure)
	ex.adm.probe = false
	raised, paced := u.pacer.answered(v, ex.attemptStart)
	if v.hasSignal && ex.batch && (v.signal != concurrency.Overloaded || raised) {
		u.adaptive.Observe(concurrency.Sample{Start: ex.attemptStart, End: u.now(), Signal: v.signal, NewConn: ex.newConn(),
			Paced: paced})
	}
}

// errResendBudget: the run's retry budget refused a resend.
var errResendBudget = errors.New("the run's resend budget is spent (upload.resend_budget): resending no more in this run")

// resend decides from the verdict whether the exchange goes again, and
// sets the wait before it: the verdict's, bounded by the cap on one wait
// and the run's deadline. A batch journals the provider's advised wait
// first and then waits apart (deferred). It reports false, with giveUp
// set when the reason is worth an error, when the exchange ends here.
func (ex *exchange) resend(v verdict, e attemptEnd) bool {
	if !v.retries() {
		return false
	}
	ex.spareNext = v.sparesBudget()
	if ex.probeSpent() && (v.ownBackoff || !json.Valid(e.body)) {
		// The first contact's fuse: no answer, a 2xx that is not the API,
		// or an error page that is not the API's error body.
		return false
	}
	d := v.wait
	switch {
	case v.kind == unclear && !v.timeout && !ex.lostOnce:
		// The answer was lost: a 2xx cut off or not an answer (the
		// provider had the request), or a connection broken (it may have had it, or it may
		// never have seen it: often a kept-alive connection it had
		// closed). The contract sets no wait before the same key goes
		// again (a provider replays what it stored), so the first such
		// resend goes at once. Another lost
		// answer backs off, so that a path that breaks every answer is
		// not hammered. A timeout backs off from the first: an answer
		// that did not come in time says the provider or the path is
		// loaded, and every batch in flight may have met it at once.
		ex.lostOnce = true
		d = 0
	case v.ownBackoff:
		d = ex.transportWait()
	}
	journaled := false
	if ex.advised != nil && v.floor > 0 {
		if !ex.journalAdvice(v, d) {
			return false
		}
		journaled = true
		if ex.seq.n == 0 {
			// The batch waits apart (dueBatches) for the time the
			// provider advised, whatever the answer (a throttle, a 409
			// IDEMPOTENCY_PROCESSING), so its slot goes to another batch
			// meanwhile. A sequenced batch waits here: the next number
			// must not go before it.
			ex.deferred = true
			return false
		}
	}
	remaining := time.Duration(math.MaxInt64)
	if dl, ok := ex.runCtx.Deadline(); ok {
		remaining = dl.Sub(ex.u.now())
	}
	d, ok := bound(d, v.floor, ex.u.maxDelay, remaining)
	switch {
	case !ok && journaled:
		ex.deferred = true // past the cap or the deadline: it waits apart or for a later run
		return false
	case !ok && v.ownBackoff:
		// No answer came (a broken connection), or it was lost (a 2xx cut
		// off or not an answer): the wait is tilectl's own backoff, not
		// the provider's advice.
		what := "no answer from the provider"
		if v.status != 0 {
			what = fmt.Sprintf("the provider's %d answer was lost (cut off, or not an answer)", v.status)
		}
		ex.giveUp = fmt.Errorf("%s, and the next resend's backoff of %s goes past the run's deadline or the %s cap: giving this request up",
			what, d.Round(time.Millisecond), ex.u.maxDelay)
		return false
	case !ok:
		ex.giveUp = fmt.Errorf("provider asks to wait %s before resending (status %d), beyond the %s cap or the run's deadline: giving this request up",
			d.Round(time.Second), v.status, ex.u.maxDelay)
		return false
	case ex.ownSent() > ex.u.resends:
		// The batch's own resends are spent: this exchange's, and those
		// tilectl decided on before the batch's earlier waits apart in
		// this call. The caller reads the last answer, or a journaled
		// wait is waited apart.
		ex.deferred = journaled
		return false
	}
	if v.floor == 0 {
		ex.own++ // the answer named no wait: tilectl's own resend
	} else {
		ex.asked++
	}
	ex.wait, ex.announce = d, journaled
	return true
}

// ownSent is the batch's sends in this call that were not the provider's
// asking: this exchange's first send and the resends tilectl decided on
// its own, in it and before the batch's earlier waits apart (priorOwn).
// The resends after a wait the provider named (asked), which a sequenced
// batch waits in place, spend neither MaxResends nor the transport
// backoff.
func (ex *exchange) ownSent() int { return ex.priorOwn + ex.attempts - ex.asked }

// waitToResend waits the wait resend set, announcing a provider-advised
// one; no resend starts once the run is cancelled.
func (ex *exchange) waitToResend() bool {
	if ex.announce {
		ex.announce = false
		ex.u.announce(ex.report, Wait{Reason: WaitProviderAdvice, OpID: ex.opID, Tiles: ex.tiles,
			Until: ex.u.now().Add(ex.wait), Detail: ex.advice})
	}
	_ = ex.u.sleep(ex.runCtx, ex.wait)
	if err := ex.runCtx.Err(); err != nil {
		ex.cancelled, ex.giveUp = true, err
		return false
	}
	return true
}

// journalAdvice journals the provider's advised wait as the batch's
// not-before before the batch waits for it apart or is left to a later
// run: a run that dies meanwhile, or any other run, then waits for it too.
// The wait is the advice's for this attempt (d, the verdict's: an
// exponential strategy backs off from "after" by the batch's attempts in
// this upload call, which count on across its waits apart; an "immediate"
// strategy's is none), cut to the cap on one wait (where it is cut, not
// below the floor the provider named: bound) and to MaxAdvisedWait. It reports false, with giveUp set, when the journal
// cannot be written.
func (ex *exchange) journalAdvice(v verdict, d time.Duration) bool {
	d, _ = bound(d, v.floor, ex.u.maxDelay, time.Duration(math.MaxInt64))
	wait := min(d, MaxAdvisedWait)
	jctx, cancel := detachedCtx(ex.runCtx)
	defer cancel()
	nb, err := ex.advised(jctx, wait)
	if err != nil {
		ex.giveUp = &journalError{err}
		return false
	}
	ex.notBefore, ex.advisedWait, ex.advice = nb, wait, adviceDetail(v, wait)
	return true
}

// probeSpent reports whether a probe has used its short fuse.
func (ex *exchange) probeSpent() bool { return ex.probeAttempts > 0 && ex.attempts >= ex.probeAttempts }

// transportWait is the wait before resending after no answer or a lost
// one: exponential from 500 ms by the attempt's number in this exchange
// plus the resends tilectl decided on its own before the batch's earlier
// waits apart in this call (the provider's advised sends do not count),
// capped at 30 s,
// jittered as configured (decorrelated jitter draws from [500 ms, 3 x the
// previous wait]). The first resend after a broken connection or a lost
// answer (not a timeout) does not wait at all (resend).
func (ex *exchange) transportWait() time.Duration {
	b := TransportBackoff(ex.u.jitter)
	ex.u.randMu.Lock()
	d := b.Delay(ex.ownSent(), ex.u.rand, ex.prevTransport)
	ex.u.randMu.Unlock()
	ex.prevTransport = d
	return d
}

// journalError is a failure to record an attempt in the local journal: a
// database problem, never the provider's, whatever it answered before.
type journalError struct{ err error }

func (e *journalError) Error() string {
	return "record the send in the upload journal: " + e.err.Error()
}
func (e *journalError) Unwrap() error { return e.err }

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
