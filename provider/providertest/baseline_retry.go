package providertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
)

// BaselineUploadRetrying is the least a client that follows
// docs/provider-api.md does against a provider that fails some requests:
// BaselineUpload's batches, bytes and workers, plus what the contract asks
// of every client, and nothing else (no journal, no settlement):
//
//   - one Idempotency-Key per batch, sent again with each resend of it;
//   - a batch that got no 200 is resent after the wait the contract asks
//     for, counted from its answer (baselineWait): the answer's advice, or
//     else the contract's table for its status; a broken connection or a
//     cut-off answer asks for none, so its first resend goes at once;
//   - a waiting batch holds no worker: the workers go on with the other
//     batches, and once its wait is over it goes next, before the batches
//     not sent yet;
//   - a tile a 200 does not name is looked up, never taken as stored.
//
// A batch that gets no answer again (a second lost answer in a row, or a
// connection refused: the request never reached the provider) backs off
// from 500 ms, and after baselineNoAnswerLimit sends in a row without an
// answer the upload ends with the error.
//
// It returns nil once every batch was answered and every tile is held, or
// the first error no resend can change (and then waits for no pending
// resend).
func BaselineUploadRetrying(ctx context.Context, client *http.Client, baseURL, token, flightID string,
	blobs *tilestore.BlobStore, batches [][]tilestore.Tile, concurrency int) error {
	if len(batches) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// fresh holds the batches not sent yet; due those whose wait is over,
	// which the workers take first. Each holds every batch at most once,
	// so neither blocks a send to it.
	fresh := make(chan *baselineJob, len(batches))
	due := make(chan *baselineJob, len(batches))
	for _, b := range batches {
		fresh <- &baselineJob{tiles: b, key: operation.NewID()}
	}
	close(fresh)
	done := make(chan struct{}) // every batch was answered
	var mu sync.Mutex
	var firstErr error
	left := len(batches)
	var timers []*time.Timer
	finish := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil && firstErr == nil {
			firstErr = err
			cancel()
		}
		if left--; left == 0 {
			close(done)
		}
	}
	next := func(fresh *chan *baselineJob) *baselineJob {
		for {
			select {
			case j := <-due:
				return j
			default:
			}
			select {
			case j := <-due:
				return j
			case j, ok := <-*fresh:
				if ok {
					return j
				}
				*fresh = nil // all sent: wait for the due ones
			case <-done:
				return nil
			case <-ctx.Done():
				return nil
			}
		}
	}
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			fresh := fresh
			for j := next(&fresh); j != nil; j = next(&fresh) {
				for {
					if err := ctx.Err(); err != nil {
						finish(err)
						break
					}
					j.sends++
					wait, again, err := baselineSend(ctx, client, baseURL, token, flightID, blobs, j)
					if !again {
						finish(err)
						break
					}
					if wait > 0 {
						mu.Lock()
						timers = append(timers, time.AfterFunc(wait, func() { due <- j }))
						mu.Unlock()
						break
					}
					// No wait: the resend goes at once, from this worker.
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	for _, t := range timers {
		t.Stop()
	}
	mu.Unlock()
	return firstErr
}

// baselineJob is one batch of BaselineUploadRetrying and its sends.
type baselineJob struct {
	tiles []tilestore.Tile
	key   string
	sends int
	// noAnswer counts its sends in a row that got no answer.
	noAnswer int
}

// baselineNoAnswerLimit is how many sends of a batch in a row may get no
// answer before the baseline gives up.
const baselineNoAnswerLimit = 4

// baselineSend posts j's batch under its key (its j.sends-th send) and
// says whether to send it again, and after what wait; err is set when not.
func baselineSend(ctx context.Context, client *http.Client, baseURL, token, flightID string,
	blobs *tilestore.BlobStore, j *baselineJob) (wait time.Duration, again bool, err error) {
	req, err := baselineBatchRequest(ctx, baseURL, token, flightID, j.key, blobs, j.tiles)
	if err != nil {
		return 0, false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return baselineNoAnswer(ctx, j, err)
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if rerr != nil {
		return baselineNoAnswer(ctx, j, rerr) // cut off: as a broken connection
	}
	j.noAnswer = 0
	if resp.StatusCode == http.StatusOK {
		return 0, false, baselineCheckHeld(ctx, client, baseURL, token, flightID, j.tiles, body)
	}
	wait, again = baselineWait(resp.StatusCode, resp.Header, body, j.sends, time.Now())
	if !again {
		return 0, false, fmt.Errorf("baseline batch %s: %d %s", j.key, resp.StatusCode, bytes.TrimSpace(body))
	}
	return wait, true, nil
}

// baselineNoAnswer decides the resend of a batch whose send got no answer
// (err): the outcome is unknown, and the same key and body is the safe
// resend. The contract sets no wait before it, so the first goes at once;
// a connection refused (the request never reached the provider) or
// another send without an answer backs off from 500 ms, and after
// baselineNoAnswerLimit in a row the batch is given up.
func baselineNoAnswer(ctx context.Context, j *baselineJob, err error) (time.Duration, bool, error) {
	if ctx.Err() != nil {
		return 0, false, err
	}
	j.noAnswer++
	if j.noAnswer >= baselineNoAnswerLimit {
		return 0, false, fmt.Errorf("baseline batch %s: no answer %d times in a row: %w", j.key, j.noAnswer, err)
	}
	var op *net.OpError
	if j.noAnswer == 1 && !(errors.As(err, &op) && op.Op == "dial") {
		return 0, true, nil
	}
	return 500 * time.Millisecond << (j.noAnswer - 1), true, nil
}

// baselineWait is the wait the contract asks for before the next send of
// a batch whose sends-th send was answered status ("Errors and retry
// advice"): the retry extension (allowed, strategy, after, max_attempts)
// or Retry-After on a 429 or 503 when the answer advises, else the table
// (operation.TableRule).
// again is false when the contract forbids a resend.
func baselineWait(status int, h http.Header, body []byte, sends int, now time.Time) (wait time.Duration, again bool) {
	var code string
	ext, hasExt := operation.RetryExtension{}, false
	if eb, err := operation.ParseErrorBody(body); err == nil {
		code = eb.Code()
		ext, hasExt = eb.Retry()
	}
	r := operation.TableRule(status, code)
	strategy, base, maxAttempts := r.Strategy, r.Delay, r.MaxAttempts
	switch {
	case r.Retry:
	case !hasExt:
		return 0, false
	default:
		strategy = operation.StrategyFixed // allowed by the answer on a status the table never resends
	}
	if hasExt {
		if !ext.Allowed {
			return 0, false
		}
		if ext.Strategy != "" {
			strategy = ext.Strategy
		}
		if ext.After > 0 {
			base = ext.After
		}
		if ext.MaxAttempts > 0 {
			maxAttempts = ext.MaxAttempts
		}
	}
	if base == 0 && strategy == operation.StrategyExponential {
		base = time.Second // exponential without a start: tilectl's (advise) too
	}
	if maxAttempts > 0 && sends >= maxAttempts {
		return 0, false
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if ra, ok := operation.ParseRetryAfter(h.Get("Retry-After"), now); ok && (!hasExt || ext.After == 0) {
			strategy, base = operation.StrategyFixed, ra
		}
	}
	switch strategy {
	case operation.StrategyImmediate:
		return 0, true
	case operation.StrategyExponential:
		return base << min(sends-1, 20), true
	}
	return base, true
}

// baselineCheckHeld reads a 200's results: a tile it does not name exactly
// once as accepted or duplicate is looked up, and must be held.
func baselineCheckHeld(ctx context.Context, client *http.Client, baseURL, token, flightID string, tiles []tilestore.Tile, body []byte) error {
	var ans struct {
		Results []struct {
			TileID string `json:"tile_id"`
			Status string `json:"status"`
		} `json:"results"`
	}
	_ = json.Unmarshal(body, &ans) // an unreadable answer names no tile
	named := make(map[string]int, len(ans.Results))
	for _, r := range ans.Results {
		if r.Status == "accepted" || r.Status == "duplicate" {
			named[r.TileID]++
		} else {
			named[r.TileID] += 2 // rejected, or an unknown status: not stored
		}
	}
	for _, t := range tiles {
		if named[t.ID] == 1 {
			continue
		}
		if err := baselineLookUp(ctx, client, baseURL, token, flightID, t); err != nil {
			return err
		}
	}
	return nil
}

// errNotHeld: a tile the provider does not hold after its batch's 200.
var errNotHeld = errors.New("not held by the provider")

func baselineLookUp(ctx context.Context, client *http.Client, baseURL, token, flightID string, t tilestore.Tile) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		baseURL+"/v1/flights/"+url.PathEscape(flightID)+"/tiles/"+url.PathEscape(t.ID), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("baseline lookup of tile %s: %w", t.ID, err)
	}
	defer resp.Body.Close()
	var got struct {
		SHA256 string `json:"sha256"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&got) != nil || got.SHA256 != t.SHA256 {
		return fmt.Errorf("baseline: tile %s (lookup answered %d): %w", t.ID, resp.StatusCode, errNotHeld)
	}
	return nil
}
