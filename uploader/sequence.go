package uploader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// Strict client sequencing (docs/provider-api.md "Strict client
// sequencing (optional)"), on with ClientOptions.ClientID. The store journals
// each batch with its number (tilestore.Claim.Stream) before the first
// byte; every resend carries the same key, body and number. One batch is in
// flight per client ID, across processes: the provider runs batch n only
// when n is last committed + 1, so a second batch in flight would be a gap.
// SEQUENCE_GAP rebinds the open batch to the provider's last committed + 1
// and resends it; ALREADY_COMMITTED (or another batch's answer replayed for
// our number) settles the batch from the provider's sealed answer for its
// key (GET /v1/operations/{op_id}) when it has one, else by asking the
// provider which of its tiles it holds.

// sequenceStore is what sequencing needs from the Store beyond Store.
// *tilestore.Store implements it.
type sequenceStore interface {
	SequenceStream(ctx context.Context, provider, clientID string) (tilestore.Stream, error)
	SyncSequence(ctx context.Context, stream int64, serverLast uint64) (bool, error)
	RebindSequence(ctx context.Context, opID string, serverLast uint64) (uint64, error)
	FailCommittedBatch(ctx context.Context, opID string, httpStatus int, detail string) error
}

var _ sequenceStore = (*tilestore.Store)(nil)

// batchSeq is a batch's client sequence; n == 0 for a batch without one.
type batchSeq struct {
	client string
	n      uint64
}

func seqOf(b tilestore.Batch) batchSeq { return batchSeq{client: b.ClientID, n: b.ClientSeq} }

// maxRebinds bounds how often one send follows SEQUENCE_GAP: a provider
// that answers a gap for the number its own state asked for is not
// following the contract, and the batch is left open for the next run.
const maxRebinds = 3

// maxCommittedInARow bounds how many batches in a row a run lets the
// provider call committed without their answer while it holds none of
// their tiles. A provider used by this client alone calls a number
// committed only for a batch sent before whose answer was lost, and then
// holds its tiles; every other number is its last committed + 1 by its
// own state. Without a bound, a provider that calls every number
// committed (or another client using the same ID) would have the run
// send, fail and look up batch after batch until its deadline.
const maxCommittedInARow = 3

// busyPoll is how long a run waits before claiming again while another
// live run's batch holds the client's next number.
const busyPoll = 250 * time.Millisecond

// streamProvider names the provider in the client's sequence streams: the
// base URL without credentials.
func (u *Client) streamProvider() string {
	b := *u.base
	b.User = nil
	return b.String()
}

func (u *Client) seqStore() (sequenceStore, error) {
	s, ok := u.store.(sequenceStore)
	if !ok {
		return nil, errors.New("strict client sequencing: the store cannot journal client sequences")
	}
	return s, nil
}

// prepareSequence runs before a sequenced run settles or sends anything: it
// makes sure the provider offers sequencing (ErrNoSequencing otherwise),
// and raises the client's last committed number to the provider's, so a
// lost local database or another tool using the client ID cannot make this
// run send a number the provider committed for another batch.
func (u *Client) prepareSequence(ctx context.Context, rep *runReport) error {
	s, err := u.seqStore()
	if err != nil {
		return err
	}
	stream, err := u.syncStream(ctx, rep, s, u.clientID)
	if err != nil {
		return err
	}
	u.stream.Store(stream)
	return nil
}

// syncStream raises the client's stream (made the first time) to the
// provider's last committed number, and returns the stream's ID.
func (u *Client) syncStream(ctx context.Context, rep *runReport, s sequenceStore, client string) (int64, error) {
	st, err := s.SequenceStream(ctx, u.streamProvider(), client)
	if err != nil {
		return 0, err
	}
	last, err := u.clientState(ctx, rep, client)
	if err != nil {
		return 0, err
	}
	if _, err := s.SyncSequence(ctx, st.ID, last); err != nil {
		return 0, err
	}
	return st.ID, nil
}

// clientState is GET /v1/clients/{id}/state: the provider's last committed
// number for the client.
func (u *Client) clientState(ctx context.Context, rep *runReport, client string) (uint64, error) {
	path := "/v1/clients/" + url.PathEscape(client) + "/state"
	a := u.query(ctx, rep, http.MethodGet, path, "", func(b []byte) bool {
		return json.Unmarshal(b, &operation.ClientStateResponse{}) == nil
	})
	if a.err == nil && (a.status == http.StatusNotFound || a.status == http.StatusMethodNotAllowed) {
		return 0, fmt.Errorf("%w: a client ID (%s) is configured, but GET %s answered %d; "+
			"unset upload.client_id (--client-id, TILECTL_UPLOAD_CLIENT_ID), or use a provider that offers it",
			ErrNoSequencing, client, path, a.status)
	}
	doing := fmt.Sprintf("read the provider's sequence state of client %s (GET %s)", client, path)
	if err := a.failure("", doing); err != nil {
		return 0, fmt.Errorf("%s: %w", doing, err)
	}
	var st operation.ClientStateResponse
	if problem := u.stateProblem(a.body, client, &st); problem != "" {
		return 0, &ProviderError{Status: a.status, Message: fmt.Sprintf("%s: the answer %s %s", doing, clip(u.redact(string(a.body))), problem)}
	}
	if st.LastCommittedSequence >= math.MaxInt64 {
		// The journal keeps numbers as BIGINT, and the reference provider
		// takes 63 bits: there is no next number to send.
		return 0, &ProviderError{Status: a.status, Message: fmt.Sprintf("%s: it says client %s's last committed number is %d, "+
			"which leaves no next number (the highest this client sends is %d); use another client ID "+
			"(upload.client_id, --client-id, TILECTL_UPLOAD_CLIENT_ID)", doing, client, st.LastCommittedSequence, int64(math.MaxInt64))}
	}
	return st.LastCommittedSequence, nil
}

