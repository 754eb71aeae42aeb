package uploader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// settleOpen settles every batch an earlier run left open and no live run
// holds, oldest first, before any new batch forms: a tile must never
// travel under two keys.
//
// When every member's bytes still verify, the batch is resent with the same
// key and the same body: the provider replays its answer or runs it. When
// they do not, resending would send other bytes under the key, so the
// provider is asked what became of the operation instead. It returns how
// many open batches it settled.
//
// Only batches no live run holds are settled: this run's own, those whose
// lease expired (their run died or lost the database), and those of the
// runs in dead (runs of this machine whose lock proved them dead). A live
// owner's batch is never touched. A batch whose provider-advised time has
// not come (its journaled not-before), or that the provider asks to wait
// now, is adopted but not sent before then: due holds it, and a batch due
// already holds is left to it. settling, if not nil, is told when settling
// starts and when it is done.
//
// Each batch is settled in a slot of the call's limit on batches in flight
// (g), taken with AcquireFirst as a batch back from an advised wait takes
// it, so the limit holds beside the batches coming due. g is nil when the
// caller already holds a slot, which the batches then go in one after
// another: a worker whose claim found an expired batch holding the
// client's next number (sequenceBusy), where a second slot would never
// come with one allowed.
func (u *Client) settleOpen(ctx context.Context, flightID string, dead []string, rep *runReport, claims *claimState, settling func(SettlingProgress), due *dueBatches, g gate) (int, error) {
	// Which batches due holds is read before the adoption: a batch due
	// lets go has its settlement or failure committed before it leaves
	// held, so one read after the adoption could be a stale open row of a
	// batch due finished meanwhile.
	held := due.heldNow()
	adopted, err := u.store.AdoptOpenBatches(ctx, flightID, dead)
	if err != nil {
		return 0, fmt.Errorf("adopt open batches of flight %s: %w", flightID, err)
	}
	open, waiting := splitWaiting(notIn(adopted, held))
	due.holdAdopted(waiting, u.now())
	if len(open) == 0 {
		return 0, nil
	}
	if settling != nil {
		settling(SettlingProgress{Open: len(open)})
		defer settling(SettlingProgress{Open: len(open), Done: true})
	}
	members, err := u.loadMembers(ctx, flightID, open)
	if err != nil {
		return 0, err
	}
	for _, b := range open {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		err := u.settleInSlot(ctx, g, flightID, b, members, rep, claims)
		if we := (*waitingError)(nil); errors.As(err, &we) {
			due.hold(we)
			continue
		}
		if errors.Is(err, errLeftOpen) {
			due.leave(b.OpID)
			continue
		}
		if err != nil {
			return 0, err
		}
	}
	return len(open), nil
}

// settleInSlot is settleAdopted in a slot of g, the first that frees;
// with g nil, in the caller's. An adopted batch starts its attempts in
// this call from none (no sendOpts.past): its journaled sends are not counted.
func (u *Client) settleInSlot(ctx context.Context, g gate, flightID string, b tilestore.Batch, members map[string]tilestore.Tile, rep *runReport, claims *claimState) error {
	if g != nil {
		release, err := g.AcquireFirst(ctx)
		if err != nil {
			return fmt.Errorf("wait for a slot to settle open batch %s: %w", b.OpID, err)
		}
		defer release()
	}
	return u.settleAdopted(ctx, flightID, b, members, sendOpts{}, rep, claims)
}

