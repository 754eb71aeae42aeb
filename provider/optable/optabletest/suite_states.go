package optabletest

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/optable"
)

func testReleasedIdem(t *testing.T, e *env) {
	ctx := context.Background()
	r := req("op-rel-idem-0001", volatileIdem)
	first := e.mustOwn(r)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.state(r.OpID); st != optable.StateReleased {
		t.Fatalf("state = %s, want released", st)
	}
	second := e.mustOwn(r)
	if second.Record().Gen != 2 {
		t.Fatalf("re-admitted gen = %d, want 2", second.Record().Gen)
	}
	if _, err := first.Seal(ctx, outcome(200, "stale", false)); !errors.Is(err, optable.ErrNotOwner) {
		t.Fatalf("released owner sealed: %v", err)
	}
	want := outcome(200, "fresh", false)
	e.seal(second, want)
	assertOutcome(t, e.mustReplay(r), want)
}

func testReleasedNonIdem(t *testing.T, e *env) {
	r := req("op-rel-nonidem-1", volatileNonIdem)
	if err := e.mustOwn(r).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		tk, err := e.begin(r)
		var ie *optable.IndeterminateError
		if !errors.As(err, &ie) || ie.From != optable.StateReleased {
			t.Fatalf("retry of released non-idem: ticket %v err %v, want IndeterminateError from released", tk, err)
		}
	}
}

func testIndeterminateIdem(t *testing.T, e *env) {
	r := req("op-ind-idem-0001", persistIdem)
	e.mustOwn(r)
	e.restart()
	if st := e.state(r.OpID); st != optable.StateIndeterminate {
		t.Fatalf("after restart: %s, want indeterminate", st)
	}
	tk := e.mustOwn(r)
	want := outcome(200, "rerun", false)
	e.seal(tk, want)
	assertOutcome(t, e.mustReplay(r), want)
}

func testIndeterminateNonIdem(t *testing.T, e *env) {
	lost := req("op-ind-lost-0001", persistNonIdem)
	kept := req("op-ind-kept-0001", persistNonIdem)
	e.mustOwn(lost)
	want := outcome(200, "durable", false)
	e.seal(e.mustOwn(kept), want)
	e.restart()
	_, err := e.begin(lost)
	var ie *optable.IndeterminateError
	if !errors.As(err, &ie) || ie.From != optable.StateIndeterminate {
		t.Fatalf("retry of indeterminate non-idem: %v, want IndeterminateError", err)
	}
	// The sealed outcome is recovered from durable state, not guessed.
	assertOutcome(t, e.mustReplay(kept), want)
}

func testPayloadBinding(t *testing.T, e *env) {
	ctx := context.Background()
	mk := func(id string, pol optable.Policy) optable.Request { return req(id, pol) }
	otherFP := func(r optable.Request) optable.Request { r.Fingerprint = "fp-2"; return r }
	otherMethod := func(r optable.Request) optable.Request { r.Method = "delete"; return r }

	live := mk("op-bind-live-001", volatileIdem)
	e.mustOwn(live)
	sealed := mk("op-bind-sealed-1", volatileIdem)
	e.seal(e.mustOwn(sealed), outcome(200, "x", false))
	released := mk("op-bind-rel-0001", volatileIdem)
	if err := e.mustOwn(released).Release(ctx); err != nil {
		t.Fatal(err)
	}
	ind := mk("op-bind-ind-0001", persistIdem)
	e.mustOwn(ind)
	e.restart()

	for _, r := range []optable.Request{live, sealed, released, ind} {
		for _, bad := range []optable.Request{otherFP(r), otherMethod(r)} {
			bad.Wait = time.Second
			tk, err := e.begin(bad)
			if !errors.Is(err, optable.ErrConflict) {
				t.Fatalf("%s with method %s fp %s: ticket %v err %v, want ErrConflict", r.OpID, bad.Method, bad.Fingerprint, tk, err)
			}
		}
	}
	// The conflicts changed nothing: the released idem op still re-admits
	// on its own payload, the sealed one still replays.
	e.mustOwn(released)
	e.mustReplay(sealed)
}

