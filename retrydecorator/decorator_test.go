package retrydecorator

import (
	"context"
	"errors"
	"iter"
	"reflect"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

const flight = "F1"

func TestDecoratorImplementsTileUploader(t *testing.T) {
	var u any = New(&fakeInner{}, newMemStore(flight), &memRecorder{}, zerologNop(), &fakeClock{}, defaultConfig(), Hooks{})
	if _, ok := u.(uploader.TileUploader); !ok {
		t.Fatal("*Uploader does not implement uploader.TileUploader")
	}
}

func TestInnerSuccessIsReturnedUnchangedWithoutSleepOrCount(t *testing.T) {
	st := newMemStore(flight, tileIDs("t", 4)...)
	want := uploader.Report{FlightID: flight, Outcome: uploader.OutcomeSuccess, Accepted: 3,
		Duplicate: 1, Bytes: 400, Batches: 2, Resends: 1, Replayed: 1, Started: t0, Finished: t0.Add(time.Second)}
	inner := &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		st.settle("op", st.pending(), nil)
		return want, nil
	}}
	r := newRig(t, st, inner, defaultConfig(), Hooks{})
	got, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("report changed:\n got %+v\nwant %+v", got, want)
	}
	if len(r.clock.sleeps) != 0 || inner.calls != 1 {
		t.Errorf("sleeps %v, inner calls %d; want none and 1", r.clock.sleeps, inner.calls)
	}
	for _, id := range tileIDs("t", 4) {
		if n := st.tile(id).attempts; n != 0 {
			t.Errorf("tile %s attempts = %d, want 0", id, n)
		}
	}
}

// The success path costs one count, the one before the call: a call that
// returned no error and reports no rejection recorded nothing to count.
// A failed call is counted after whatever its report says, since it may
// have recorded rejections before it failed.
func TestOnlyACallThatFailedOrRecordedRejectionsIsFollowedByACount(t *testing.T) {
	innerErr := errors.New("database down")
	for _, c := range []struct {
		name       string
		rejected   int
		err        error
		wantCounts int
	}{
		{"success without rejections", 0, nil, 1},
		{"partial with rejections", 1, nil, 2},
		{"failure that reports no rejection", 0, innerErr, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := newMemStore(flight, "a", "b")
			inner := &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
				rejected := map[string]string{}
				if c.rejected > 0 || c.err != nil {
					rejected["b"] = "invalid_tile"
				}
				st.settle("op", []string{"a"}, rejected)
				out := uploader.OutcomeSuccess
				switch {
				case c.err != nil:
					out = uploader.OutcomeFailure
				case c.rejected > 0:
					out = uploader.OutcomePartial
				}
				return uploader.Report{FlightID: flight, Outcome: out, Accepted: 1, Rejected: c.rejected}, c.err
			}}
			cfg := defaultConfig()
			cfg.MaxInCallRetries = 0
			r := newRig(t, st, inner, cfg, Hooks{})
			_, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight})
			if !errors.Is(err, c.err) {
				t.Fatalf("error %v, want %v", err, c.err)
			}
			if st.countCalls != c.wantCounts {
				t.Errorf("%d counts, want %d", st.countCalls, c.wantCounts)
			}
			if c.rejected > 0 || c.err != nil {
				if n := st.tile("b").attempts; n != 1 {
					t.Errorf("tile b has %d attempts after its rejection, want 1 (counted in this call)", n)
				}
			}
		})
	}
}

func TestRejectionsLeftUncountedByAnEarlierRunAreCountedBeforeTheInnerCall(t *testing.T) {
	st := newMemStore(flight, "a", "b")
	st.settle("op-old", nil, map[string]string{"a": "invalid_tile"}) // earlier run died before counting
	var attemptsSeen int
	inner := &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		attemptsSeen = st.tile("a").attempts
		st.settle("op", st.pending(), nil)
		return uploader.Report{FlightID: flight, Outcome: uploader.OutcomeSuccess, Accepted: 2}, nil
	}}
	r := newRig(t, st, inner, defaultConfig(), Hooks{})
	if _, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight}); err != nil {
		t.Fatal(err)
	}
	if attemptsSeen != 1 {
		t.Errorf("inner saw tile a with %d attempts, want the leftover rejection counted first (1)", attemptsSeen)
	}
}

