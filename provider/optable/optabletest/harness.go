// Package optabletest is the conformance suite every optable.Store
// passes (restic style: one suite, every backend). Each subtest is named
// after the seed-000 rule it proves; docs/conformance.md lists them.
package optabletest

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tilectl/tilectl/provider/optable"
)

// Harness opens stores for the suite.
type Harness struct {
	// New returns an empty store.
	New func(t *testing.T) optable.Store
	// Restart returns a store over the same durable state as s, as a new
	// process would open it, before Recover. For an in-process store this
	// is s itself: the owners died, the table survived.
	Restart func(t *testing.T, s optable.Store) optable.Store
}

// Clock is a settable clock for tables under test.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock starts a clock at a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Retention and margin of the tables the suite builds.
const (
	retention = time.Hour
	margin    = 30 * time.Minute
)

// env is one table under test.
type env struct {
	t     *testing.T
	h     Harness
	store optable.Store
	table *optable.Table
	clock *Clock
}

func newEnv(t *testing.T, h Harness) *env {
	t.Helper()
	e := &env{t: t, h: h, store: h.New(t), clock: NewClock()}
	e.table = e.newTable(e.store)
	return e
}

func (e *env) newTable(s optable.Store) *optable.Table {
	return optable.NewTable(s, optable.TableOptions{Retention: retention, GCMargin: margin, Now: e.clock.Now,
		IssuedAt: optable.UUIDv7IssuedAt})
}

// restart simulates a process restart: a new table over the restarted
// store, recovered before use.
func (e *env) restart() {
	e.t.Helper()
	e.store = e.h.Restart(e.t, e.store)
	e.table = e.newTable(e.store)
	if _, err := e.table.Recover(context.Background()); err != nil {
		e.t.Fatalf("recover: %v", err)
	}
}

func req(id string, pol optable.Policy) optable.Request {
	return optable.Request{Scope: "caller-a", OpID: id, Method: "upload", Fingerprint: "fp-1", Policy: pol}
}

func (e *env) begin(r optable.Request) (*optable.Ticket, error) {
	e.t.Helper()
	return e.table.Begin(context.Background(), r)
}

func (e *env) mustOwn(r optable.Request) *optable.Ticket {
	e.t.Helper()
	tk, err := e.begin(r)
	if err != nil {
		e.t.Fatalf("begin %s: %v, want owner", r.OpID, err)
	}
	if !tk.Owner() {
		e.t.Fatalf("begin %s: replay, want owner", r.OpID)
	}
	return tk
}

func (e *env) mustReplay(r optable.Request) optable.Outcome {
	e.t.Helper()
	tk, err := e.begin(r)
	if err != nil {
		e.t.Fatalf("begin %s: %v, want replay", r.OpID, err)
	}
	if tk.Owner() {
		e.t.Fatalf("begin %s: became owner, want replay", r.OpID)
	}
	return tk.Outcome()
}

func (e *env) seal(tk *optable.Ticket, out optable.Outcome) {
	e.t.Helper()
	if _, err := tk.Seal(context.Background(), out); err != nil {
		e.t.Fatalf("seal: %v", err)
	}
}

func (e *env) state(id string) optable.State {
	e.t.Helper()
	st, _, err := e.table.Lookup(context.Background(), optable.Key{Scope: "caller-a", OpID: id})
	if err != nil {
		e.t.Fatalf("lookup %s: %v", id, err)
	}
	return st
}

// UUIDv7At returns a UUIDv7 whose timestamp is at.
func UUIDv7At(at time.Time) string {
	u := uuid.Must(uuid.NewV7())
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(u[0:6], ms[2:8])
	return u.String()
}

func outcome(status int, body string, failure bool) optable.Outcome {
	return optable.Outcome{
		Status:  status,
		Header:  map[string][]string{"Content-Type": {"application/json"}, "X-Trace": {"a", "b"}},
		Body:    []byte(body),
		Failure: failure,
	}
}
