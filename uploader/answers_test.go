package uploader_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

func openBatches(t *testing.T, c *providertest.Client, flight string) []tilestore.Batch {
	t.Helper()
	b, err := c.Store.OpenBatches(context.Background(), flight)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFinalErrorsEndTheRunWithNothingMarked(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		status    int
		code      string
		leaveOpen bool // the batch stays journaled for a rerun with the same key
	}{
		{"401 unauthenticated", http.StatusUnauthorized, operation.CodeUnauthenticated, true},
		{"403 forbidden", http.StatusForbidden, operation.CodeForbidden, true},
		{"413 batch too large", http.StatusRequestEntityTooLarge, operation.CodeBatchTooLarge, false},
		{"422 key expired", http.StatusUnprocessableEntity, operation.CodeIdempotencyExpired, false},
		{"422 key conflict", http.StatusUnprocessableEntity, operation.CodeIdempotencyConflict, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
				operation.WriteError(w, tc.status, tc.code, "scripted", nil, nil)
			})
			c := providertest.NewClient(t, "fe")
			c.AddTiles(t, "fe", 10, 1024, 3)
			u, sl := newUploader(t, hs.URL, c, nil)
			rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fe", Concurrency: 1})
			var pe *uploader.ProviderError
			if !errors.As(err, &pe) || pe.Status != tc.status || pe.Code != tc.code {
				t.Fatalf("err = %v, want *ProviderError %d %s", err, tc.status, tc.code)
			}
			if strings.Contains(err.Error(), providertest.Token) {
				t.Fatalf("error message leaks the token: %v", err)
			}
			if rep.Outcome != uploader.OutcomeFailure || rep.Uploaded() != 0 || rep.Pending != 10 {
				t.Fatalf("report = %+v, want failure, nothing uploaded, 10 pending", rep)
			}
			if got := len(f.received()); got != 1 {
				t.Fatalf("provider got %d requests, want 1 (final answers are not resent, and the run stops)", got)
			}
			if len(sl.all()) != 0 {
				t.Fatalf("slept %v before a final answer", sl.all())
			}
			if open := openBatches(t, c, "fe"); (len(open) == 1) != tc.leaveOpen {
				t.Fatalf("open batches = %d, want open=%v", len(open), tc.leaveOpen)
			}
		})
	}
}

func TestWrongTokenIsRefusedAtCapabilities(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "ft")
	c.AddTiles(t, "ft", 3, 1024, 4)
	u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) { o.Token = "wrong-token-value" })
	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "ft"})
	var pe *uploader.ProviderError
	if !errors.As(err, &pe) || pe.Status != 401 {
		t.Fatalf("err = %v, want a 401 *ProviderError", err)
	}
	if strings.Contains(err.Error(), "wrong-token-value") {
		t.Fatalf("error leaks the token: %v", err)
	}
}

func TestDuplicateAnswersMarkTilesUploadedWithoutResending(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "duplicate") })
	c := providertest.NewClient(t, "fd")
	c.AddTiles(t, "fd", 13, 1024, 5)
	u, _ := newUploader(t, hs.URL, c, nil)
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fd"})
	if err != nil || rep.Duplicate != 13 || rep.Batches != 4 {
		t.Fatalf("report %+v, err %v; want 13 duplicate in 4 batches", rep, err)
	}
	if len(f.received()) != 4 {
		t.Fatalf("provider got %d requests, want 4", len(f.received()))
	}
	for id, n := range f.tileSeen {
		if n != 1 {
			t.Errorf("tile %s sent in %d batches", id, n)
		}
	}
	if got := c.Counts(t, "fd")[tilestore.StatusUploaded]; got != 13 {
		t.Fatalf("uploaded = %d, want 13", got)
	}
}

// A tile the answer does not clearly answer is asked about; this provider
// holds none (its lookups answer TILE_NOT_FOUND), so each is a
// protocol_error rejection.
func TestUnclearResultsAreProtocolErrors(t *testing.T) {
	t.Parallel()
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		// tile 0 missing, tile 1 twice, tile 2 accepted, tile 3 rejected,
		// and a tile that was never sent.
		fmt.Fprintf(w, `{"op_id":%q,"results":[
			{"tile_id":%q,"status":"accepted"},{"tile_id":%q,"status":"duplicate"},
			{"tile_id":%q,"status":"accepted"},
			{"tile_id":%q,"status":"rejected","reason":"decode_error","message":"bad"},
			{"tile_id":"not-sent","status":"accepted"}]}`,
			b.Key, b.TileIDs[1], b.TileIDs[1], b.TileIDs[2], b.TileIDs[3])
	})
	c := providertest.NewClient(t, "fp")
	tiles := c.AddTiles(t, "fp", 4, 1024, 6)
	u, _ := newUploader(t, hs.URL, c, nil)
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fp"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Accepted != 1 || rep.Rejected != 3 || rep.Outcome != uploader.OutcomePartial {
		t.Fatalf("report %+v; want 1 accepted, 3 rejected, partial", rep)
	}
	reasons := map[string]string{}
	for _, r := range rep.Rejections {
		reasons[r.TileID] = r.Reason
	}
	want := map[string]string{tiles[0].ID: "protocol_error", tiles[1].ID: "protocol_error", tiles[3].ID: "decode_error"}
	for id, reason := range want {
		if reasons[id] != reason {
			t.Errorf("tile %s: reason %q, want %q", id, reasons[id], reason)
		}
	}
	if got := c.Counts(t, "fp")[tilestore.StatusUploaded]; got != 1 {
		t.Fatalf("uploaded = %d, want only the clearly accepted tile", got)
	}
}