// settleAdopted settles one open batch this run adopted: resent under its
// key when its members still verify, else (or when it stays open) from
// the provider's record of it. A batch the provider asks to wait is left
// open with its journaled not-before, and its *waitingError returned; one
// whose outcome stays unknown is left open, and errUnsettled returned.
// opts: what its sends in this call before it waited apart leave its next
// exchange (past), and what to tell once its resend goes on the wire
// (wire).
func (u *Client) settleAdopted(ctx context.Context, flightID string, b tilestore.Batch, members map[string]tilestore.Tile, opts sendOpts, rep *runReport, claims *claimState) error {
	tiles, tb, ok := u.resendable(flightID, b, members)
	u.log.Info().Str("op_id", b.OpID).Int("tiles", len(b.TileIDs)).Bool("resend", ok).
		Msg("settling a batch an earlier run left open")
	var err error
	if ok {
		err = u.sendBatch(ctx, flightID, b.OpID, seqOf(b), tiles, tb, opts, rep, claims)
		switch {
		case errors.Is(err, errWaiting):
			return err
		case errors.Is(err, errSettledElsewhere):
			return nil // whoever settled or failed it counted it
		case errors.Is(err, errBatchFailed):
			// An earlier run's key that can no longer be used (expired
			// after a long outage, say) must not end this run: the
			// batch is failed; before its tiles go into new batches the
			// provider is asked which it holds (lookUpAmbiguous).
			u.log.Warn().Str("op_id", b.OpID).Err(err).Msg("an earlier run's batch could not be settled under its key")
			err = nil
		}
	}
	if !ok || (errors.Is(err, errLeftOpen) && !errors.Is(err, errUnsettled)) {
		// The provider's record of the operation may settle it.
		err = u.resolveByState(ctx, flightID, b, members, rep, claims)
	}
	// errUnsettled: its outcome is unknown; it stays open, its tiles in it
	// (no claim takes them). The caller leaves it out of this call's later
	// passes (dueBatches.leave), so the next call asks again.
	return err
}

// resendable returns the batch's tiles in journaled order, with their
// bytes read and verified once, when every member is still pending with
// the journaled sha256, its blob verifies, and they rebuild the journaled
// fingerprint.
func (u *Client) resendable(flightID string, b tilestore.Batch, members map[string]tilestore.Tile) ([]tilestore.Tile, *tileBytes, bool) {
	tiles := make([]tilestore.Tile, len(b.TileIDs))
	for i, id := range b.TileIDs {
		tl, ok := members[id]
		if !ok || tl.SHA256 != b.SHA256s[i] {
			return nil, nil, false
		}
		tiles[i] = tl
	}
	if fingerprint(flightID, b.TileIDs, b.SHA256s) != b.Fingerprint {
		return nil, nil, false
	}
	tb := newTileBytes(tiles)
	for _, tl := range tiles {
		if lf, err := tb.read(u.blobs, tl); lf != nil || err != nil {
			return nil, nil, false
		}
	}
	return tiles, tb, true
}

// loadMembers reads the open batches' tiles: directly when the store can,
// else by one pass over the flight's pending tiles keeping only members.
func (u *Client) loadMembers(ctx context.Context, flightID string, open []tilestore.Batch) (map[string]tilestore.Tile, error) {
	want := map[string]bool{}
	var ids []string
	for _, b := range open {
		for _, id := range b.TileIDs {
			if !want[id] {
				want[id] = true
				ids = append(ids, id)
			}
		}
	}
	out := make(map[string]tilestore.Tile, len(ids))
	if s, ok := u.store.(tilesByID); ok {
		tiles, err := s.TilesByID(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("read members of open batches: %w", err)
		}
		for _, t := range tiles {
			if t.VotingStatus.Uploadable() {
				out[t.ID] = t
			}
		}
		return out, nil
	}
	for t, err := range pendingTiles(ctx, u.store, flightID, pageSize) {
		if err != nil {
			return nil, fmt.Errorf("read members of open batches: %w", err)
		}
		if want[t.ID] {
			out[t.ID] = t
		}
	}
	return out, nil
}

// operationState is GET /v1/operations/{op_id}.
type operationState struct {
	OpID    string `json:"op_id"`
	State   string `json:"state"`
	Outcome *struct {
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	} `json:"outcome"`
}

// readOperation reads the provider's record of operation opID (GET
// /v1/operations/{op_id}); status is the answer's HTTP status. answered is
// false when the route answered 404: the contract answers an operation it
// has no record of 200 "absent", so a 404 (a gateway's, or a server that
// does not route the state) says nothing about the operation, and the run
// says once that the provider does not answer it.
func (u *Client) readOperation(ctx context.Context, rep *runReport, opID string) (st operationState, answered bool, status int, err error) {
	a := u.query(ctx, rep, http.MethodGet, "/v1/operations/"+url.PathEscape(opID), opID, func(body []byte) bool {
		return json.Unmarshal(body, &operationState{}) == nil
	})
	if a.status == http.StatusNotFound && a.err == nil {
		u.unrouted(&u.noOperations, "the provider does not answer operation state (GET /v1/operations/{op_id} answered 404; "+
			"the contract answers an operation it has no record of 200 \"absent\"): an open batch only its state could settle "+
			"stays open, its tiles in it, and the next run asks again", a.status)
		return st, false, a.status, nil
	}
	if err := a.failure(opID, "read operation state"); err != nil {
		return st, false, a.status, err
	}
	if err := json.Unmarshal(a.body, &st); err != nil {
		return st, false, a.status, &ProviderError{Status: a.status, OpID: opID, Message: "operation state is not JSON"}
	}
	return st, true, a.status, nil
}

