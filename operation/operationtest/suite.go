package operationtest

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
)

var (
	volatileNonIdem = operation.Policy{}
	volatileIdem    = operation.Policy{Idem: true}
	persistNonIdem  = operation.Policy{Persist: true}
	persistIdem     = operation.Policy{Persist: true, Idem: true}
)

// Run runs the conformance suite against the stores h opens. Subtests run
// one after another: Recover and GC act on a whole store.
func Run(t *testing.T, h Harness) {
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) { c.run(t, newEnv(t, h)) })
	}
}

type suiteCase struct {
	rule string
	run  func(t *testing.T, e *env)
}

var cases = []suiteCase{
	{"retry.duplicate.absent", testAbsent},
	{"retry.state.live.one-owner", testOneOwner},
	{"retry.duplicate.live", testLiveNoSecondOwner},
	{"retry.duplicate.live.attach", testLiveAttach},
	{"retry.seal.return", testSealReturn},
	{"retry.seal.terminal-replay", testTerminalReplay},
	{"retry.seal.absorbing", testAbsorbing},
	{"retry.duplicate.released.idem", testReleasedIdem},
	{"retry.duplicate.released.non-idem", testReleasedNonIdem},
	{"retry.duplicate.indeterminate.idem", testIndeterminateIdem},
	{"retry.duplicate.indeterminate.non-idem", testIndeterminateNonIdem},
	{"retry.op-id.payload-binding", testPayloadBinding},
	{"retry.op-id.scope", testScope},
	{"retry.policy.volatile.default", testVolatileDefault},
	{"retry.policy.persist.crash", testPersistCrash},
	{"retry.policy.persist.seal", testPersistSeal},
	{"retry.cancel.explicit.volatile", testCancelExplicitVolatile},
	{"retry.cancel.explicit.persist", testCancelExplicitPersist},
	{"retry.cancel.implicit.volatile", testCancelImplicitVolatile},
	{"retry.cancel.implicit.persist", testCancelImplicitPersist},
	{"retry.cancel.race", testCancelRace},
	{"retry.gc.ttl", testGCTTL},
	{"retry.gc.live-protected", testGCLiveProtected},
	{"retry.gc.fail-closed", testGCFailClosed},
	{"retry.outcome.indeterminate.distinct", testIndeterminateDistinct},
	{"retry.owner.fenced", testStaleOwnerFenced},
}

func testAbsent(t *testing.T, e *env) {
	if st := e.state("op-absent-000001"); st != operation.StateAbsent {
		t.Fatalf("state before admission = %s, want absent", st)
	}
	tk := e.mustOwn(req("op-absent-000001", volatileNonIdem))
	if rec := tk.Record(); rec.State != operation.StateLive || rec.Gen != 1 {
		t.Fatalf("admitted record = %s gen %d, want live gen 1", rec.State, rec.Gen)
	}
	if st := e.state("op-absent-000001"); st != operation.StateLive {
		t.Fatalf("state after admission = %s, want live", st)
	}
}

