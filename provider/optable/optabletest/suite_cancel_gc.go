package optabletest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/optable"
)

func testCancelImplicitVolatile(t *testing.T, e *env) {
	r := req("op-drop-vol-0001", volatileNonIdem)
	if err := e.mustOwn(r).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.state(r.OpID); st != optable.StateReleased {
		t.Fatalf("dropped volatile op: %s, want released", st)
	}
}

func testCancelImplicitPersist(t *testing.T, e *env) {
	r := req("op-drop-per-0001", persistNonIdem)
	owner := e.mustOwn(r)
	if err := owner.Release(context.Background()); err != nil {
		t.Fatalf("drop of persist op: %v", err)
	}
	if st := e.state(r.OpID); st != optable.StateLive {
		t.Fatalf("dropped persist op: %s, want still live", st)
	}
	want := outcome(200, "still ran", false)
	e.seal(owner, want)
	assertOutcome(t, e.mustReplay(r), want)
}

func testGCTTL(t *testing.T, e *env) {
	ctx := context.Background()
	r := req("op-gc-ttl-000001", volatileNonIdem)
	want := outcome(200, "kept", false)
	e.seal(e.mustOwn(r), want)

	e.clock.Advance(retention - time.Second)
	assertOutcome(t, e.mustReplay(r), want) // inside the retry window
	e.clock.Advance(time.Second)
	if _, err := e.begin(r); !errors.Is(err, optable.ErrExpired) {
		t.Fatalf("at retention: %v, want ErrExpired", err)
	}
	e.clock.Advance(margin - time.Second)
	if n, err := e.table.GC(ctx); err != nil || n != 0 {
		t.Fatalf("GC inside the margin removed %d (%v), want 0", n, err)
	}
	if st := e.state(r.OpID); st != optable.StateExpired {
		t.Fatalf("inside the margin: %s, want expired", st)
	}
	e.clock.Advance(2 * time.Second)
	if n, err := e.table.GC(ctx); err != nil || n != 1 {
		t.Fatalf("GC past the margin removed %d (%v), want 1", n, err)
	}
}

func testGCLiveProtected(t *testing.T, e *env) {
	ctx := context.Background()
	for _, pol := range []optable.Policy{volatileNonIdem, persistNonIdem} {
		r := req("op-gc-live-"+polName(pol), pol)
		owner := e.mustOwn(r)
		e.clock.Advance(10 * (retention + margin))
		if _, err := e.table.GC(ctx); err != nil {
			t.Fatal(err)
		}
		if st := e.state(r.OpID); st != optable.StateLive {
			t.Fatalf("%s: live op after GC: %s", polName(pol), st)
		}
		if _, err := e.begin(r); !errors.Is(err, optable.ErrProcessing) {
			t.Fatalf("%s: duplicate of old live op: %v, want ErrProcessing", polName(pol), err)
		}
		want := outcome(200, "late but sealed", false)
		e.seal(owner, want)
		assertOutcome(t, e.mustReplay(r), want)
	}
}

func testGCFailClosed(t *testing.T, e *env) {
	ctx := context.Background()
	// A released idem op past retention is not reopened.
	rel := req("op-gc-rel-idem-1", volatileIdem)
	if err := e.mustOwn(rel).Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A UUIDv7 ID, recognisable after its record is collected.
	uid := req(UUIDv7At(e.clock.Now()), volatileNonIdem)
	e.seal(e.mustOwn(uid), outcome(200, "x", false))

	e.clock.Advance(retention)
	for _, r := range []optable.Request{rel, uid} {
		if tk, err := e.begin(r); !errors.Is(err, optable.ErrExpired) {
			t.Fatalf("%s expired: ticket %v err %v, want ErrExpired", r.OpID, tk, err)
		}
	}
	e.clock.Advance(margin + time.Second)
	if n, err := e.table.GC(ctx); err != nil || n != 2 {
		t.Fatalf("GC removed %d (%v), want 2", n, err)
	}
	if tk, err := e.begin(uid); !errors.Is(err, optable.ErrExpired) {
		t.Fatalf("collected UUIDv7 ID: ticket %v err %v, want ErrExpired, never absent", tk, err)
	}
	if st := e.state(uid.OpID); st != optable.StateExpired {
		t.Fatalf("collected UUIDv7 ID state = %s, want expired", st)
	}
	// An old UUIDv7 ID that was never seen is expired too.
	old := req(UUIDv7At(e.clock.Now().Add(-2*retention)), volatileNonIdem)
	if _, err := e.begin(old); !errors.Is(err, optable.ErrExpired) {
		t.Fatalf("unseen old UUIDv7 ID: %v, want ErrExpired", err)
	}
	// A fresh UUIDv7 ID is admitted.
	e.mustOwn(req(UUIDv7At(e.clock.Now()), volatileNonIdem))
}

func testIndeterminateDistinct(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(context.Background())
	failed := req("op-distinct-fail", volatileNonIdem)
	e.seal(e.mustOwn(failed), outcome(500, "app failure", true))
	tk, err := e.begin(failed)
	if err != nil || tk.Owner() || !tk.Outcome().Failure {
		t.Fatalf("sealed failure: ticket %v err %v, want a replayed failure, not an error", tk, err)
	}

	lost := req("op-distinct-lost", persistNonIdem)
	e.mustOwn(lost)
	e.restart()
	_, indErr := e.begin(lost)
	var ie *optable.IndeterminateError
	if !errors.As(indErr, &ie) {
		t.Fatalf("crashed non-idem op: %v, want *IndeterminateError", indErr)
	}

	live := req("op-distinct-live", volatileNonIdem)
	e.mustOwn(live)
	live.Wait = time.Minute
	cancel()
	_, cancelErr := e.table.Begin(ctx, live)
	if !errors.Is(cancelErr, context.Canceled) {
		t.Fatalf("cancelled wait: %v, want context.Canceled", cancelErr)
	}
	for _, other := range []error{cancelErr, optable.ErrConflict, optable.ErrProcessing, optable.ErrExpired, context.DeadlineExceeded} {
		if errors.As(other, new(*optable.IndeterminateError)) {
			t.Fatalf("%v classifies as indeterminate", other)
		}
		if errors.Is(indErr, other) {
			t.Fatalf("indeterminate classifies as %v", other)
		}
	}
}

// testStaleOwnerFenced: an owner whose generation was superseded (crash
// recovery, then a new owner) cannot seal over the new execution.
func testStaleOwnerFenced(t *testing.T, e *env) {
	ctx := context.Background()
	r := req("op-fenced-000001", persistIdem)
	stale := e.mustOwn(r)
	e.restart()
	fresh := e.mustOwn(r)
	if _, err := stale.Seal(ctx, outcome(200, "stale", false)); !errors.Is(err, optable.ErrNotOwner) {
		t.Fatalf("stale owner sealed: %v", err)
	}
	want := outcome(200, "fresh", false)
	e.seal(fresh, want)
	assertOutcome(t, e.mustReplay(r), want)
}
