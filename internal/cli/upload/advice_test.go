package upload

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/iostreams"
	"github.com/tilectl/tilectl/internal/metricsfile"
	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// adviser stands in front of the rig's provider on loopback: the first
// batch key it sees is answered 503 with Retry-After: 60 ("wait 1
// minute") every time, the second key once with Retry-After: 1.
type adviser struct {
	next http.Handler

	mu    sync.Mutex
	keys  []string
	posts map[string]int
}

func (a *adviser) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "tiles:batch") {
		a.next.ServeHTTP(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	a.mu.Lock()
	if a.posts[key] == 0 {
		a.keys = append(a.keys, key)
	}
	a.posts[key]++
	first, second, n := len(a.keys) > 0 && a.keys[0] == key, len(a.keys) > 1 && a.keys[1] == key, a.posts[key]
	a.mu.Unlock()
	switch {
	case first:
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "60")
		operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "wait 1 minute", nil, nil)
	case second && n == 1:
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "1")
		operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "wait 1 second", nil, nil)
	default:
		a.next.ServeHTTP(w, r)
	}
}

func (a *adviser) postsOf(i int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i >= len(a.keys) {
		return 0
	}
	return a.posts[a.keys[i]]
}

// advisedRig is a rig whose provider advises as adviser does, with a 45 s
// deadline, batches of 2 and one batch in flight at a time.
func advisedRig(t *testing.T) (*cmdRig, *adviser) {
	t.Helper()
	r := newCmdRig(t)
	a := &adviser{next: r.srv.Config.Handler, posts: map[string]int{}}
	hs := httptest.NewServer(a)
	t.Cleanup(hs.Close)
	r.cfg.ProviderURL = hs.URL
	r.cfg.Upload.Deadline = 45 * time.Second
	r.cfg.Upload.BatchSize = 2
	r.cfg.Upload.Concurrency = 1
	return r, a
}

// openNotBefore is the journaled not-before of the flight's one open batch.
func openNotBefore(t *testing.T, r *cmdRig, flight string) time.Time {
	t.Helper()
	var nb *time.Time
	err := r.store.Pool().QueryRow(context.Background(),
		`SELECT not_before FROM upload_batches WHERE flight_id = $1 AND state = 'open'`, flight).Scan(&nb)
	if err != nil || nb == nil {
		t.Fatalf("the advised batch's not_before: %v, %v; want one open batch with it", nb, err)
	}
	return *nb
}

func nextRetryAt(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("next_retry_at = %v, want a time", v)
	}
	return at
}

func TestOneBatchsAdvicePastTheDeadlineDoesNotFailTheRun(t *testing.T) {
	r, a := advisedRig(t)
	ids := r.seed("F1", tilestore.FlightOnGround, 6)
	metrics := filepath.Join(r.dir, "tilectl.prom")
	res := r.run(func(o *Options) { jsonOut(o); o.FlightID = "F1" }, "--metrics-file", metrics)
	if res.code != exitcode.Partial {
		t.Fatalf("exit %d (%v), want 3: one batch waits, the run did not fail\n%s", res.code, res.err, res.stderr)
	}
	m := decodeSummary(t, res.stdout)
	if m["outcome"] != "partial" || m["uploaded"] != 4.0 || m["still_pending"] != 2.0 || m["error"] != nil {
		t.Fatalf("summary %v; want partial, the other 4 tiles uploaded, the advised 2 pending, no error", m)
	}
	nb := openNotBefore(t, r, "F1")
	if got := nextRetryAt(t, m["next_retry_at"]); !got.Equal(nb) {
		t.Fatalf("next_retry_at %v, want the advised batch's not_before %v", got, nb)
	}
	fl := m["flights"].([]any)[0].(map[string]any)
	if got := nextRetryAt(t, fl["next_retry_at"]); !got.Equal(nb) {
		t.Fatalf("flights[0].next_retry_at %v, want %v", got, nb)
	}
	if a.postsOf(0) != 1 {
		t.Fatalf("the advised batch went %d times, want once", a.postsOf(0))
	}
	// The other batch's 1 s wait was kept, not cut short by the first's.
	r.clock.mu.Lock()
	sleeps := append([]time.Duration(nil), r.clock.sleeps...)
	r.clock.mu.Unlock()
	kept := false
	for _, d := range sleeps {
		kept = kept || d == time.Second
	}
	if !kept || a.postsOf(1) != 2 {
		t.Fatalf("sleeps %v, second batch sent %d times; want its advised 1 s kept and one resend", sleeps, a.postsOf(1))
	}
	for _, id := range ids[2:] {
		if s := r.status(id); s != "uploaded" {
			t.Errorf("tile %s is %s, want uploaded", id, s)
		}
	}
	if !strings.Contains(res.stderr, "until") || !strings.Contains(res.stderr, "advised") {
		t.Errorf("no log line announces the wait and until when:\n%s", res.stderr)
	}
	prom, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	if want := `tilectl_upload_next_retry_timestamp_seconds{flight="F1"}`; !strings.Contains(string(prom), want) {
		t.Errorf("metrics file has no %s:\n%s", want, prom)
	}
}

