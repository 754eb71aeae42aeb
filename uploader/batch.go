package uploader

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// batchResponse is the 200 body of POST .../tiles:batch.
type batchResponse struct {
	OpID    string       `json:"op_id"`
	Results []tileResult `json:"results"`
}

type tileResult struct {
	TileID  string `json:"tile_id"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func parseBatchResponse(b []byte) (batchResponse, bool) {
	var a batchResponse
	if err := json.Unmarshal(b, &a); err != nil || a.OpID == "" {
		return batchResponse{}, false
	}
	return a, true
}

// responseMemo parses one exchange's batch answer once: the transport's
// check that a 2xx body is an answer (its accept), the sequence verdict
// and the settlement's read of the same body share the parse (decoding a
// batch answer costs time per tile, which three parses would pay three
// times). It keeps the body it parsed, to
// know it again: the caller must not change a body it passed. A nil memo
// parses every time.
type responseMemo struct {
	body []byte
	ans  batchResponse
	ok   bool
}

func (m *responseMemo) parse(b []byte) (batchResponse, bool) {
	if m == nil {
		return parseBatchResponse(b)
	}
	if m.body == nil || !bytes.Equal(m.body, b) {
		m.ans, m.ok = parseBatchResponse(b)
		m.body = b
	}
	return m.ans, m.ok
}

func (m *responseMemo) accept(b []byte) bool { _, ok := m.parse(b); return ok }

// errBatchFailed wraps the provider's answer when it made a batch's key
// unusable (413, 422) and the batch was failed in the journal: its tiles
// are free for a new batch.
var errBatchFailed = errors.New("batch failed; its tiles go into a new batch")

// errLeftOpen: the batch was not answered in this run (its resend budget
// was spent, or its 2xx could not be read after every resend) and is still
// open. It does not end the run.
var errLeftOpen = errors.New("batch left open")

// errUnsettled: the provider answered, but neither its answer nor what it
// says when asked (its operation state, a tile lookup) settles every tile:
// the batch stays open, its tiles in it, and a later run asks again. It is
// an errLeftOpen that asking the operation state again in this run would
// not change.
var errUnsettled = fmt.Errorf("%w: its outcome is unknown", errLeftOpen)

// errSettledElsewhere: the batch was settled or failed after the caller
// read it as open, so it was not sent (NoteSend refused it). There is
// nothing left to do for it; it does not end the run.
var errSettledElsewhere = errors.New("batch settled or failed meanwhile; not sent")

// sendBatch sends a journaled batch (new, or left open by an earlier run)
// whose tiles' verified bytes are tb's, and settles it from the answer. It
// returns a run-ending error, errLeftOpen, errSettledElsewhere, or a
// *waitingError when the provider named a wait the exchange does not wait
// for (any for an unsequenced batch; for a sequenced one, one past the cap
// or the deadline, or after its resends are spent; its not-before is
// journaled); a batch it cannot settle is left open for the next run. It makes no body reader after it returns,
// so the caller may then release tb.
//
// opts.past says what the batch's sends in this call before it waited
// apart for the provider's advised time (dueBatches) leave: its sends are
// resends, and its counts go on from there (carried).
// opts.counted says the journal already counts the first attempt (a batch
// claimed with Claim.Sending): it goes without NoteSend; every further
// attempt is noted.
//
// A sequenced batch (seq.n > 0) carries its Client-Id and Client-Sequence;
// SEQUENCE_GAP rebinds it and resends it under the same key and body, and
// a number the provider holds committed settles it from the operation's
// sealed answer, or else by tile lookup.
func (u *Client) sendBatch(ctx context.Context, flightID, opID string, seq batchSeq, tiles []tilestore.Tile, tb *tileBytes, opts sendOpts, rep *runReport, claims *claimState) error {
	body, err := newBatchBody(opID, tiles, tb)
	if err != nil {
		return err
	}
	resumed, counted := opts.past.sent > 0, opts.counted
	noteSend := func(ctx context.Context) error {
		if counted {
			counted = false
			return nil
		}
		return u.store.NoteSend(ctx, opID)
	}
	start := u.now()
	path := "/v1/flights/" + url.PathEscape(flightID) + "/tiles:batch"
	var a exchangeResult
	memo := &responseMemo{}
	// The classifier makes 409 SEQUENCE_GAP and ALREADY_COMMITTED final
	// for the request as it is (operation.TableRule): what answers them is the
	// provider's client state, which only this caller reads and journals
	// (RebindSequence, settleCommitted). So a gap's resend, under a new
	// number, is this loop's; each send still goes through the sender.
	past := opts.past // a rebound number's exchange starts anew
	for rebinds := 0; ; rebinds++ {
		a = u.doExchange(&exchange{u: u, runCtx: ctx, report: rep, opID: opID, seq: seq, accept: memo.accept, tiles: len(tiles), prior: past.sent, priorSpare: past.spare, priorOwn: past.own, wire: opts.wire,
			advised: func(ctx context.Context, wait time.Duration) (time.Time, error) {
				return u.store.DeferBatch(ctx, opID, wait)
			}},
			http.MethodPost, path, body, noteSend)
		if seq.n == 0 || a.budgetSpent || a.waiting != nil || errors.Is(a.err, tilestore.ErrBatchNotOpen) {
			break
		}
		verdict, detail := sequenceVerdict(opID, a, memo)
		if verdict == seqCommitted {
			code := "" // another batch's 2xx replayed for our number
			if a.status == http.StatusConflict {
				code = operation.CodeAlreadyCommitted
			}
			return u.settleCommitted(ctx, flightID, opID, seq, tiles, a.status, code, detail, rep, claims)
		}
		if verdict != seqGap {
			break
		}
		if rebinds >= maxRebinds {
			// Left open: the next run asks again.
			return &ProviderError{Status: a.status, Code: operation.CodeSequenceGap, OpID: opID,
				Message: fmt.Sprintf("client %s: number %d still answered with a sequence gap after following the provider's "+
					"client state %d times: its gap check and its state disagree; the batch stays open and the next run "+
					"resends it under the same key (if this repeats, ask the provider's operators)", seq.client, seq.n, rebinds)}
		}
		n, err := u.followGap(ctx, rep, opID, seq)
		if errors.Is(err, errCommittedAhead) {
			return u.settleCommitted(ctx, flightID, opID, seq, tiles, a.status, operation.CodeSequenceGap, "provider answered SEQUENCE_GAP, and its client state says this number is committed", rep, claims)
		}
		if err != nil {
			return err
		}
		seq.n, past = n, carried{}
	}

	log := u.log.With().Str("op_id", opID).Int("tiles", len(tiles)).Logger()
	if errors.Is(a.err, tilestore.ErrBatchNotOpen) {
		// Settled or failed since it was read as open, by this run or
		// another, which counted what it settled: its key must not go on
		// the wire again.
		log.Info().Msg("batch settled or failed meanwhile; not sent again")
		return errSettledElsewhere
	}
	if a.waiting != nil {
		// One batch's wait is not a failure of the run: the others go on,
		// and no run sends this one before its journaled not-before.
		return a.waiting
	}
	if a.budgetSpent {
		// Resending more would add to the load on a provider that is
		// already failing; no later pass of this call sends it again, the
		// next call (the retry decorator's, or the next run's) settles it
		// with its key.
		log.Info().Int("attempts", a.attempts).Msg("resend budget spent; batch left open for the next run")
		return errLeftOpen
	}
	ok2xx := a.status >= 200 && a.status < 300
	if a.err == nil && ok2xx && (a.bodyErr != nil || !memo.accept(a.body)) {
		// The provider ran the batch, but what it answered is lost: the
		// outcome is unknown and the only safe retry is the same key, so
		// the batch stays open and nothing is rejected. The next call's
		// settling (not a later pass of this one) resends it under its
		// key, or reads its operation state.
		log.Warn().Int("status", a.status).Int("attempts", a.attempts).Err(a.bodyErr).
			Msg("the provider's 2xx answer could not be read after every resend; the batch stays open for a resend under the same key")
		return errLeftOpen
	}
	if a.err != nil || !ok2xx {
		perr := a.failure(opID, "upload batch")
		if !a.cancelled && a.verdict.keyDead {
			detail := cleanText(u.redact(perr.Error()), 2000)
			jctx, cancel := detachedCtx(ctx)
			defer cancel()
			if err := u.store.FailBatch(jctx, opID, a.status, detail); err != nil {
				return fmt.Errorf("%w (and recording the failure: %v)", perr, err)
			}
			return fmt.Errorf("%w: %w", errBatchFailed, perr)
		}
		return perr
	}
	_, bytes := idsAndBytes(tiles)
	p := BatchProgress{OpID: opID, Tiles: len(tiles), Bytes: bytes, Replayed: a.replayed(),
		Latency: u.now().Sub(start), Resends: max(a.attempts-1, 0)}
	if resumed {
		p.Resends = a.attempts
	}
	return u.applyAnswer(ctx, flightID, opID, tiles, a.status, a.body, memo, p, rep, claims)
}

// sendOpts are what sendBatch needs to know of a batch's past.
type sendOpts struct {
	// past is what its sends in this call before it waited for the
	// provider's advised time leave its next exchange (none: it did not
	// wait).
	past    carried
	counted bool // the journal counts its first attempt already (Claim.Sending)
	// wire, when set, is set once one of the batch's attempts goes on the
	// wire (reaches a connection to the provider, or is answered): a batch
	// whose exchange the call's end cut before then was not sent.
	wire *atomic.Bool
}

// detachedCtx outlives the run's cancellation by a little, so an answer that
// arrived is recorded rather than lost.
func detachedCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// idsAndBytes is the tiles' IDs, in order, and their bytes.
func idsAndBytes(tiles []tilestore.Tile) (ids []string, bytes int64) {
	ids = make([]string, len(tiles))
	for i, tl := range tiles {
		ids[i] = tl.ID
		bytes += tl.SizeBytes
	}
	return ids, bytes
}

func sizesOf(tiles []tilestore.Tile) map[string]int64 {
	m := make(map[string]int64, len(tiles))
	for _, t := range tiles {
		m[t.ID] = t.SizeBytes
	}
	return m
}

// applyAnswer settles a batch of tiles from a 2xx body in one Store
// transaction. A tile is uploaded when the answer names it exactly once as
// accepted or duplicate, rejected when it names it exactly once as
// rejected. A tile the answer does not clearly answer (settleUnclear) is
// uploaded when the provider holds its bytes, and a protocol_error
// rejection, which spends an attempt, only when the provider says it does
// not; when the provider cannot say, nothing is recorded and the batch
// stays open (errUnsettled).
func (u *Client) applyAnswer(ctx context.Context, flightID, opID string, tiles []tilestore.Tile,
	status int, body []byte, memo *responseMemo, p BatchProgress, rep *runReport, claims *claimState) error {
	ids := make([]string, len(tiles))
	for i, tl := range tiles {
		ids[i] = tl.ID
	}
	st, accepted, duplicate, strangers := u.settlement(opID, ids, status, body, memo)
	held, err := u.settleUnclear(ctx, rep, flightID, &st, tiles)
	if err != nil {
		return err
	}
	duplicate += held
	sizes := sizesOf(tiles)
	var bytes int64
	for _, id := range st.Uploaded {
		bytes += sizes[id]
	}
	if strangers > 0 {
		u.log.Warn().Str("op_id", opID).Int("unknown_results", strangers).Msg("provider answered for tiles that were not sent")
	}
	// The answer is in hand: record it even if the run was cancelled
	// meanwhile, or the next run would have to ask again.
	jctx, cancel := detachedCtx(ctx)
	defer cancel()
	claims.skip(st.Rejections) // before the commit frees them for other workers
	if err := u.store.SettleBatch(jctx, st); err != nil {
		return fmt.Errorf("record the answer: %w", err) // the store names the batch
	}
	p.Uploaded, p.Rejected = len(st.Uploaded), len(st.Rejections)
	claims.answered()
	rep.settled(p, accepted, duplicate, st.Rejections, bytes)
	return nil
}

// settleUnclear asks the provider about the tiles st rejects as
// protocol_error (an answer that does not clearly answer them): only a
// clear "rejected" may spend a tile's attempt, and the provider may hold a
// tile its answer left out. Those it holds with the same bytes move to
// st.Uploaded (held counts them); those it clearly does not hold stay
// protocol_error rejections. When it gives no clear answer about one, the
// batch's outcome for that tile is unknown: errUnsettled, and nothing is
// recorded.
func (u *Client) settleUnclear(ctx context.Context, rep *runReport, flightID string, st *tilestore.Settlement, tiles []tilestore.Tile) (held int, err error) {
	unclear := map[string]bool{}
	for _, r := range st.Rejections {
		if r.Reason == ReasonProtocolError {
			unclear[r.TileID] = true
		}
	}
	if len(unclear) == 0 {
		return 0, nil
	}
	ask := make([]tilestore.Tile, 0, len(unclear))
	for _, tl := range tiles {
		if unclear[tl.ID] {
			ask = append(ask, tl)
		}
	}
	same, _, unknown, err := u.lookUpTiles(ctx, rep, flightID, ask, defaultConcurrency)
	if err != nil {
		return 0, fmt.Errorf("ask the provider about %d tile(s) batch %s's answer left unclear: %w", len(ask), st.OpID, err)
	}
	log := u.log.With().Str("op_id", st.OpID).Logger()
	if len(unknown) > 0 {
		log.Warn().Int("tiles", len(unknown)).
			Msg("the provider's answer left tiles unclear and it gave no clear answer when asked about them; the batch stays open and the next run asks again")
		return 0, fmt.Errorf("batch %s: %d tile(s): %w", st.OpID, len(unknown), errUnsettled)
	}
	isHeld := make(map[string]bool, len(same))
	for _, id := range same {
		isHeld[id] = true
	}
	kept := st.Rejections[:0]
	for _, r := range st.Rejections {
		switch {
		case isHeld[r.TileID]:
			st.Uploaded = append(st.Uploaded, r.TileID)
		case unclear[r.TileID]:
			r.Message = clip(r.Message + "; the provider does not hold it")
			kept = append(kept, r)
		default:
			kept = append(kept, r)
		}
	}
	st.Rejections = kept
	log.Info().Int("unclear", len(unclear)).Int("held", len(same)).
		Msg("asked the provider about tiles its answer left unclear")
	return len(same), nil
}

// settlement is what a 2xx body settles: classifyAnswer's verdict with the
// token redacted from the provider's text. Whatever the body, it passes
// tilestore.Settlement.Validate (FuzzAnswerToSettlement), so no answer can
// keep a batch from settling.
func (u *Client) settlement(opID string, ids []string, status int, body []byte, memo *responseMemo) (st tilestore.Settlement, accepted, duplicate, strangers int) {
	st, accepted, duplicate, names := classifyAnswer(opID, ids, status, body, memo)
	for i := range st.Rejections {
		st.Rejections[i].Message = u.redact(st.Rejections[i].Message)
		st.Rejections[i].Reason = u.redact(st.Rejections[i].Reason)
	}
	if len(names) > 0 {
		st.Detail = u.redact(fmt.Sprintf("answer named %d tile(s) not in the batch: %s", len(names), clip(strings.Join(names, ", "))))
	}
	return st, accepted, duplicate, len(names)
}

// classifyAnswer decides, from a 200 body, what happened to each tile of
// the batch: uploaded (named accepted or duplicate exactly once) or
// rejected, with ReasonProtocolError for a tile the answer does not clearly
// answer (absent, named twice, unknown status, answer unreadable or for
// another operation). Every member lands in exactly one of the two lists;
// results for tiles that were not sent are returned as strangers and
// change nothing.
func classifyAnswer(opID string, ids []string, status int, body []byte, memo *responseMemo) (st tilestore.Settlement, accepted, duplicate int, strangers []string) {
	ans, ok := memo.parse(body)
	var protoMsg string
	switch {
	case !ok:
		protoMsg = "the provider's answer could not be read after every resend"
	case ans.OpID != opID:
		protoMsg = fmt.Sprintf("the answer is for operation %q, not this batch", clip(ans.OpID))
	}
	results := map[string][]tileResult{}
	members := make(map[string]bool, len(ids))
	for _, id := range ids {
		members[id] = true
	}
	if protoMsg == "" {
		for _, r := range ans.Results {
			if !members[r.TileID] {
				strangers = append(strangers, r.TileID)
				continue
			}
			results[r.TileID] = append(results[r.TileID], r)
		}
	}
	st = tilestore.Settlement{OpID: opID, HTTPStatus: status}
	for _, id := range ids {
		rs := results[id]
		var rej *tilestore.Rejection
		switch {
		case protoMsg != "":
			rej = &tilestore.Rejection{Reason: ReasonProtocolError, Message: protoMsg}
		case len(rs) == 0:
			rej = &tilestore.Rejection{Reason: ReasonProtocolError, Message: "the answer does not mention this tile"}
		case len(rs) > 1:
			rej = &tilestore.Rejection{Reason: ReasonProtocolError, Message: fmt.Sprintf("the answer names this tile %d times", len(rs))}
		case rs[0].Status == string(TileAccepted):
			accepted++
		case rs[0].Status == string(TileDuplicate):
			duplicate++
		case rs[0].Status == string(TileRejected):
			// Clean first, then default: a reason that cleans to nothing
			// ("\u0000") must not reach the store empty.
			reason := strings.TrimSpace(clip(rs[0].Reason))
			if reason == "" {
				reason = "rejected"
			}
			rej = &tilestore.Rejection{Reason: reason, Message: clip(rs[0].Message)}
		default:
			rej = &tilestore.Rejection{Reason: ReasonProtocolError, Message: fmt.Sprintf("unknown result status %q", clip(rs[0].Status))}
		}
		if rej == nil {
			st.Uploaded = append(st.Uploaded, id)
			continue
		}
		rej.OpID, rej.TileID = opID, id
		st.Rejections = append(st.Rejections, *rej)
	}
	return st, accepted, duplicate, strangers
}

// clip makes provider text safe to store and show: valid UTF-8, no NUL
// (Postgres refuses both, which would keep a batch from ever settling), at
// most 200 bytes cut on a character boundary.
func clip(s string) string { return cleanText(s, 200) }

// cleanText is clip with a given byte limit.
func cleanText(s string, limit int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// redact removes the provider token from text a provider sent back, before
// it is stored or logged. Cutting a token that is not valid UTF-8 out of
// valid text can split a character: the result is made valid again, so
// redacted text stays storable.
func (u *Client) redact(s string) string {
	if u.token == "" || !strings.Contains(s, u.token) {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, u.token, "[redacted]"), "\uFFFD")
}