// resolveByState settles an open batch from the provider's record of it:
// sealed applies the stored outcome; absent, expired or indeterminate fail
// the batch (the provider is then asked which of its tiles it holds, and
// only the others form a new batch: lookUpAmbiguous); live is asked again,
// within the run's deadline. A route that does not answer (404) leaves the
// batch open (errUnsettled).
//
// Each read goes through the sender, whose classifier decides its resends;
// what this loop reads is a complete answer about the operation, not about
// the request, so it is not the classifier's to resend. A live operation
// is the state the batch route answers 409 IDEMPOTENCY_PROCESSING for, and
// is asked again after that row's wait in the contract's table (operation.TableRule),
// at most as many times as a request is resent. A sealed outcome that is
// not a 2xx fails the batch whatever its status: under the same key the
// provider replays it byte for byte, so no resend can change it.
func (u *Client) resolveByState(ctx context.Context, flightID string, b tilestore.Batch, members map[string]tilestore.Tile, rep *runReport, claims *claimState) error {
	for asked := 1; ; asked++ {
		st, answered, status, err := u.readOperation(ctx, rep, b.OpID)
		switch {
		case err != nil:
			return err
		case !answered:
			return fmt.Errorf("batch %s: the provider does not answer its operation state: %w", b.OpID, errUnsettled)
		}
		switch st.State {
		case "sealed":
			if st.Outcome == nil {
				return &ProviderError{Status: status, OpID: b.OpID, Message: "sealed operation has no outcome"}
			}
			if st.Outcome.Status < 200 || st.Outcome.Status >= 300 {
				return u.failOpen(ctx, b, st.Outcome.Status, fmt.Sprintf("provider's stored outcome is %d", st.Outcome.Status))
			}
			// The journaled bytes, which a lookup compares (a member no
			// longer pending has no size here: a lookup then compares the
			// sha256 alone).
			tiles := make([]tilestore.Tile, len(b.TileIDs))
			for i, id := range b.TileIDs {
				tiles[i] = tilestore.Tile{ID: id, FlightID: flightID, SHA256: b.SHA256s[i], SizeBytes: members[id].SizeBytes}
			}
			// Its pending members' bytes, as a sent batch tells: the
			// progress counts what is still to deliver from them.
			_, bytes := idsAndBytes(tiles)
			p := BatchProgress{OpID: b.OpID, Tiles: len(b.TileIDs), Bytes: bytes, Replayed: true}
			return u.applyAnswer(ctx, flightID, b.OpID, tiles, st.Outcome.Status, st.Outcome.Body, nil, p, rep, claims)
		case "live":
			if asked > u.resends {
				return &ProviderError{Status: status, OpID: b.OpID, Message: fmt.Sprintf("operation still live after %d checks", asked)}
			}
			if dl, ok := ctx.Deadline(); ok && dl.Sub(u.now()) < stillLive {
				return &ProviderError{Status: status, OpID: b.OpID, Message: "operation still live at the run's deadline"}
			}
			if err := u.sleep(ctx, stillLive); err != nil {
				return err
			}
		default: // absent, expired, indeterminate, or a state this client does not know
			return u.failOpen(ctx, b, 0, fmt.Sprintf("provider reports the operation %q", st.State))
		}
	}
}

// stillLive is the wait before asking again about a live operation: the
// contract's for a key still in progress (409 IDEMPOTENCY_PROCESSING).
var stillLive = operation.TableRule(http.StatusConflict, operation.CodeIdempotencyProcessing).Delay

func (u *Client) failOpen(ctx context.Context, b tilestore.Batch, status int, detail string) error {
	u.log.Info().Str("op_id", b.OpID).Str("detail", detail).Msg("failing open batch; its tiles go into a new batch")
	if err := u.store.FailBatch(ctx, b.OpID, status, cleanText(u.redact(detail), 2000)); err != nil {
		return fmt.Errorf("fail batch %s: %w", b.OpID, err)
	}
	return nil
}