func TestRunWhoseRemainingWorkMustWaitPastItsDeadlineEndsWithExit3(t *testing.T) {
	r, a := advisedRig(t)
	r.seed("F1", tilestore.FlightOnGround, 2) // one batch: the advised one
	first := r.run(func(o *Options) { jsonOut(o); o.FlightID = "F1" })
	if first.code != exitcode.Partial {
		t.Fatalf("first run: exit %d (%v), want 3\n%s", first.code, first.err, first.stderr)
	}
	nb := openNotBefore(t, r, "F1")

	// The next run, at once: everything left waits past its deadline.
	res := r.run(func(o *Options) { jsonOut(o); o.FlightID = "F1" })
	if res.code != exitcode.Partial {
		t.Fatalf("exit %d (%v), want 3\n%s", res.code, res.err, res.stderr)
	}
	m := decodeSummary(t, res.stdout)
	if m["outcome"] != "partial" || m["still_pending"] != 2.0 || m["error"] != nil {
		t.Fatalf("summary %v; want partial, 2 pending, no error", m)
	}
	if got := nextRetryAt(t, m["next_retry_at"]); !got.Equal(nb) {
		t.Fatalf("next_retry_at %v, want the earliest not_before %v", got, nb)
	}
	if a.postsOf(0) != 1 {
		t.Fatalf("the advised batch went %d times; no run sends it before its not_before", a.postsOf(0))
	}
	if !strings.Contains(res.stderr, "until") || !strings.Contains(res.stderr, "advised") {
		t.Errorf("no log line announces the wait and until when:\n%s", res.stderr)
	}
	text := r.run(func(o *Options) { o.FlightID = "F1" })
	t.Logf("text summary:\n%s", text.stdout)
	if text.code != exitcode.Partial || !strings.Contains(text.stdout, nb.Format(time.RFC3339)) {
		t.Fatalf("text run: exit %d; want 3 and the summary naming %s:\n%s", text.code, nb.Format(time.RFC3339), text.stdout)
	}
}

func TestStatusLineSaysWhatWaitsForTheProvidersAdviceAndUntilWhen(t *testing.T) {
	var errOut bytes.Buffer
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.Local)
	p := newProgress("F1", 10, 1000, iostreams.NewStatusLine(&errOut, func() int { return 200 }), false, zerolog.Nop(),
		func(time.Duration) (<-chan time.Time, func()) { return make(chan time.Time), func() {} },
		5*time.Second, metricsfile.New(), func() time.Time { return now })
	defer p.finish()
	p.wait(uploader.Wait{Reason: uploader.WaitProviderAdvice, OpID: "op-1", Tiles: 2, Until: now.Add(4 * time.Second)})
	if got := p.line(); !strings.Contains(got, "waiting 4s for 2 tiles until 10:00:04 as the provider advised") {
		t.Errorf("status %q, want what waits, a countdown and until when", got)
	}
	p.wait(uploader.Wait{Reason: uploader.WaitProviderAdvice, OpID: "op-2", Tiles: 2, Until: now.Add(time.Minute), PastDeadline: true})
	if got := p.line(); !strings.Contains(got, "2 tiles wait until 10:01:00 as the provider advised (after this run's deadline)") {
		t.Errorf("status %q, want the wait left for a later run and until when", got)
	}
}

