package uploader

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// tileRecord is GET /v1/flights/{flight_id}/tiles/{tile_id}.
type tileRecord struct {
	TileID string `json:"tile_id"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// lookup verdicts.
type held int

const (
	heldSame    held = iota // the provider holds these exact bytes
	heldNot                 // it does not (404), or holds other bytes: send
	heldUnknown             // no clear answer: do not send under a new key now
)

// lookUpAmbiguous asks the provider about the pending tiles an earlier
// batch may have stored without settling them (tilestore.AmbiguousPending),
// workers at a time, before they could travel under a new key: a tile must
// not be stored twice because its first key's answer was lost. Those it
// holds with the same sha256 are marked uploaded; those it does not hold go
// into new batches (recorded in claims: a claim sends no tile awaiting a lookup
// but these, so another run's failed batch is never resent unasked); those
// it gave no clear answer about are returned, to be kept out of this run
// and asked about again by the next, with how many it held. 401 and 403
// end the run.
func (u *Client) lookUpAmbiguous(ctx context.Context, flightID string, workers int, rep *runReport, claims *claimState) (unclear []string, held int, err error) {
	tiles, asOf, err := u.store.AmbiguousPending(ctx, flightID)
	if err != nil || len(tiles) == 0 {
		return nil, 0, err
	}
	same, notHeld, unknown, err := u.lookUpTiles(ctx, rep, flightID, tiles, workers)
	if err != nil {
		return nil, 0, err
	}
	claims.setLookedUp(notHeld, asOf)
	if len(same) > 0 {
		jctx, cancel := detachedCtx(ctx)
		defer cancel()
		if _, err := u.store.MarkUploaded(jctx, same); err != nil {
			return nil, 0, err
		}
		rep.held(len(same))
	}
	u.log.Info().Str("flight_id", flightID).Int("asked", len(tiles)).Int("held", len(same)).
		Int("unclear", len(unknown)).Msg("asked the provider about tiles an earlier batch left unsettled")
	if len(unknown) > 0 {
		u.log.Warn().Str("flight_id", flightID).Int("tiles", len(unknown)).
			Msg("the provider gave no clear answer about tiles an earlier batch may have stored; they are not sent under a new key in this run")
	}
	return unknown, len(same), nil
}

// lookUpTiles asks the provider about tiles, workers at a time, and sorts
// them by its answers: held with the same bytes, not held, no clear answer.
// The first run-ending error (401, 403, the run cancelled) stops it.
func (u *Client) lookUpTiles(ctx context.Context, rep *runReport, flightID string, tiles []tilestore.Tile, workers int) (same, notHeld, unknown []string, err error) {
	var (
		mu     sync.Mutex
		runErr error
	)
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	ch := make(chan tilestore.Tile)
	var wg sync.WaitGroup
	for range max(min(workers, len(tiles)), 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tl := range ch {
				v, err := u.lookUp(lctx, rep, flightID, tl)
				mu.Lock()
				switch {
				case err != nil:
					if runErr == nil {
						runErr = err
					}
					stop()
				case v == heldSame:
					same = append(same, tl.ID)
				case v == heldUnknown:
					unknown = append(unknown, tl.ID)
				case v == heldNot:
					notHeld = append(notHeld, tl.ID)
				}
				mu.Unlock()
			}
		}()
	}
	for _, tl := range tiles {
		select {
		case ch <- tl:
		case <-lctx.Done():
		}
	}
	close(ch)
	wg.Wait()
	if runErr != nil {
		return nil, nil, nil, runErr
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	return same, notHeld, unknown, nil
}

// lookUp asks the provider whether it holds tl's bytes (LookUpTile): held
// with the same bytes, not held (absent or other bytes: the batch's answer
// will say what the provider makes of ours), or no clear answer.
func (u *Client) lookUp(ctx context.Context, rep *runReport, flightID string, tl tilestore.Tile) (held, error) {
	l, err := u.lookUpTile(ctx, rep, flightID, tl)
	switch {
	case err != nil:
		return heldUnknown, err
	case l.Verdict == Holds:
		return heldSame, nil
	case l.Verdict == Lacks || l.Verdict == HoldsOther:
		return heldNot, nil
	}
	return heldUnknown, nil
}

// Verdict is what the provider's answer to a tile lookup says about a tile.
type Verdict string

// Verdicts of LookUpTile.
const (
	Holds      Verdict = "holds"       // a 200 naming the tile with the same sha256 (and size, when both are known)
	Lacks      Verdict = "lacks"       // the contract's 404 TILE_NOT_FOUND
	HoldsOther Verdict = "holds_other" // a 200 naming the tile with another sha256 or size
	Unclear    Verdict = "unclear"     // anything else: no answer, a 5xx after resends, a 404 that is not the contract's
)

// Lookup is the provider's answer about one tile.
type Lookup struct {
	Verdict Verdict
	// SHA256 and Size are what the provider holds (Holds, HoldsOther).
	SHA256 string
	Size   int64
	// Status is the last HTTP status (0: no answer came).
	Status int
	// Strained: the answer took resends (429, 503, a timeout, a broken
	// connection), none came, or the last says the provider is overloaded
	// or timed out (the classifier's signal): a caller pacing many lookups
	// eases off.
	Strained bool
	// Final (with Unclear): the classifier does not resend the lookup's
	// last attempt (a 4xx the contract does not retry, a 404 that is not
	// TILE_NOT_FOUND, a resend the provider forbids or whose attempts are
	// spent, a certificate the uploader does not trust): asking again gets
	// the same end. An Unclear that is not Final (no answer, a resend the
	// sender's bounds stopped) may be asked again later.
	Final bool
}

// LookUpTile asks the provider (GET /v1/flights/{flight_id}/tiles/{tile_id})
// whether it holds tl, through the sender as every request goes (the one
// classifier, the run's breaker, retry budget and pacer). Only a 200
// naming the tile with its sha256 is Holds; the contract's 404
// TILE_NOT_FOUND is Lacks; a 404 without that code is Unclear (a
// gateway's, or a server that does not route lookups: said once per
// uploader). 401, 403 and a cancelled ctx are the error.
func (u *Client) LookUpTile(ctx context.Context, flightID string, tl tilestore.Tile) (Lookup, error) {
	return u.lookUpTile(ctx, nil, flightID, tl)
}

// lookUpTile is LookUpTile, its exchange counted in rep (nil: in no
// report).
func (u *Client) lookUpTile(ctx context.Context, rep *runReport, flightID string, tl tilestore.Tile) (Lookup, error) {
	path := "/v1/flights/" + url.PathEscape(flightID) + "/tiles/" + url.PathEscape(tl.ID)
	a := u.query(ctx, rep, http.MethodGet, path, "", func(b []byte) bool { return json.Unmarshal(b, &tileRecord{}) == nil })
	l := Lookup{Verdict: Unclear, Status: a.status, Final: a.verdict.kind == permanent,
		Strained: a.attempts > 1 || a.timeouts > 0 || a.status == 0 || a.budgetSpent || a.verdict.strained()}
	switch {
	case a.cancelled:
		return l, a.failure("", "look up tile "+tl.ID)
	case a.err == nil && a.status == http.StatusNotFound:
		if eb, err := operation.ParseErrorBody(a.body); err == nil && eb.Code() == operation.CodeTileNotFound {
			l.Verdict = Lacks
			return l, nil
		}
		u.unrouted(&u.noLookups, "the provider does not answer tile lookups (GET /v1/flights/{flight_id}/tiles/{tile_id} "+
			"answered 404 without TILE_NOT_FOUND, as a gateway or a server without the route does): a tile whose earlier "+
			"key's outcome is unknown is not sent under a new key; it stays pending until the provider answers", a.status)
		return l, nil
	case a.err == nil && (a.status == http.StatusUnauthorized || a.status == http.StatusForbidden):
		return l, a.failure("", "look up tile "+tl.ID)
	case a.err != nil || a.status != http.StatusOK || a.bodyErr != nil:
		u.log.Warn().Str("tile_id", tl.ID).Int("status", a.status).Err(errors.Join(a.err, a.bodyErr)).Msg("tile lookup gave no clear answer")
		return l, nil
	}
	var rec tileRecord
	if err := json.Unmarshal(a.body, &rec); err != nil || rec.TileID != tl.ID || rec.SHA256 == "" {
		u.log.Warn().Str("tile_id", tl.ID).Msg("tile lookup answer does not name the tile and its sha256")
		return l, nil
	}
	l.SHA256, l.Size = rec.SHA256, rec.Size
	if !strings.EqualFold(rec.SHA256, tl.SHA256) || (rec.Size > 0 && tl.SizeBytes > 0 && rec.Size != tl.SizeBytes) {
		l.Verdict = HoldsOther
		return l, nil
	}
	l.Verdict = Holds
	return l, nil
}

// unrouted logs msg once per uploader (one run) when flag is first set: a
// route of the contract answered with a status the contract does not give
// it, so what depends on that route waits.
func (u *Client) unrouted(flag *atomic.Bool, msg string, status int) {
	if flag.CompareAndSwap(false, true) {
		u.log.Warn().Int("status", status).Msg(msg)
	}
}
