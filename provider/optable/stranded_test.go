package optable_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/optable"
)

// errConnLost stands for what pgx reports when the connection breaks
// after the database committed a statement and before its answer arrived
// (a `pg_ctl restart -m immediate`, a terminated backend).
var errConnLost = fmt.Errorf("read answer: %w", io.ErrUnexpectedEOF)

// losesAnswers is a real store whose next Admit (loseAdmit) or whose
// Finish calls (finishDown) take effect, or not, and report a lost
// connection: the database's answer never reaches the table.
type losesAnswers struct {
	optable.Store
	loseAdmit  atomic.Bool // the next Admit commits, then reports errConnLost
	finishDown atomic.Bool // every Finish reports errConnLost and changes nothing
}

func (s *losesAnswers) Admit(ctx context.Context, a optable.Admission) (optable.Record, bool, error) {
	rec, owner, err := s.Store.Admit(ctx, a)
	if s.loseAdmit.CompareAndSwap(true, false) {
		return optable.Record{}, false, errConnLost
	}
	return rec, owner, err
}

func (s *losesAnswers) Finish(ctx context.Context, k optable.Key, gen uint64, f optable.Finish) (optable.Record, error) {
	if s.finishDown.Load() {
		return optable.Record{}, errConnLost
	}
	return s.Store.Finish(ctx, k, gen, f)
}

// A database restart between an admission's commit and its answer left a
// record live that no request owned, in a provider that lived on: every
// resend of the key was 409 IDEMPOTENCY_PROCESSING, for good. The table
// recognises the admission it lost as its own and ends it, as a restart
// would: the resend runs the batch (persist, idem) and is answered.
func TestAnAdmissionWhoseAnswerWasLostDoesNotHoldTheKey(t *testing.T) {
	store := &losesAnswers{Store: optable.NewPGStore(newPGPool(t))}
	s := newMWServer(t, store, batchPolicy, -1)
	const key = "key-lost-admit-00001"

	store.loseAdmit.Store(true)
	if a := s.post(key, `{"n":1}`); a.status != http.StatusInternalServerError {
		t.Fatalf("attempt whose admission answer was lost: %d %s, want 500", a.status, a.body)
	}
	if n := s.runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for an attempt that owned nothing", n)
	}
	if l := s.logs.String(); !strings.Contains(l, `"op_id":"`+key+`"`) || !strings.Contains(l, "admitting the operation failed") {
		t.Errorf("the 500 for a failed admission left no log line naming the key; log:\n%s", l)
	}
	for i := 1; i <= 3; i++ {
		a := s.post(key, `{"n":1}`)
		if a.status == http.StatusOK {
			break
		}
		if i == 3 {
			t.Fatalf("resends of a key whose admission answer was lost are still %d %s; want the batch run and answered", a.status, a.body)
		}
	}
	if n := s.runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want once", n)
	}
	if a := s.post(key, `{"n":1}`); a.status != http.StatusOK || a.header.Get(operation.HeaderIdempotentReplayed) != "true" {
		t.Fatalf("after the run: %d replayed=%q, want the sealed answer replayed", a.status, a.header.Get(operation.HeaderIdempotentReplayed))
	}
}

// An owner that could not record its end (Abandon, after the store stayed
// unreachable past every retry) leaves a record live; once the store is
// back, the same table ends it at the next look, for a resend and for
// the state endpoint, or at its next GC, instead of answering "live" for
// good.
func TestAnOwnerThatCouldNotRecordItsEndDoesNotHoldTheKey(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		look func(t *testing.T, table *optable.Table, r optable.Request)
	}{
		{"resend", func(t *testing.T, table *optable.Table, r optable.Request) {
			tk, err := table.Begin(ctx, r)
			if err != nil || !tk.Owner() || tk.Record().Gen != 2 {
				t.Fatalf("resend after the stranded owner: %v (owner %v); want to own generation 2", err, err == nil && tk.Owner())
			}
		}},
		{"state", func(t *testing.T, table *optable.Table, r optable.Request) {
			st, _, err := table.Lookup(ctx, optable.Key{OpID: r.OpID})
			if err != nil || st != optable.StateIndeterminate {
				t.Fatalf("state after the stranded owner: %s %v; want indeterminate", st, err)
			}
		}},
		{"gc", func(t *testing.T, table *optable.Table, r optable.Request) {
			if _, err := table.GC(ctx); err != nil {
				t.Fatal(err)
			}
			rec, err := table.Store().Get(ctx, optable.Key{OpID: r.OpID})
			if err != nil || rec.State != optable.StateIndeterminate {
				t.Fatalf("record after GC: %s %v; want indeterminate", rec.State, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &losesAnswers{Store: optable.NewPGStore(newPGPool(t))}
			table := optable.NewTable(store, optable.TableOptions{})
			r := optable.Request{OpID: "key-stranded-" + tc.name, Method: "batch", Fingerprint: "fp", Policy: batchPolicy}
			tk, err := table.Begin(ctx, r)
			if err != nil || !tk.Owner() {
				t.Fatalf("first attempt: %v", err)
			}
			store.finishDown.Store(true)
			if err := tk.Abandon(ctx); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("Abandon with the store down: %v, want the store's error", err)
			}
			store.finishDown.Store(false)
			tc.look(t, table, r)
		})
	}
}