// slotHolder stands in front of the rig's provider: each batch's first
// send is answered 503 with Retry-After: 1; the first resend goes on to
// the provider once a transaction holds its batch's journal row, which it
// keeps for hold, so the batch's settlement, and with it its slot of the
// limit on batches in flight, waits that long.
type slotHolder struct {
	t    *testing.T
	next http.Handler
	pool *pgxpool.Pool
	hold time.Duration

	// onHold, if set, runs as the resend's journal row is taken.
	onHold func()

	mu       sync.Mutex
	posts    map[string]int
	resent   bool
	released chan struct{}
}

func (s *slotHolder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "tiles:batch") {
		s.next.ServeHTTP(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.posts[key]++
	first, holdIt := s.posts[key] == 1, s.posts[key] == 2 && !s.resent
	s.resent = s.resent || holdIt
	s.mu.Unlock()
	switch {
	case first:
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "1")
		operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "wait 1 second", nil, nil)
		return
	case holdIt:
		ctx := context.Background()
		tx, err := s.pool.Begin(ctx)
		if err == nil {
			_, err = tx.Exec(ctx, `SELECT 1 FROM upload_batches WHERE op_id = $1 FOR UPDATE`, key)
		}
		if err != nil {
			s.t.Errorf("hold batch %s's journal row: %v", key, err)
		} else {
			if s.onHold != nil {
				s.onHold()
			}
			time.AfterFunc(s.hold, func() {
				_ = tx.Commit(ctx)
				close(s.released)
			})
		}
	}
	s.next.ServeHTTP(w, r)
}