func TestRetryableAnswersAreResentWithTheAdvisedDelay(t *testing.T) {
	t.Parallel()
	// A throttle's advised wait is journaled and waited apart (the batch
	// gives its slot to another meanwhile), on the real clock: the
	// journal's not-before is the database's time. wantSleep is the first
	// wait asked for.
	cases := []struct {
		name      string
		first     func(w http.ResponseWriter)
		wantSleep time.Duration
		apart     bool
	}{
		{"html 502", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			fmt.Fprint(w, "<html><body>Bad Gateway</body></html>")
		}, 2 * time.Second, false},
		{"429 Retry-After", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1")
			operation.WriteError(w, 429, operation.CodeRateLimited, "slow down", nil, nil)
		}, time.Second, true},
		{"429 retry extension", func(w http.ResponseWriter) {
			operation.WriteError(w, 429, operation.CodeRateLimited, "slow down",
				&operation.RetryExtension{Allowed: true, After: 1500 * time.Millisecond, Strategy: operation.StrategyFixed}, nil)
		}, 2 * time.Second, true}, // WriteError's Retry-After (2 s, rounded up) is a floor
		{"409 processing", func(w http.ResponseWriter) {
			operation.WriteError(w, 409, operation.CodeIdempotencyProcessing, "busy", nil, nil)
		}, time.Second, false},
		{"cut body", func(w http.ResponseWriter) {
			conn, buf, _ := http.NewResponseController(w).Hijack()
			defer conn.Close()
			fmt.Fprint(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"op_id\":\"x")
			buf.Flush()
		}, 0, false}, // a lost answer's first resend goes at once
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
				if b.Attempt == 1 {
					tc.first(w)
					return
				}
				w.Header().Set("Idempotent-Replayed", "true")
				answerAll(w, b, "accepted")
			})
			c := providertest.NewClient(t, "fr")
			c.AddTiles(t, "fr", 2, 1024, 7)
			var edit func(*uploader.ClientOptions)
			real := &sleeps{}
			if tc.apart {
				edit = func(o *uploader.ClientOptions) {
					o.Sleep = func(ctx context.Context, d time.Duration) error {
						_ = real.Sleep(ctx, d)
						return operation.Sleep(ctx, d)
					}
				}
			}
			u, sl := newUploader(t, hs.URL, c, edit)
			if tc.apart {
				sl = real
			}
			rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fr"})
			// At least one resend: a resend written to a kept-alive
			// connection the server had just closed is on the wire too, and
			// counted (net/http does not replay a batch silently).
			if err != nil || rep.Accepted != 2 || rep.Resends < 1 || rep.Replayed != 1 {
				t.Fatalf("report %+v, err %v; want 2 accepted after 1 resend, replayed", rep, err)
			}
			got := f.received()
			if len(got) != 2 || got[0].Key != got[1].Key {
				t.Fatalf("requests %d; want 2 with the same key", len(got))
			}
			s := sl.all()
			if tc.apart && len(s) > 0 {
				// Waiting apart, the batch may wait again for what is left
				// of its not-before by the database's clock.
				for _, d := range s[1:] {
					if d > tc.wantSleep/10 {
						t.Fatalf("slept %v, want %v and then only what was left of it", s, tc.wantSleep)
					}
				}
				s = s[:1]
			}
			if len(s) != 1 || s[0] != tc.wantSleep {
				t.Fatalf("slept %v, want [%v]", s, tc.wantSleep)
			}
		})
	}
}

func TestHugeRetryAfterLeavesTheBatchWaitingInsteadOfStalling(t *testing.T) {
	t.Parallel()
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		w.Header().Set("Retry-After", "1743440400") // 484289 hours
		operation.WriteError(w, 503, operation.CodeUnavailable, "come back much later", nil, nil)
	})
	c := providertest.NewClient(t, "fh")
	c.AddTiles(t, "fh", 2, 1024, 8)
	u, sl := newUploader(t, hs.URL, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fh"})
	if err != nil || rep.Pending != 2 || rep.NextRetryAt == nil {
		t.Fatalf("report %+v, err %v; want no error, 2 pending, next_retry_at set", rep, err)
	}
	if len(sl.all()) != 0 || time.Since(start) > 10*time.Second {
		t.Fatalf("slept %v / took %v; want the run to end at once", sl.all(), time.Since(start))
	}
	open := openBatches(t, c, "fh")
	if len(open) != 1 || open[0].NotBefore == nil {
		t.Fatalf("open batches %+v; want the batch open with its not-before", open)
	}
	// The hint is kept for MaxAdvisedWait, not for 55 years.
	if d := open[0].NotBefore.Sub(start); d < uploader.MaxAdvisedWait || d > uploader.MaxAdvisedWait+10*time.Second {
		t.Fatalf("not-before %s after the run started, want %s", d, uploader.MaxAdvisedWait)
	}
}
