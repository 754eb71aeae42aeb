package optabletest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/optable"
)

var (
	volatileNonIdem = optable.Policy{}
	volatileIdem    = optable.Policy{Idem: true}
	persistNonIdem  = optable.Policy{Persist: true}
	persistIdem     = optable.Policy{Persist: true, Idem: true}
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
	{"retry.cancel.implicit.volatile", testCancelImplicitVolatile},
	{"retry.cancel.implicit.persist", testCancelImplicitPersist},
	{"retry.gc.ttl", testGCTTL},
	{"retry.gc.live-protected", testGCLiveProtected},
	{"retry.gc.fail-closed", testGCFailClosed},
	{"retry.outcome.indeterminate.distinct", testIndeterminateDistinct},
	{"retry.owner.fenced", testStaleOwnerFenced},
	{"table.admission.token", testAdmissionToken},
}

func testAbsent(t *testing.T, e *env) {
	if st := e.state("op-absent-000001"); st != optable.StateAbsent {
		t.Fatalf("state before admission = %s, want absent", st)
	}
	tk := e.mustOwn(req("op-absent-000001", volatileNonIdem))
	if rec := tk.Record(); rec.State != optable.StateLive || rec.Gen != 1 {
		t.Fatalf("admitted record = %s gen %d, want live gen 1", rec.State, rec.Gen)
	}
	if st := e.state("op-absent-000001"); st != optable.StateLive {
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
				case errors.Is(err, optable.ErrProcessing):
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
		if !errors.Is(err, optable.ErrProcessing) {
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
	results := make(chan *optable.Ticket, n)
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
	if rec.State != optable.StateSealed {
		t.Fatalf("after seal: %s", rec.State)
	}
	assertOutcome(t, e.mustReplay(r), want)
	if st := e.state(r.OpID); st != optable.StateSealed {
		t.Fatalf("state = %s, want sealed", st)
	}
}

func testTerminalReplay(t *testing.T, e *env) {
	for _, pol := range []optable.Policy{volatileNonIdem, volatileIdem, persistNonIdem, persistIdem} {
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
	for _, pol := range []optable.Policy{volatileNonIdem, volatileIdem, persistNonIdem, persistIdem} {
		r := req("op-absorb-"+polName(pol), pol)
		tk := e.mustOwn(r)
		want := outcome(200, `{"v":1}`, false)
		e.seal(tk, want)
		if _, err := tk.Seal(ctx, outcome(200, `{"v":2}`, false)); !errors.Is(err, optable.ErrNotOwner) {
			t.Fatalf("%s: second seal: %v, want ErrNotOwner", polName(pol), err)
		}
		if err := tk.Release(ctx); err != nil && !errors.Is(err, optable.ErrNotOwner) {
			t.Fatalf("%s: release after seal: %v", polName(pol), err)
		}
		if err := tk.Abandon(ctx); !errors.Is(err, optable.ErrNotOwner) {
			t.Fatalf("%s: abandon after seal: %v, want ErrNotOwner", polName(pol), err)
		}
		e.clock.Advance(time.Minute)
		if _, err := e.table.GC(ctx); err != nil {
			t.Fatal(err)
		}
		assertOutcome(t, e.mustReplay(r), want)
	}
	e.restart()
	for _, pol := range []optable.Policy{volatileNonIdem, volatileIdem, persistNonIdem, persistIdem} {
		assertOutcome(t, e.mustReplay(req("op-absorb-"+polName(pol), pol)), outcome(200, `{"v":1}`, false))
	}
}