// stateProblem reads a client-state body into st and says what is wrong
// with it ("" when nothing is), in text safe to print.
func (u *Client) stateProblem(body []byte, client string, st *operation.ClientStateResponse) string {
	var raw struct {
		ClientID *string         `json:"client_id"`
		Last     json.RawMessage `json:"last_committed_sequence"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return "is not JSON of the client-state shape"
	}
	if raw.ClientID == nil || *raw.ClientID != client {
		name := "no client"
		if raw.ClientID != nil {
			name = fmt.Sprintf("client %q", clip(u.redact(*raw.ClientID)))
		}
		return fmt.Sprintf("names %s, not %q", name, client)
	}
	if len(raw.Last) > 0 && json.Unmarshal(raw.Last, &st.LastCommittedSequence) != nil {
		return "does not say the last committed number: its last_committed_sequence is not a whole number from 0 up"
	}
	st.ClientID = *raw.ClientID
	return ""
}

// seqVerdict is what an answer means for a sequenced batch.
type seqVerdict int

const (
	seqPlain     seqVerdict = iota // not about the sequence: handled as usual
	seqGap                         // 409 SEQUENCE_GAP
	seqCommitted                   // the number is committed, not clearly by this batch
)

// sequenceVerdict reads an answer to a sequenced batch. A 2xx naming another
// operation is another batch's outcome replayed for this number: it is
// never applied to this batch's tiles.
func sequenceVerdict(opID string, a exchangeResult, memo *responseMemo) (seqVerdict, string) {
	if a.err != nil {
		return seqPlain, ""
	}
	switch {
	case a.status == http.StatusConflict:
		eb, _ := operation.ParseErrorBody(a.body)
		switch eb.Code() {
		case operation.CodeSequenceGap:
			return seqGap, ""
		case operation.CodeAlreadyCommitted:
			return seqCommitted, "provider answered 409 ALREADY_COMMITTED"
		}
	case a.status >= 200 && a.status < 300:
		if ans, ok := memo.parse(a.body); ok && ans.OpID != opID {
			return seqCommitted, fmt.Sprintf("provider replayed operation %s's answer for this batch's number", clip(ans.OpID))
		}
	}
	return seqPlain, ""
}

// errCommittedAhead: the provider's state says the batch's number is
// already committed.
var errCommittedAhead = errors.New("the provider's state says this number is committed")

// followGap reads the provider's state after SEQUENCE_GAP and rebinds the
// batch to its last committed + 1, durably, before the resend.
func (u *Client) followGap(ctx context.Context, rep *runReport, opID string, seq batchSeq) (uint64, error) {
	s, err := u.seqStore()
	if err != nil {
		return 0, err
	}
	last, err := u.clientState(ctx, rep, seq.client)
	if err != nil {
		return 0, fmt.Errorf("after SEQUENCE_GAP for batch %s: %w", opID, err)
	}
	if last >= seq.n {
		return 0, errCommittedAhead
	}
	n, err := s.RebindSequence(ctx, opID, last)
	if err != nil {
		return 0, err
	}
	u.log.Info().Str("op_id", opID).Uint64("sent", seq.n).Uint64("provider_last", last).Uint64("resend_as", n).
		Msg("provider answered SEQUENCE_GAP; resending the batch under the same key with the number that follows its state")
	return n, nil
}

// settleCommitted settles a batch whose number the provider holds committed
// without saying this batch's outcome. The provider's operation record is
// asked first: its outcome cache goes with a restart, its record does not,
// so a batch whose answer was lost and whose number was committed meanwhile
// settles under its key from the sealed answer, like a replay, its
// rejections counted (settleFromRecord). Without a sealed 2xx record the
// batch fails with its number counted, and the provider is asked which of
// the batch's tiles it holds (lookUpAmbiguous): those are uploaded, the
// others go back to pending without a rejection. Either way the client's
// number then follows the provider's state.
func (u *Client) settleCommitted(ctx context.Context, flightID, opID string, seq batchSeq, tiles []tilestore.Tile, status int, code, detail string, rep *runReport, claims *claimState) error {
	s, err := u.seqStore()
	if err != nil {
		return err
	}
	detail = u.redact(detail) // it may quote the provider's text (another "operation"'s ID)
	settled, err := u.settleFromRecord(ctx, flightID, opID, tiles, rep, claims)
	if err != nil {
		return err
	}
	if settled {
		u.log.Info().Str("op_id", opID).Uint64("client_sequence", seq.n).Str("detail", detail).
			Msg("batch's number is committed at the provider; settled it from the provider's sealed answer for its key")
		_, err := u.syncStream(ctx, rep, s, seq.client)
		return err
	}
	u.log.Info().Str("op_id", opID).Uint64("client_sequence", seq.n).Str("detail", detail).
		Msg("batch's number is committed at the provider; settling it by tile lookup")
	jctx, cancel := detachedCtx(ctx)
	defer cancel()
	if err := s.FailCommittedBatch(jctx, opID, status, cleanText(detail, 2000)); err != nil {
		return err
	}
	// Without this, the next claim could bind another committed number.
	if _, err := u.syncStream(ctx, rep, s, seq.client); err != nil {
		return fmt.Errorf("after batch %s's number %d was found committed: %w", opID, seq.n, err)
	}
	unclear, held, err := u.lookUpAmbiguous(ctx, flightID, defaultConcurrency, rep, claims)
	if err != nil {
		return err
	}
	claims.skipIDs(unclear)
	if nums := claims.sequenceCommitted(seq.n, held > 0); len(nums) >= maxCommittedInARow {
		return &ProviderError{Status: status, Code: code, OpID: opID, Message: fmt.Sprintf(
			"client %s: the provider called numbers %v committed without those batches' answers, and holds none of "+
				"their tiles: another client is using client ID %s at this provider, or the provider does not keep "+
				"its sequence; give this tilectl a client ID no other client uses (upload.client_id, --client-id, "+
				"TILECTL_UPLOAD_CLIENT_ID); nothing was lost: the batches' tiles are pending, each looked up first",
			seq.client, nums, seq.client)}
	}
	return nil
}

// sequenceBusy decides what a claim does when another open batch holds the
// client's next number. more false ends this worker.
func (u *Client) sequenceBusy(ctx, stopCtx context.Context, flightID string, busy *tilestore.SequenceBusyError, rep *runReport, claims *claimState, due *dueBatches) (more bool, err error) {
	switch {
	case busy.Own:
		// This run's: waiting apart for the provider's advised time (due
		// settles it, then the call passes again), waiting past the
		// deadline (every tile left waits with it: Report.WaitsBehind), or
		// left open (its resends were refused) for the next run. A new
		// number would be a gap until it is settled.
		if due.stoppedBy(busy.OpID) {
			u.log.Info().Str("op_id", busy.OpID).Uint64("client_sequence", busy.Seq).
				Msg("this run's batch waiting for the provider's advised time holds the client's next number; the next batches go once it is settled")
			return false, nil
		}
		u.log.Info().Str("op_id", busy.OpID).Uint64("client_sequence", busy.Seq).
			Msg("this run's open batch holds the client's next number; no further batch is sent in this run")
		return false, nil
	case !busy.Expired:
		u.log.Debug().Str("op_id", busy.OpID).Str("flight_id", busy.FlightID).Msg("another run's batch holds the client's next number; waiting")
		if err := u.sleep(stopCtx, busyPoll); err != nil {
			return false, nil
		}
		return true, nil
	case busy.FlightID == flightID:
		// The worker's slot carries the expired batch's resend (nil gate).
		if _, err := u.settleOpen(ctx, flightID, nil, rep, claims, nil, due, nil); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, fmt.Errorf("%w: settle it first with tilectl upload-pending --flight %s (same client ID)", busy, busy.FlightID)
}

// setSequenceHeaders adds a sequenced batch's headers to its request.
func setSequenceHeaders(h http.Header, seq batchSeq) {
	if seq.n == 0 {
		return
	}
	h.Set(operation.HeaderClientID, seq.client)
	h.Set(operation.HeaderClientSequence, strconv.FormatUint(seq.n, 10))
}

// settleFromRecord settles the open batch opID from the provider's record
// of the operation (GET /v1/operations/{op_id}) when it is sealed with a
// 2xx, and reports whether it did. Any other state, or a route that does
// not answer (404), settles nothing; a request that fails is an error, and the batch stays
// open for the next run.
func (u *Client) settleFromRecord(ctx context.Context, flightID, opID string, tiles []tilestore.Tile, rep *runReport, claims *claimState) (bool, error) {
	st, found, _, err := u.readOperation(ctx, rep, opID)
	if err != nil || !found {
		return false, err
	}
	if st.State != "sealed" || st.Outcome == nil || st.Outcome.Status < 200 || st.Outcome.Status >= 300 {
		return false, nil
	}
	_, bytes := idsAndBytes(tiles)
	p := BatchProgress{OpID: opID, Tiles: len(tiles), Bytes: bytes, Replayed: true}
	return true, u.applyAnswer(ctx, flightID, opID, tiles, st.Outcome.Status, st.Outcome.Body, nil, p, rep, claims)
}