func TestPartialThenSuccessCountsEachRejectionOnceAndRetriesOnce(t *testing.T) {
	ids := tileIDs("t", 10)
	st := newMemStore(flight, ids...)
	rejectFirst := map[string]bool{ids[1]: true, ids[4]: true, ids[7]: true}
	var secondCallPending []string
	inner := scriptedInner(st, func(call int, id string) bool { return call == 0 && rejectFirst[id] })
	script := inner.UploadFunc
	inner.UploadFunc = func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		if inner.calls == 2 {
			secondCallPending = st.pending()
		}
		return script(ctx, req)
	}
	var retries []RetryEvent
	r := newRig(t, st, inner, defaultConfig(), Hooks{OnRetry: func(e RetryEvent) { retries = append(retries, e) }})

	got, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight})
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != uploader.OutcomeSuccess || got.RetryCount != 1 {
		t.Errorf("outcome %s retry_count %d, want success 1", got.Outcome, got.RetryCount)
	}
	if got.Accepted != 10 || got.Rejected != 3 || got.Batches != 2 || got.Bytes != 1300 || got.Pending != 0 {
		t.Errorf("aggregate accepted=%d rejected=%d batches=%d bytes=%d pending=%d; want 10 3 2 1300 0",
			got.Accepted, got.Rejected, got.Batches, got.Bytes, got.Pending)
	}
	if !reflect.DeepEqual(r.clock.sleeps, []time.Duration{2 * time.Second}) {
		t.Errorf("sleeps %v, want [2s]", r.clock.sleeps)
	}
	if !reflect.DeepEqual(secondCallPending, []string{ids[1], ids[4], ids[7]}) {
		t.Errorf("second call's pending set %v, want only the 3 rejected tiles", secondCallPending)
	}
	total := 0
	for _, id := range ids {
		n := st.tile(id).attempts
		total += n
		if want := map[bool]int{true: 1, false: 0}[rejectFirst[id]]; n != want {
			t.Errorf("tile %s attempts %d, want %d", id, n, want)
		}
	}
	if total != 3 {
		t.Errorf("increments %d, want 3", total)
	}
	if len(retries) != 1 || retries[0].Attempt != 1 || retries[0].Pending != 3 || retries[0].Sleep != 2*time.Second {
		t.Errorf("OnRetry events %+v, want one {Attempt 1, Pending 3, Sleep 2s}", retries)
	}
}

func TestPersistentPartialExhaustsInCallBudgetWithHint(t *testing.T) {
	st := newMemStore(flight, "bad", "good")
	inner := scriptedInner(st, func(_ int, id string) bool { return id == "bad" })
	cfg := defaultConfig()
	cfg.MaxPerTileAttempts = 100
	r := newRig(t, st, inner, cfg, Hooks{})

	got, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight})
	if err != nil {
		t.Fatal(err)
	}
	if inner.calls != 4 {
		t.Errorf("inner calls %d, want 4", inner.calls)
	}
	if want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}; !reflect.DeepEqual(r.clock.sleeps, want) {
		t.Errorf("sleeps %v, want %v", r.clock.sleeps, want)
	}
	if got.Outcome != uploader.OutcomePartial || got.RetryCount != 3 || got.Pending != 1 {
		t.Errorf("outcome %s retry_count %d pending %d, want partial 3 1", got.Outcome, got.RetryCount, got.Pending)
	}
	wantNext := r.clock.Now().Add(60 * time.Second)
	if got.NextRetryAt == nil || !got.NextRetryAt.Equal(wantNext) {
		t.Errorf("next_retry_at %v, want now+cap %v", got.NextRetryAt, wantNext)
	}
	if len(got.Rejections) != 1 || got.Rejections[0].OpID != "op-3" {
		t.Errorf("rejections %+v, want the bad tile once with its latest op", got.Rejections)
	}
	if n := st.tile("bad").attempts; n != 4 {
		t.Errorf("bad tile attempts %d, want 4", n)
	}
}

func TestBackoffIsCappedSoTheSixthRetrySleepsTheCap(t *testing.T) {
	st := newMemStore(flight, "bad")
	inner := scriptedInner(st, func(int, string) bool { return true })
	cfg := defaultConfig()
	cfg.MaxInCallRetries, cfg.MaxPerTileAttempts, cfg.BackoffCap = 10, 1000, 10*time.Second
	r := newRig(t, st, inner, cfg, Hooks{})
	if _, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight}); err != nil {
		t.Fatal(err)
	}
	s := time.Second
	want := []time.Duration{2 * s, 4 * s, 8 * s, 10 * s, 10 * s, 10 * s, 10 * s, 10 * s, 10 * s, 10 * s}
	if !reflect.DeepEqual(r.clock.sleeps, want) {
		t.Errorf("sleeps %v, want %v", r.clock.sleeps, want)
	}
	if r.clock.sleeps[5] != 10*s {
		t.Errorf("6th retry slept %v, want 10s (not 64s)", r.clock.sleeps[5])
	}
}

