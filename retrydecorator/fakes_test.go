package retrydecorator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/config"
	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// fakeInner is a TileUploader made of funcs.
type fakeInner struct {
	UploadFunc    func(ctx context.Context, req uploader.Request) (uploader.Report, error)
	EnumerateFunc func(ctx context.Context, flightID string) iter.Seq2[tilestore.Tile, error]
	ConfirmFunc   func(ctx context.Context, flightID string) error
	calls         int
}

func (f *fakeInner) UploadPendingTiles(ctx context.Context, req uploader.Request) (uploader.Report, error) {
	f.calls++
	return f.UploadFunc(ctx, req)
}

func (f *fakeInner) EnumeratePendingTiles(ctx context.Context, flightID string) iter.Seq2[tilestore.Tile, error] {
	return f.EnumerateFunc(ctx, flightID)
}

func (f *fakeInner) ConfirmFlightState(ctx context.Context, flightID string) error {
	return f.ConfirmFunc(ctx, flightID)
}

// memTile is one tile in memStore.
type memTile struct {
	status   tilestore.VotingStatus
	attempts int
	size     int64
	reason   string
	message  string
	giveups  int // give-up generation
}

// memStore models the tilestore semantics the decorator relies on:
// uncounted rejections, counting them in one all-or-nothing step, give-ups.
type memStore struct {
	mu         sync.Mutex
	flight     string
	tiles      map[string]*memTile
	uncounted  []tilestore.Rejection
	now        func() time.Time
	countCalls int
	// commitErr, if set, makes CountRejectionsUpTo fail after beforeCommit
	// succeeded, changing nothing: a commit that did not happen.
	commitErr error
}

func newMemStore(flight string, ids ...string) *memStore {
	s := &memStore{flight: flight, tiles: map[string]*memTile{}, now: func() time.Time { return t0 }}
	for _, id := range ids {
		s.tiles[id] = &memTile{status: tilestore.StatusPending, size: 100}
	}
	return s
}

func tileIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return ids
}