// slotHeldRig is a rig whose provider stands behind a slotHolder that
// holds the first resend's journal row for 3 s (onHold, if not nil, runs
// with the rig as it is taken), with a 3 s deadline, batches of 2 and one
// batch in flight at a time.
func slotHeldRig(t *testing.T, onHold func(r *cmdRig)) (*cmdRig, *slotHolder) {
	t.Helper()
	r := newCmdRig(t)
	s := &slotHolder{t: t, next: r.srv.Config.Handler, pool: r.store.Pool(), hold: 3 * time.Second,
		posts: map[string]int{}, released: make(chan struct{})}
	if onHold != nil {
		s.onHold = func() { onHold(r) }
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	r.cfg.ProviderURL = hs.URL
	r.cfg.Upload.Deadline = 3 * time.Second
	r.cfg.Upload.BatchSize = 2
	r.cfg.Upload.Concurrency = 1
	return r, s
}

// waitReleased waits for the slotHolder to let its held journal row go:
// the run under test resent a batch while the row was held.
func (s *slotHolder) waitReleased(t *testing.T, res runResult) {
	t.Helper()
	select {
	case <-s.released:
	case <-time.After(10 * time.Second):
		t.Fatalf("no batch was resent while its journal row was held: exit %d (%v)\n%s", res.code, res.err, res.stderr)
	}
}

// A batch whose advised time came but that the run's deadline found still
// waiting for a slot of the limit on batches in flight stays open, and
// the run reports it as waiting: it ends with exit 3 and next_retry_at at
// that batch's not_before (already past: the next run sends it at once),
// not with a failed retry past its deadline.
//
// Both batches are advised to wait 1 s; with one batch in flight, the
// first back keeps its slot past the 3 s deadline (its settlement waits
// for its journal row, held 3 s), so the other never goes again.
func TestARunWhoseDueBatchWaitsForASlotAtItsDeadlineEndsWithExit3(t *testing.T) {
	r, s := slotHeldRig(t, nil)
	ids := r.seed("F1", tilestore.FlightOnGround, 4)

	res := r.run(func(o *Options) { jsonOut(o); o.FlightID = "F1" })
	s.waitReleased(t, res)
	if res.code != exitcode.Partial {
		t.Fatalf("exit %d (%v), want 3: the batch left waiting for its slot waits for the next run\n%s", res.code, res.err, res.stderr)
	}
	m := decodeSummary(t, res.stdout)
	if m["outcome"] != "partial" || m["uploaded"] != 2.0 || m["still_pending"] != 2.0 || m["error"] != nil {
		t.Fatalf("summary %v; want partial, 2 tiles uploaded, the waiting batch's 2 pending, no error", m)
	}
	nb := openNotBefore(t, r, "F1")
	if got := nextRetryAt(t, m["next_retry_at"]); !got.Equal(nb) {
		t.Fatalf("next_retry_at %v, want the waiting batch's not_before %v", got, nb)
	}
	uploaded := 0
	for _, id := range ids {
		if r.status(id) == "uploaded" {
			uploaded++
		}
	}
	if uploaded != 2 {
		t.Fatalf("%d tiles uploaded, want the 2 of the batch that had the slot", uploaded)
	}
}

// A run whose deadline comes in one flight, that flight's work left
// waiting (it ends blocked, no error), still owes the flights it did not
// start: each is in the summary with its pending tiles counted, and a
// flight the deadline kept from starting with tiles pending is work the
// deadline cut: the run exits 1, saying the deadline was reached, not 3
// with the first flight's next_retry_at. One that another run finished
// meanwhile has nothing pending: it was not cut.
//
// F1 is TestARunWhoseDueBatchWaitsForASlotAtItsDeadlineEndsWithExit3's
// flight; F2's 3 tiles come after it.
func TestARunWhoseDeadlineKeepsAFlightFromStartingSummarizesItAndFails(t *testing.T) {
	for _, tc := range []struct {
		name            string
		f2DoneMeanwhile bool
	}{
		{"F2's tiles pending: cut by the deadline", false},
		{"F2 finished by another run meanwhile: not cut", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var finishF2 func(r *cmdRig)
			if tc.f2DoneMeanwhile {
				finishF2 = func(r *cmdRig) {
					if _, err := r.store.Pool().Exec(context.Background(),
						`UPDATE tiles SET voting_status = 'uploaded', uploaded_at = now() WHERE flight_id = 'F2'`); err != nil {
						t.Errorf("finish F2 as another run would: %v", err)
					}
				}
			}
			r, s := slotHeldRig(t, finishF2)
			r.seed("F1", tilestore.FlightOnGround, 4)
			f2 := r.seed("F2", tilestore.FlightOnGround, 3)

			res := r.run(func(o *Options) { jsonOut(o) })
			s.waitReleased(t, res)
			m := decodeSummary(t, res.stdout)
			fls := m["flights"].([]any)
			if len(fls) != 2 {
				t.Fatalf("summary flights %v, want F1 and F2", fls)
			}
			f1s, f2s := fls[0].(map[string]any), fls[1].(map[string]any)
			if f1s["flight_id"] != "F1" || f1s["still_pending"] != 2.0 || f1s["error"] != nil {
				t.Errorf("F1 %v: want its waiting batch's 2 tiles pending, no error", f1s)
			}
			if tc.f2DoneMeanwhile {
				if res.code != exitcode.Partial {
					t.Fatalf("exit %d (%v), want 3: all the work left waits\n%s", res.code, res.err, res.stderr)
				}
				if f2s["flight_id"] != "F2" || f2s["still_pending"] != 0.0 || f2s["outcome"] != "success" || f2s["error"] != nil {
					t.Errorf("F2 %v: want nothing pending, success, no error", f2s)
				}
				if m["still_pending"] != 2.0 || m["error"] != nil || m["next_retry_at"] == nil {
					t.Errorf("summary %v: want F1's 2 tiles pending, no error, a next_retry_at", m)
				}
				return
			}
			if res.code != exitcode.Failure {
				t.Fatalf("exit %d (%v), want 1: the deadline kept F2's 3 tiles from going\n%s", res.code, res.err, res.stderr)
			}
			e, _ := f2s["error"].(string)
			if f2s["flight_id"] != "F2" || f2s["still_pending"] != 3.0 || f2s["outcome"] != "failure" || !strings.Contains(e, "deadline") {
				t.Errorf("F2 %v: want its 3 tiles pending, a failure naming the deadline", f2s)
			}
			msg, _ := m["error"].(string)
			if m["still_pending"] != 5.0 || !strings.Contains(msg, "deadline") || !strings.Contains(msg, "raise --deadline") {
				t.Errorf("summary %v: want 5 tiles pending and the deadline's error telling to raise --deadline", m)
			}
			for _, id := range f2 {
				if st := r.status(id); st != "pending" {
					t.Errorf("F2 tile %s is %s, want pending", id, st)
				}
			}
		})
	}
}