func TestConfigBackoffFollowsMinBaseTimesTwoToTheNMinusOneAndCap(t *testing.T) {
	cfg := defaultConfig()
	s := time.Second
	for n, want := range map[int]time.Duration{1: 2 * s, 2: 4 * s, 3: 8 * s, 5: 32 * s, 6: 60 * s, 1000: 60 * s} {
		if got := cfg.Backoff(n, 0); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, want)
		}
	}
	cfg.Jitter = operation.JitterFull
	for n := 1; n < 10; n++ {
		if got := cfg.Backoff(n, 0); got < 0 || got > min(2*s<<(n-1), 60*s) {
			t.Errorf("full-jitter Backoff(%d) = %v, out of [0, %v]", n, got, min(2*s<<(n-1), 60*s))
		}
	}
}

func TestInnerErrorIsReturnedAtOnceWithoutRetryAfterCountingItsRejections(t *testing.T) {
	cases := map[string]error{
		"not on ground": &uploader.FlightStateNotOnGroundError{FlightID: flight, State: tilestore.FlightAirborne},
		"unreachable":   &uploader.ProviderError{Status: 0, Err: errBoom},
		"auth":          &uploader.ProviderError{Status: 401, Code: "UNAUTHORIZED"},
	}
	for name, innerErr := range cases {
		t.Run(name, func(t *testing.T) {
			st := newMemStore(flight, "a", "b")
			inner := &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
				st.settle("op", nil, map[string]string{"a": "invalid_tile"}) // a batch settled before the failure
				return uploader.Report{FlightID: flight, Outcome: uploader.OutcomeFailure, Rejected: 1}, innerErr
			}}
			r := newRig(t, st, inner, defaultConfig(), Hooks{})
			got, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight})
			if !errors.Is(err, innerErr) {
				t.Fatalf("err %v, want the inner error", err)
			}
			if inner.calls != 1 || len(r.clock.sleeps) != 0 {
				t.Errorf("inner calls %d, sleeps %v; want 1 and none", inner.calls, r.clock.sleeps)
			}
			if got.Outcome != uploader.OutcomeFailure || got.Rejected != 1 {
				t.Errorf("report %+v, want failure with the inner's counts", got)
			}
			if n := st.tile("a").attempts; n != 1 {
				t.Errorf("rejection recorded before the failure counted %d times, want 1", n)
			}
		})
	}
}

func TestNotOnGroundErrorKeepsItsType(t *testing.T) {
	st := newMemStore(flight)
	inner := &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		return uploader.Report{}, &uploader.FlightStateNotOnGroundError{FlightID: flight, State: tilestore.FlightAirborne}
	}}
	r := newRig(t, st, inner, defaultConfig(), Hooks{})
	_, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight})
	var nog *uploader.FlightStateNotOnGroundError
	if !errors.As(err, &nog) || !errors.Is(err, uploader.ErrFlightNotOnGround) {
		t.Fatalf("err %v does not unwrap to *FlightStateNotOnGroundError", err)
	}
}

func TestLoopIsBoundedByThePerTileBudget(t *testing.T) {
	st := newMemStore(flight, "bad", "good")
	inner := scriptedInner(st, func(_ int, id string) bool { return id == "bad" })
	cfg := defaultConfig()
	cfg.MaxInCallRetries, cfg.MaxPerTileAttempts = 1000, 3
	r := newRig(t, st, inner, cfg, Hooks{})
	got, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight})
	if err != nil {
		t.Fatal(err)
	}
	if inner.calls != 3 || len(r.clock.sleeps) != 2 {
		t.Errorf("inner calls %d sleeps %d; want 3 and 2 (the tile gives up on its 3rd rejection)", inner.calls, len(r.clock.sleeps))
	}
	if got.Outcome != uploader.OutcomePartial || got.GivenUp != 1 || got.Pending != 0 || got.NextRetryAt != nil {
		t.Errorf("report outcome %s given_up %d pending %d next %v; want partial 1 0 nil",
			got.Outcome, got.GivenUp, got.Pending, got.NextRetryAt)
	}
}

func TestCancelInterruptsSleepAtOnceAndReturnsReportSoFar(t *testing.T) {
	st := newMemStore(flight, "bad", "good")
	inner := scriptedInner(st, func(_ int, id string) bool { return id == "bad" })
	cfg := defaultConfig()
	cfg.BackoffBase, cfg.BackoffCap = time.Hour, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u := New(inner, st, &memRecorder{}, zerologNop(), SystemClock{}, cfg,
		Hooks{OnRetry: func(RetryEvent) { go cancel() }})

	start := time.Now()
	got, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: flight})
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("cancel took %v to end a 1h sleep", took)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if got.Outcome != uploader.OutcomePartial || got.Pending != 1 {
		t.Errorf("outcome %s with %d pending, want a partial report with the rejected tile pending", got.Outcome, got.Pending)
	}
	if inner.calls != 1 || got.Accepted != 1 || got.Rejected != 1 || got.RetryCount != 0 {
		t.Errorf("report %+v after %d calls; want the first call's counts and no retry", got, inner.calls)
	}
	if n := st.tile("bad").attempts; n != 1 {
		t.Errorf("bad tile attempts %d, want 1 (counted before the sleep, once)", n)
	}
}