func testScope(t *testing.T, e *env) {
	a := req("op-scoped-000001", volatileNonIdem)
	b := a
	b.Scope = "caller-b"
	ta, tb := e.mustOwn(a), e.mustOwn(b)
	e.seal(ta, outcome(200, "a", false))
	e.seal(tb, outcome(200, "b", false))
	assertOutcome(t, e.mustReplay(a), outcome(200, "a", false))
	assertOutcome(t, e.mustReplay(b), outcome(200, "b", false))
}

func testVolatileDefault(t *testing.T, e *env) {
	var zero optable.Policy
	if zero.Persist || zero.Idem {
		t.Fatal("zero Policy is not volatile non-idem")
	}
	r := req("op-default-00001", zero)
	if err := e.mustOwn(r).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.state(r.OpID); st != optable.StateReleased {
		t.Fatalf("default policy after release: %s, want released", st)
	}
	if _, err := e.begin(r); !optable.IsIndeterminate(err) {
		t.Fatalf("default policy retry after release: %v, want indeterminate", err)
	}
}

func testPersistCrash(t *testing.T, e *env) {
	p := req("op-persist-crash", persistNonIdem)
	v := req("op-volatile-crash", volatileNonIdem)
	e.mustOwn(p)
	e.mustOwn(v)
	e.restart()
	if st := e.state(p.OpID); st != optable.StateIndeterminate {
		t.Fatalf("persist op after restart: %s, want indeterminate (never absent)", st)
	}
	if st := e.state(v.OpID); st != optable.StateReleased && st != optable.StateAbsent {
		t.Fatalf("volatile op after restart: %s, want released or absent", st)
	}
	if tk, err := e.begin(p); !optable.IsIndeterminate(err) {
		t.Fatalf("retry of crashed persist op: ticket %v err %v, want indeterminate", tk, err)
	}
}

func testPersistSeal(t *testing.T, e *env) {
	r := req("op-persist-seal1", persistNonIdem)
	want := outcome(200, "\x00\xffbinary\r\n", false)
	e.seal(e.mustOwn(r), want)
	// Seal returned, so the outcome must survive a restart.
	e.restart()
	assertOutcome(t, e.mustReplay(r), want)
}

func polName(p optable.Policy) string {
	s := "volatile-"
	if p.Persist {
		s = "persist-"
	}
	if p.Idem {
		return s + "idem"
	}
	return s + "nonidem"
}

func assertOutcome(t *testing.T, got, want optable.Outcome) {
	t.Helper()
	if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) || got.Failure != want.Failure ||
		!reflect.DeepEqual(map[string][]string(got.Header), map[string][]string(want.Header)) {
		t.Fatalf("outcome = %d %q failure=%v %v, want %d %q failure=%v %v",
			got.Status, got.Body, got.Failure, got.Header, want.Status, want.Body, want.Failure, want.Header)
	}
}

// testAdmissionToken: the Live record carries the token of the admission
// that made it Live, new or reopened, and Get returns it, so a table can
// recognise an admission whose answer it lost.
func testAdmissionToken(t *testing.T, e *env) {
	ctx := context.Background()
	now := e.clock.Now()
	a := optable.Admission{Key: optable.Key{OpID: "op-token-000001"}, Method: "m", Fingerprint: "f",
		Policy: volatileIdem, Token: 11, Now: now, ExpiresAt: now.Add(retention)}
	rec, owner, err := e.store.Admit(ctx, a)
	if err != nil || !owner || rec.Token != 11 {
		t.Fatalf("admit: owner %v token %d %v; want owner with token 11", owner, rec.Token, err)
	}
	a.Token = 12
	if rec, owner, err := e.store.Admit(ctx, a); err != nil || owner || rec.Token != 11 {
		t.Fatalf("second admit of a live key: owner %v token %d %v; want the first admission's record", owner, rec.Token, err)
	}
	if _, err := e.store.Finish(ctx, a.Key, 1, optable.Finish{To: optable.StateReleased, ExpiresAt: now.Add(retention), Now: now}); err != nil {
		t.Fatal(err)
	}
	a.Token = 13
	if rec, owner, err := e.store.Admit(ctx, a); err != nil || !owner || rec.Gen != 2 || rec.Token != 13 {
		t.Fatalf("reopen: owner %v gen %d token %d %v; want owner of gen 2 with token 13", owner, rec.Gen, rec.Token, err)
	}
	if rec, err := e.store.Get(ctx, a.Key); err != nil || rec.Token != 13 {
		t.Fatalf("get: token %d %v, want 13", rec.Token, err)
	}
}