// testOneOwner: 16 concurrent first attempts (16 connections for PGStore)
// produce exactly one owner.
func testOneOwner(t *testing.T, e *env) {
	const n = 16
	for round := range 5 {
		id := "op-one-owner-" + string(rune('a'+round)) + "-000001"
		var owners, processing int
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tk, err := e.table.Begin(context.Background(), req(id, persistIdem))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && tk.Owner():
					owners++
				case errors.Is(err, operation.ErrProcessing):
					processing++
				default:
					t.Errorf("begin: ticket %v err %v", tk, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if owners != 1 || processing != n-1 {
			t.Fatalf("round %d: %d owners, %d processing; want 1 and %d", round, owners, processing, n-1)
		}
	}
}

func testLiveNoSecondOwner(t *testing.T, e *env) {
	r := req("op-live-00000001", volatileIdem)
	e.mustOwn(r)
	for range 3 {
		tk, err := e.begin(r)
		if !errors.Is(err, operation.ErrProcessing) {
			t.Fatalf("duplicate while live: ticket %v err %v, want ErrProcessing", tk, err)
		}
	}
}

// testLiveAttach: duplicates that arrive while Live wait for the owner and
// all observe its one outcome.
func testLiveAttach(t *testing.T, e *env) {
	r := req("op-attach-000001", volatileNonIdem)
	owner := e.mustOwn(r)
	dup := r
	dup.Wait = 30 * time.Second
	const n = 8
	results := make(chan *operation.Ticket, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			tk, err := e.table.Begin(context.Background(), dup)
			if err != nil {
				errs <- err
				return
			}
			results <- tk
		}()
	}
	select {
	case tk := <-results:
		t.Fatalf("a duplicate returned while the operation was live (owner=%v)", tk.Owner())
	case err := <-errs:
		t.Fatalf("a duplicate failed while the operation was live: %v", err)
	default:
	}
	want := outcome(200, `{"ok":true}`, false)
	e.seal(owner, want)
	for range n {
		select {
		case tk := <-results:
			if tk.Owner() {
				t.Fatal("a duplicate became a second owner")
			}
			assertOutcome(t, tk.Outcome(), want)
		case err := <-errs:
			t.Fatalf("duplicate: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("duplicates still waiting 30s after the seal")
		}
	}
}

func testSealReturn(t *testing.T, e *env) {
	r := req("op-seal-00000001", volatileNonIdem)
	want := outcome(201, `{"id":7}`, false)
	rec, err := e.mustOwn(r).Seal(context.Background(), want)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != operation.StateSealed {
		t.Fatalf("after seal: %s", rec.State)
	}
	assertOutcome(t, e.mustReplay(r), want)
	if st := e.state(r.OpID); st != operation.StateSealed {
		t.Fatalf("state = %s, want sealed", st)
	}
}

func testTerminalReplay(t *testing.T, e *env) {
	for _, pol := range []operation.Policy{volatileNonIdem, volatileIdem, persistNonIdem, persistIdem} {
		r := req("op-fail-"+polName(pol), pol)
		failure := outcome(422, `{"errors":[{"code":"BAD"}]}`, true)
		e.seal(e.mustOwn(r), failure)
		for range 3 {
			assertOutcome(t, e.mustReplay(r), failure)
		}
	}
}

func testAbsorbing(t *testing.T, e *env) {
	ctx := context.Background()
	for _, pol := range []operation.Policy{volatileNonIdem, volatileIdem, persistNonIdem, persistIdem} {
		r := req("op-absorb-"+polName(pol), pol)
		tk := e.mustOwn(r)
		want := outcome(200, `{"v":1}`, false)
		e.seal(tk, want)
		if _, err := tk.Seal(ctx, outcome(200, `{"v":2}`, false)); !errors.Is(err, operation.ErrNotOwner) {
			t.Fatalf("%s: second seal: %v, want ErrNotOwner", polName(pol), err)
		}
		if err := tk.Release(ctx); err != nil && !errors.Is(err, operation.ErrNotOwner) {
			t.Fatalf("%s: release after seal: %v", polName(pol), err)
		}
		if err := tk.Abandon(ctx); !errors.Is(err, operation.ErrNotOwner) {
			t.Fatalf("%s: abandon after seal: %v, want ErrNotOwner", polName(pol), err)
		}
		if rec, err := e.table.Cancel(ctx, operation.Key{Scope: r.Scope, OpID: r.OpID}); err != nil || rec.State != operation.StateSealed {
			t.Fatalf("%s: cancel after seal: %v %v", polName(pol), rec.State, err)
		}
		e.clock.Advance(time.Minute)
		if _, err := e.table.GC(ctx); err != nil {
			t.Fatal(err)
		}
		assertOutcome(t, e.mustReplay(r), want)
	}
	e.restart()
	for _, pol := range []operation.Policy{volatileNonIdem, volatileIdem, persistNonIdem, persistIdem} {
		assertOutcome(t, e.mustReplay(req("op-absorb-"+polName(pol), pol)), outcome(200, `{"v":1}`, false))
	}
}

func testReleasedIdem(t *testing.T, e *env) {
	ctx := context.Background()
	r := req("op-rel-idem-0001", volatileIdem)
	first := e.mustOwn(r)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.state(r.OpID); st != operation.StateReleased {
		t.Fatalf("state = %s, want released", st)
	}
	second := e.mustOwn(r)
	if second.Record().Gen != 2 {
		t.Fatalf("re-admitted gen = %d, want 2", second.Record().Gen)
	}
	if _, err := first.Seal(ctx, outcome(200, "stale", false)); !errors.Is(err, operation.ErrNotOwner) {
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
		var ie *operation.IndeterminateError
		if !errors.As(err, &ie) || ie.From != operation.StateReleased {
			t.Fatalf("retry of released non-idem: ticket %v err %v, want IndeterminateError from released", tk, err)
		}
	}
}

func testIndeterminateIdem(t *testing.T, e *env) {
	r := req("op-ind-idem-0001", persistIdem)
	e.mustOwn(r)
	e.restart()
	if st := e.state(r.OpID); st != operation.StateIndeterminate {
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
	var ie *operation.IndeterminateError
	if !errors.As(err, &ie) || ie.From != operation.StateIndeterminate {
		t.Fatalf("retry of indeterminate non-idem: %v, want IndeterminateError", err)
	}
	// The sealed outcome is recovered from durable state, not guessed.
	assertOutcome(t, e.mustReplay(kept), want)
}

func testPayloadBinding(t *testing.T, e *env) {
	ctx := context.Background()
	mk := func(id string, pol operation.Policy) operation.Request { return req(id, pol) }
	otherFP := func(r operation.Request) operation.Request { r.Fingerprint = "fp-2"; return r }
	otherMethod := func(r operation.Request) operation.Request { r.Method = "delete"; return r }

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

	for _, r := range []operation.Request{live, sealed, released, ind} {
		for _, bad := range []operation.Request{otherFP(r), otherMethod(r)} {
			bad.Wait = time.Second
			tk, err := e.begin(bad)
			if !errors.Is(err, operation.ErrConflict) {
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
	var zero operation.Policy
	if zero.Persist || zero.Idem {
		t.Fatal("zero Policy is not volatile non-idem")
	}
	r := req("op-default-00001", zero)
	if err := e.mustOwn(r).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.state(r.OpID); st != operation.StateReleased {
		t.Fatalf("default policy after release: %s, want released", st)
	}
	if _, err := e.begin(r); !operation.IsIndeterminate(err) {
		t.Fatalf("default policy retry after release: %v, want indeterminate", err)
	}
}

func testPersistCrash(t *testing.T, e *env) {
	p := req("op-persist-crash", persistNonIdem)
	v := req("op-volatile-crash", volatileNonIdem)
	e.mustOwn(p)
	e.mustOwn(v)
	e.restart()
	if st := e.state(p.OpID); st != operation.StateIndeterminate {
		t.Fatalf("persist op after restart: %s, want indeterminate (never absent)", st)
	}
	if st := e.state(v.OpID); st != operation.StateReleased && st != operation.StateAbsent {
		t.Fatalf("volatile op after restart: %s, want released or absent", st)
	}
	if tk, err := e.begin(p); !operation.IsIndeterminate(err) {
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

func polName(p operation.Policy) string {
	s := "volatile-"
	if p.Persist {
		s = "persist-"
	}
	if p.Idem {
		return s + "idem"
	}
	return s + "nonidem"
}

func assertOutcome(t *testing.T, got, want operation.Outcome) {
	t.Helper()
	if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) || got.Failure != want.Failure ||
		!reflect.DeepEqual(map[string][]string(got.Header), map[string][]string(want.Header)) {
		t.Fatalf("outcome = %d %q failure=%v %v, want %d %q failure=%v %v",
			got.Status, got.Body, got.Failure, got.Header, want.Status, want.Body, want.Failure, want.Header)
	}
}