func (s *memStore) pending() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, t := range s.tiles {
		if t.status.Uploadable() {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

func (s *memStore) settle(opID string, uploaded []string, rejected map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range uploaded {
		s.tiles[id].status = tilestore.StatusUploaded
	}
	for id, reason := range rejected {
		s.uncounted = append(s.uncounted, tilestore.Rejection{OpID: opID, TileID: id, Reason: reason, Message: "msg " + id})
	}
}

func (s *memStore) tile(id string) memTile {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.tiles[id]
}

func (s *memStore) CountRejectionsUpTo(ctx context.Context, flightID string, maxAttempts, maxTiles int, after string,
	beforeCommit func(ctx context.Context, gaveUp []tilestore.GiveUp) error) (tilestore.CountResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.countCalls++
	if err := ctx.Err(); err != nil {
		return tilestore.CountResult{}, err
	}
	// The first maxTiles tiles after after, in tile ID order, with
	// uncounted rejections.
	var picked []string
	for _, r := range s.uncounted {
		if r.TileID > after && !slices.Contains(picked, r.TileID) {
			picked = append(picked, r.TileID)
		}
	}
	sort.Strings(picked)
	if maxTiles > 0 && len(picked) > maxTiles {
		picked = picked[:maxTiles]
	}
	var counting, left []tilestore.Rejection
	for _, r := range s.uncounted {
		if slices.Contains(picked, r.TileID) {
			counting = append(counting, r)
		} else {
			left = append(left, r)
		}
	}
	res := tilestore.CountResult{Attempts: map[string]int{}}
	next := map[string]memTile{}
	for _, r := range counting {
		t, ok := next[r.TileID]
		if !ok {
			t = *s.tiles[r.TileID]
		}
		t.attempts++
		t.reason, t.message = r.Reason, r.Message
		next[r.TileID] = t
		res.Counted++
	}
	ids := make([]string, 0, len(next))
	for id := range next {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		t := next[id]
		res.Attempts[id] = t.attempts
		res.Last = id
		if t.attempts >= maxAttempts && t.status.Uploadable() {
			t.status = tilestore.StatusUploadGiveup
			t.giveups++
			next[id] = t
			res.GaveUp = append(res.GaveUp, tilestore.GiveUp{TileID: id, FlightID: flightID,
				Attempts: t.attempts, LastReason: t.reason, LastMessage: t.message, GaveUpAt: s.now(),
				Generation: t.giveups})
		}
	}
	if len(res.GaveUp) > 0 && beforeCommit != nil {
		if err := beforeCommit(ctx, res.GaveUp); err != nil {
			return tilestore.CountResult{}, fmt.Errorf("before commit: %w", err)
		}
	}
	if s.commitErr != nil {
		err := s.commitErr
		s.commitErr = nil
		return tilestore.CountResult{}, err
	}
	for id, t := range next {
		*s.tiles[id] = t
	}
	s.uncounted = left
	return res, nil
}

func (s *memStore) PendingSummary(ctx context.Context, flightID string) (int, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, b := 0, int64(0)
	for _, t := range s.tiles {
		if t.status.Uploadable() {
			n++
			b += t.size
		}
	}
	return n, b, nil
}

// scriptedInner returns an inner uploader that, on call k (0-based), sends
// every pending tile of st and rejects those reject(k, id) names.
func scriptedInner(st *memStore, reject func(call int, id string) bool) *fakeInner {
	f := &fakeInner{}
	f.UploadFunc = func(ctx context.Context, req uploader.Request) (uploader.Report, error) {
		call := f.calls - 1
		rep := uploader.Report{FlightID: req.FlightID, Started: t0, Finished: t0}
		var ok []string
		rej := map[string]string{}
		for _, id := range st.pending() {
			rep.Bytes += 100
			if reject(call, id) {
				rej[id] = "invalid_tile"
				rep.Rejections = append(rep.Rejections, uploader.PerTileStatus{TileID: id,
					Status: uploader.TileRejected, Reason: "invalid_tile", OpID: fmt.Sprintf("op-%d", call)})
			} else {
				ok = append(ok, id)
			}
		}
		st.settle(fmt.Sprintf("op-%d", call), ok, rej)
		rep.Accepted, rep.Rejected, rep.Batches = len(ok), len(rej), 1
		rep.Outcome = uploader.OutcomeSuccess
		if len(rej) > 0 {
			rep.Outcome = uploader.OutcomePartial
		}
		rep.Pending = len(st.pending())
		return rep, nil
	}
	return f
}

// memRecorder is an FDR recorder that dedupes on Key like fdr.Recorder;
// a record is durable once its batch synced.
type memRecorder struct {
	mu         sync.Mutex
	records    []fdr.Record
	durable    []bool
	appends    int
	syncs      int
	AppendFunc func(ctx context.Context, e fdr.Entry) error // optional failure
}

var _ GiveUpRecorder = (*memRecorder)(nil)

func (r *memRecorder) Capacity() int64 { return fdr.DefaultCapacity }

func (r *memRecorder) Begin(ctx context.Context) (GiveUpBatch, error) {
	r.mu.Lock()
	return &memBatch{r: r, ctx: ctx}, nil
}

// memBatch holds memRecorder's lock, as fdr.Batch holds the ring's.
type memBatch struct {
	r        *memRecorder
	ctx      context.Context
	wrote    []int // indexes in r.records
	bytes    int64
	released bool
}

func (b *memBatch) Append(e fdr.Entry) (fdr.Record, error) {
	r := b.r
	r.appends++
	if r.AppendFunc != nil {
		if err := r.AppendFunc(b.ctx, e); err != nil {
			return fdr.Record{}, err
		}
	}
	for _, rec := range r.records {
		if e.Key != "" && rec.Key == e.Key {
			return rec, nil
		}
	}
	payload, err := json.Marshal(e.Payload)
	if err != nil {
		return fdr.Record{}, err
	}
	rec := fdr.Record{Seq: uint64(len(r.records) + 1), Kind: e.Kind, Key: e.Key, Time: t0, Payload: payload}
	b.wrote = append(b.wrote, len(r.records))
	b.bytes += int64(32 + len(e.Kind) + len(e.Key) + len(payload))
	r.records = append(r.records, rec)
	r.durable = append(r.durable, false)
	return rec, nil
}

func (b *memBatch) Sync() error {
	b.r.syncs++
	for _, i := range b.wrote {
		b.r.durable[i] = true
	}
	return nil
}

func (b *memBatch) Written() (int, int64) { return len(b.wrote), b.bytes }

func (b *memBatch) Release() {
	if !b.released {
		b.released = true
		b.r.mu.Unlock()
	}
}

// fakeClock records sleeps and advances time by them.
type fakeClock struct {
	mu        sync.Mutex
	now       time.Time
	sleeps    []time.Duration
	SleepFunc func(ctx context.Context, d time.Duration) error // optional
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	if c.SleepFunc != nil {
		if err := c.SleepFunc(ctx, d); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return nil
}

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// logBuf captures zerolog JSON lines.
type logBuf struct{ bytes.Buffer }

func (b *logBuf) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func (b *logBuf) withMessage(t *testing.T, level, substr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range b.lines(t) {
		if m["level"] == level && strings.Contains(fmt.Sprint(m["message"]), substr) {
			out = append(out, m)
		}
	}
	return out
}

// rig is one decorator with its fakes.
type rig struct {
	store *memStore
	inner *fakeInner
	rec   *memRecorder
	clock *fakeClock
	logs  *logBuf
	u     *Uploader
}

func newRig(t *testing.T, st *memStore, inner *fakeInner, cfg Config, hooks Hooks) *rig {
	t.Helper()
	r := &rig{store: st, inner: inner, rec: &memRecorder{}, clock: &fakeClock{now: t0}, logs: &logBuf{}}
	st.now = r.clock.Now
	r.u = New(inner, st, r.rec, zerolog.New(r.logs), r.clock, cfg, hooks)
	return r
}

var errBoom = errors.New("boom")

// defaultConfig is the decorator's configuration from config's defaults,
// the one place they are written down.
func defaultConfig() Config {
	r := config.Default(func(string) string { return "" }).Retry
	return Config{
		MaxInCallRetries:   r.MaxInCallRetries,
		MaxPerTileAttempts: r.MaxPerTileAttempts,
		BackoffBase:        r.BackoffBase,
		BackoffCap:         r.BackoffCap,
		Jitter:             operation.JitterKind(r.Jitter),
	}
}
