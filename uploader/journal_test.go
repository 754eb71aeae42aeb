package uploader_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// failingSendStore fails NoteSend from its n-th call on, as a database that
// went away between two attempts would.
type failingSendStore struct {
	*tilestore.Store
	n, calls int
}

func (s *failingSendStore) NoteSend(ctx context.Context, opID string) error {
	s.calls++
	if s.calls >= s.n {
		return errors.New("FATAL: terminating connection due to administrator command")
	}
	return s.Store.NoteSend(ctx, opID)
}

func TestJournalFailureBetweenAttemptsIsNotBlamedOnTheProvider(t *testing.T) {
	t.Parallel()
	_, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "try later", nil, nil)
	})
	c := providertest.NewClient(t, "fj")
	c.AddTiles(t, "fj", 4, 512, 5)
	store := &failingSendStore{Store: c.Store, n: 2}
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Store = store })
	_, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fj", Concurrency: 1})
	if err == nil {
		t.Fatal("run succeeded though the journal failed")
	}
	var pe *uploader.ProviderError
	if errors.As(err, &pe) {
		t.Fatalf("a journal failure was reported as the provider's: %v", err)
	}
	if !strings.Contains(err.Error(), "upload journal") || !strings.Contains(err.Error(), "administrator command") {
		t.Fatalf("error %q does not say the journal failed and why", err)
	}
	if open := openBatches(t, c, "fj"); len(open) != 1 {
		t.Fatalf("open batches = %d, want the batch left open for the next run", len(open))
	}
}

// syncCountingStore counts SyncJournal calls and what was settled before.
// Workers settle at once: the counts are under mu.
type syncCountingStore struct {
	*tilestore.Store
	mu                                sync.Mutex
	settles, syncs, settlesAtLastSync int
}

func (s *syncCountingStore) SettleBatch(ctx context.Context, st tilestore.Settlement) error {
	s.mu.Lock()
	s.settles++
	s.mu.Unlock()
	return s.Store.SettleBatch(ctx, st)
}

func (s *syncCountingStore) SyncJournal(ctx context.Context, flightID string) error {
	s.mu.Lock()
	s.syncs++
	s.settlesAtLastSync = s.settles
	s.mu.Unlock()
	return s.Store.SyncJournal(ctx, flightID)
}

// Settlements commit without waiting for the disk, so a run must end with a
// durable write after its last settlement before it reports tiles uploaded.
func TestEveryRunEndsWithTheJournalMadeDurable(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	c := providertest.NewClient(t, "fd")
	c.AddTiles(t, "fd", 9, 512, 6)
	store := &syncCountingStore{Store: c.Store}
	u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) { o.Store = store })
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fd", BatchSize: 4, Concurrency: 2})
	if err != nil || rep.Uploaded() != 9 {
		t.Fatalf("run: %+v, %v", rep, err)
	}
	if store.settles != 3 || store.syncs != 1 || store.settlesAtLastSync != store.settles {
		t.Fatalf("settles %d, syncs %d (after %d settles); want 3 settles then one sync after all of them",
			store.settles, store.syncs, store.settlesAtLastSync)
	}
}

// noteCountingStore counts NoteSend calls.
type noteCountingStore struct {
	*tilestore.Store
	notes atomic.Int32
}

func (s *noteCountingStore) NoteSend(ctx context.Context, opID string) error {
	s.notes.Add(1)
	return s.Store.NoteSend(ctx, opID)
}

// A batch goes on the wire right after its claim commits: the claim counts
// its first send in the journal, and no other round trip to the database
// comes between. A resend is noted (and checked: still open, still this
// run's) before it goes, and counted: the journal counts every POST.
func TestAFreshBatchGoesWithoutNotingItsFirstSendAndEveryResendIsNoted(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	var mu sync.Mutex
	posts := map[string]int{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			key := r.Header.Get("Idempotency-Key")
			mu.Lock()
			posts[key]++
			n := posts[key]
			mu.Unlock()
			if n == 1 && len(posts)%2 == 0 {
				// Every second batch is refused once and resent.
				operation.WriteError(w, http.StatusServiceUnavailable, operation.CodeUnavailable, "try later", nil, nil)
				return
			}
		}
		p.Server.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	c := providertest.NewClient(t, "fn")
	c.AddTiles(t, "fn", 16, 512, 6)
	store := &noteCountingStore{Store: c.Store}
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Store = store })
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fn", BatchSize: 4, Concurrency: 1})
	if err != nil || rep.Uploaded() != 16 {
		t.Fatalf("run: %+v, %v", rep, err)
	}
	rows, err := c.Store.Pool().Query(context.Background(), `SELECT op_id, sends FROM upload_batches`)
	if err != nil {
		t.Fatal(err)
	}
	journaled := map[string]int{}
	for rows.Next() {
		var op string
		var n int
		if err := rows.Scan(&op, &n); err != nil {
			t.Fatal(err)
		}
		journaled[op] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	resends := 0
	for key, n := range posts {
		resends += n - 1
		if journaled[key] != n {
			t.Errorf("batch %s: the provider got %d POSTs, the journal counts %d sends", key, n, journaled[key])
		}
	}
	if len(posts) != 4 || resends != 2 {
		t.Fatalf("posts %v: want 4 batches, 2 of them resent once", posts)
	}
	if got := store.notes.Load(); got != int32(resends) {
		t.Errorf("NoteSend was called %d times for %d first sends and %d resends; want once per resend only",
			got, len(posts), resends)
	}
}
