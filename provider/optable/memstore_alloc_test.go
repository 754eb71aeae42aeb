package optable_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/optable"
)

// An admission and its seal allocate nothing per operation in the memory
// store (a chunk of records or a larger index now and then), so a table
// that admits new IDs all day does not feed the garbage collector one
// object per ID.
func TestMemoryStoreAdmitSealAllocatesNothingPerOperation(t *testing.T) {
	const runs = 4096
	store := optable.NewMemoryStore()
	ctx := context.Background()
	keys := make([]optable.Key, runs+1) // AllocsPerRun runs once more to warm up
	for i := range keys {
		keys[i] = optable.Key{Scope: "s", OpID: "op-" + strconv.Itoa(i)}
	}
	out := optable.Outcome{Status: 200, Body: []byte("{}")}
	now := time.Now()
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		k := keys[next]
		next++
		rec, owner, err := store.Admit(ctx, optable.Admission{Key: k, Method: "m", Fingerprint: "f", Token: 1, Now: now, ExpiresAt: now.Add(time.Hour)})
		if err != nil || !owner {
			t.Fatalf("admit %s: owner %v, %v", k, owner, err)
		}
		if _, err := store.Finish(ctx, k, rec.Gen, optable.Finish{To: optable.StateSealed, Outcome: out, ExpiresAt: now.Add(time.Hour), Now: now}); err != nil {
			t.Fatalf("seal %s: %v", k, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("admit+seal of a new ID: %v allocations per operation on average, want none", allocs)
	}
}

// Through a Table, an admission and its seal allocate the Ticket and
// nothing else per operation when the context cannot be cancelled.
func TestTableBeginSealAllocatesOnlyTheTicket(t *testing.T) {
	const runs = 4096
	table := optable.NewTable(optable.NewMemoryStore(), optable.TableOptions{})
	ctx := context.Background()
	reqs := make([]optable.Request, runs+1) // AllocsPerRun runs once more to warm up
	for i := range reqs {
		reqs[i] = optable.Request{Scope: "s", OpID: "op-" + strconv.Itoa(i), Method: "m", Fingerprint: "f"}
	}
	out := optable.Outcome{Status: 200, Body: []byte("{}")}
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		r := reqs[next]
		next++
		tk, err := table.Begin(ctx, r)
		if err != nil || !tk.Owner() {
			t.Fatalf("begin %s: %v", r.OpID, err)
		}
		if _, err := tk.Seal(ctx, out); err != nil {
			t.Fatalf("seal %s: %v", r.OpID, err)
		}
	})
	if allocs != 1 {
		t.Fatalf("begin+seal of a new ID: %v allocations per operation on average, want 1 (the ticket)", allocs)
	}
}
