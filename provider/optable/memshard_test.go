package optable

import (
	"reflect"
	"strconv"
	"testing"
	"time"
)

// shardFixture drives one memShard with hashes the test picks, so keys can
// be made to collide.
type shardFixture struct {
	t   *testing.T
	sh  memShard
	now time.Time
}

func newShardFixture(t *testing.T) *shardFixture {
	f := &shardFixture{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.sh.init()
	return f
}

func (f *shardFixture) admit(h uint64, id string) Record {
	f.t.Helper()
	rec, owner := f.sh.admit(h, Admission{Key: Key{"s", id}, Method: "m", Fingerprint: "f",
		Policy: Policy{Idem: true}, Token: 1, Now: f.now, ExpiresAt: f.now.Add(time.Hour)})
	if !owner {
		f.t.Fatalf("admit %s: not the owner of %+v", id, rec)
	}
	return rec
}

func (f *shardFixture) finish(h uint64, id string, gen uint64, to State, out Outcome) Record {
	f.t.Helper()
	rec, err := f.sh.finish(h, Key{"s", id}, gen, Finish{To: to, Outcome: out, ExpiresAt: f.now.Add(time.Hour), Now: f.now})
	if err != nil {
		f.t.Fatalf("finish %s to %s: %v", id, to, err)
	}
	return rec
}

func (f *shardFixture) get(h uint64, id string) (Record, error) {
	return f.sh.get(h, Key{"s", id})
}

func body(id string) Outcome { return Outcome{Status: 200, Body: []byte("body of " + id)} }

// Keys whose hashes collide are told apart, deleted from any place in
// their chain, and carried through compaction, with a waiter's channel.
func TestMemShardCollidingHashes(t *testing.T) {
	f := newShardFixture(t)
	const h = 7
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = "op-" + strconv.Itoa(i)
		f.admit(h, ids[i])
	}
	// Every third stays Live, every third is sealed, every third released;
	// the sealed and released ones expire, in the middle, head and tail of
	// the chain.
	for i, id := range ids {
		switch i % 3 {
		case 1:
			f.finish(h, id, 1, StateSealed, body(id))
		case 2:
			f.finish(h, id, 1, StateReleased, Outcome{})
		}
	}
	waiting, done, err := f.sh.waitOn(h, Key{"s", ids[0]}, 1)
	if err != nil || done == nil {
		t.Fatalf("wait on live %s: %+v, %v", ids[0], waiting, err)
	}
	f.now = f.now.Add(2 * time.Hour)
	if n := f.sh.collect(f.now); n != 133 {
		t.Fatalf("collected %d records, want 133", n)
	}
	if f.sh.used != 67 || f.sh.dead != 0 {
		t.Fatalf("after collecting 133 of 200: %d slots used, %d dead; want the 67 live ones compacted", f.sh.used, f.sh.dead)
	}
	for i, id := range ids {
		rec, err := f.get(h, id)
		if i%3 != 0 {
			if err != ErrNotFound {
				t.Fatalf("%s after GC: %+v, %v; want ErrNotFound", id, rec, err)
			}
			continue
		}
		if err != nil || rec.Key.OpID != id || rec.State != StateLive {
			t.Fatalf("%s after GC: %+v, %v; want it live", id, rec, err)
		}
	}
	f.finish(h, ids[0], 1, StateSealed, body(ids[0]))
	select {
	case <-done:
	default:
		t.Fatal("the waiter on a record moved by compaction was not woken by its seal")
	}
	if rec, _ := f.get(h, ids[0]); rec.State != StateSealed || !reflect.DeepEqual(*rec.Outcome, body(ids[0])) {
		t.Fatalf("%s after its seal: %+v", ids[0], rec)
	}
	// A collected key is new again.
	if rec := f.admit(h, ids[1]); rec.Gen != 1 {
		t.Fatalf("readmitted %s: %+v, want generation 1", ids[1], rec)
	}
}

// An outcome handed out in a Record is shared, not copied: it must not
// change when its record is collected, the shard compacted, and new
// records sealed after it.
func TestMemShardHandedOutOutcomeNeverChanges(t *testing.T) {
	f := newShardFixture(t)
	held := make([]*Outcome, 0, 100)
	for i := range 100 {
		id := "old-" + strconv.Itoa(i)
		f.admit(uint64(i), id)
		held = append(held, f.finish(uint64(i), id, 1, StateSealed, body(id)).Outcome)
	}
	f.now = f.now.Add(2 * time.Hour)
	if n := f.sh.collect(f.now); n != 100 {
		t.Fatalf("collected %d, want 100", n)
	}
	if len(f.sh.chunks) != 0 {
		t.Fatalf("%d chunks left after every record was collected, want none", len(f.sh.chunks))
	}
	for i := range 100 {
		id := "new-" + strconv.Itoa(i)
		f.admit(uint64(i), id)
		f.finish(uint64(i), id, 1, StateSealed, Outcome{Status: 500, Body: []byte("other")})
	}
	for i, o := range held {
		if want := body("old-" + strconv.Itoa(i)); !reflect.DeepEqual(*o, want) {
			t.Fatalf("outcome %d changed under its holder: %+v, want %+v", i, *o, want)
		}
	}
}

// A shard whose records have all expired holds none of their outcomes
// once collected, however few they were: a provider whose traffic stops
// does not keep the last few thousand answers' bodies for good.
func TestMemShardKeepsNoOutcomeOnceEveryRecordIsCollected(t *testing.T) {
	f := newShardFixture(t)
	for i := range 10 {
		id := "op-" + strconv.Itoa(i)
		f.admit(uint64(i), id)
		f.finish(uint64(i), id, 1, StateSealed, body(id))
	}
	if n := f.sh.collect(f.now.Add(2 * time.Hour)); n != 10 {
		t.Fatalf("collected %d records, want 10", n)
	}
	if len(f.sh.chunks) != 0 || f.sh.used != 0 || len(f.sh.index) != 0 {
		t.Fatalf("after every record was collected the shard keeps %d chunks, %d slots, %d index entries; want none",
			len(f.sh.chunks), f.sh.used, len(f.sh.index))
	}
	f.admit(3, "op-3")
	if _, err := f.get(3, "op-3"); err != nil {
		t.Fatalf("a key admitted again after the collection: %v", err)
	}
}