func TestDryRunIsPassedThroughWithoutCountingOrRetrying(t *testing.T) {
	st := newMemStore(flight, "a")
	st.settle("op-old", nil, map[string]string{"a": "invalid_tile"})
	want := uploader.Report{FlightID: flight, Outcome: uploader.OutcomePartial, Pending: 1}
	inner := &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		if !req.DryRun {
			t.Error("inner got DryRun=false")
		}
		return want, nil
	}}
	r := newRig(t, st, inner, defaultConfig(), Hooks{})
	got, err := r.u.UploadPendingTiles(context.Background(), uploader.Request{FlightID: flight, DryRun: true})
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v; want the inner report unchanged", got, err)
	}
	if st.countCalls != 0 || inner.calls != 1 || len(r.clock.sleeps) != 0 {
		t.Errorf("count calls %d inner calls %d sleeps %v; want 0 1 none", st.countCalls, inner.calls, r.clock.sleeps)
	}
}

func TestPassThroughMethodsDelegateUnchanged(t *testing.T) {
	tile := tilestore.Tile{ID: "t1", FlightID: flight}
	var gotFlight string
	inner := &fakeInner{
		EnumerateFunc: func(ctx context.Context, f string) iter.Seq2[tilestore.Tile, error] {
			gotFlight = f
			return func(yield func(tilestore.Tile, error) bool) { yield(tile, nil) }
		},
		ConfirmFunc: func(ctx context.Context, f string) error {
			return &uploader.FlightStateNotOnGroundError{FlightID: f, State: tilestore.FlightAirborne}
		},
	}
	u := New(inner, newMemStore(flight), &memRecorder{}, zerologNop(), &fakeClock{}, defaultConfig(), Hooks{})
	var got []tilestore.Tile
	for tl, err := range u.EnumeratePendingTiles(context.Background(), flight) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, tl)
	}
	if gotFlight != flight || len(got) != 1 || got[0].ID != "t1" {
		t.Errorf("enumerate: inner saw flight %q, got %v", gotFlight, got)
	}
	err := u.ConfirmFlightState(context.Background(), "F9")
	var nog *uploader.FlightStateNotOnGroundError
	if !errors.As(err, &nog) || nog.FlightID != "F9" {
		t.Errorf("confirm: err %v, want the inner's error for F9", err)
	}
}

func TestConfigValidateRejectsBadValues(t *testing.T) {
	mod := func(f func(*Config)) Config { c := defaultConfig(); f(&c); return c }
	cases := map[string]Config{
		"negative retries": mod(func(c *Config) { c.MaxInCallRetries = -1 }),
		"zero per-tile":    mod(func(c *Config) { c.MaxPerTileAttempts = 0 }),
		"zero base":        mod(func(c *Config) { c.BackoffBase = 0 }),
		"cap below base":   mod(func(c *Config) { c.BackoffCap = time.Second }),
		"unknown jitter":   mod(func(c *Config) { c.Jitter = "some" }),
	}
	for name, c := range cases {
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig", name, err)
		}
	}
	if err := defaultConfig().Validate(); err != nil {
		t.Errorf("the config defaults are invalid here: %v", err)
	}
}

// ctxCheckingStore refuses to count under a done context, as a real
// database call would.
type ctxCheckingStore struct{ *memStore }

func (s ctxCheckingStore) CountRejectionsUpTo(ctx context.Context, flightID string, maxAttempts, maxTiles int, after string,
	beforeCommit func(ctx context.Context, gaveUp []tilestore.GiveUp) error) (tilestore.CountResult, error) {
	if err := ctx.Err(); err != nil {
		return tilestore.CountResult{}, err
	}
	return s.memStore.CountRejectionsUpTo(ctx, flightID, maxAttempts, maxTiles, after, beforeCommit)
}

func TestRejectionsRecordedBeforeTheDeadlineAreCountedInThatRun(t *testing.T) {
	st := newMemStore(flight, "a", "b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &fakeInner{UploadFunc: func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		st.settle("op", nil, map[string]string{"a": "invalid_tile"}) // answered just before the deadline
		cancel()
		return uploader.Report{FlightID: flight, Outcome: uploader.OutcomeFailure, Rejected: 1}, ctx.Err()
	}}
	clock := &fakeClock{now: t0}
	st.now = clock.Now
	u := New(inner, ctxCheckingStore{st}, &memRecorder{}, zerologNop(), clock, defaultConfig(), Hooks{})
	_, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: flight})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if n := st.tile("a").attempts; n != 1 {
		t.Fatalf("the rejection answered before the deadline was counted %d times in this run, want 1", n)
	}
}
