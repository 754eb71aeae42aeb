package uploader_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// storingAgainProvider follows provider-api.md but stores a tile again
// under every new key instead of answering duplicate (the contract does
// not forbid it), so a tile sent under two keys is seen stored twice. It
// answers GET /v1/flights/{f}/tiles/{t} from what it stored.
type storingAgainProvider struct {
	mu      sync.Mutex
	stores  map[string]int    // tile_id -> times stored
	sha     map[string]string // tile_id -> sha256 stored
	size    map[string]int    // tile_id -> size stored
	answers map[string][]byte // key -> sealed answer
	// lose, when set, is called with each new key and its tile IDs; it
	// returns how the answer is lost: "drop" (run and store, then cut the
	// connection), "omit:<tile>" (leave one tile out of the results), or "".
	lose    func(key string, ids []string) string
	expired map[string]bool // keys answered 422 IDEMPOTENCY_EXPIRED on resend
	lookups int
}

func newStoringAgain(t *testing.T) (*storingAgainProvider, *httptest.Server) {
	p := &storingAgainProvider{stores: map[string]int{}, sha: map[string]string{}, size: map[string]int{}, answers: map[string][]byte{}, expired: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/capabilities", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"api_version":"v1","max_batch_tiles":4,"max_batch_bytes":1048576,"max_tile_bytes":65536}`))
	})
	mux.HandleFunc("GET /v1/flights/{flight}/tiles/{tile}", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.lookups++
		id := r.PathValue("tile")
		sum, ok := p.sha[id]
		if !ok {
			operation.WriteError(w, http.StatusNotFound, operation.CodeTileNotFound, "no such tile", nil, nil)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"tile_id": id, "sha256": sum, "size": p.size[id], "received_at": "2026-11-22T10:00:00Z"})
	})
	mux.HandleFunc("POST /v1/flights/{flight}/tiles:batch", p.batch)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return p, hs
}

func (p *storingAgainProvider) batch(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	if p.expired[key] {
		p.mu.Unlock()
		operation.WriteError(w, http.StatusUnprocessableEntity, operation.CodeIdempotencyExpired, "key expired", nil, nil)
		return
	}
	if ans, ok := p.answers[key]; ok {
		p.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		_, _ = w.Write(ans)
		return
	}
	p.mu.Unlock()
	mr, err := r.MultipartReader()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ids []string
	sums := map[string]string{}
	sizes := map[string]int{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return
		}
		b, _ := io.ReadAll(part)
		if part.FormName() == "manifest" {
			continue
		}
		ids = append(ids, part.FormName())
		h := sha256.Sum256(b)
		sums[part.FormName()] = hex.EncodeToString(h[:])
		sizes[part.FormName()] = len(b)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	how := ""
	if p.lose != nil {
		how = p.lose(key, ids)
	}
	var res []map[string]string
	for _, id := range ids {
		p.stores[id]++
		p.sha[id], p.size[id] = sums[id], sizes[id]
		if how != "omit:"+id {
			res = append(res, map[string]string{"tile_id": id, "status": "accepted"})
		}
	}
	ans, _ := json.Marshal(map[string]any{"op_id": key, "results": res})
	p.answers[key] = ans
	if how == "drop" {
		p.expired[key] = true // by the next run the key is past retention
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(ans)
}

func (p *storingAgainProvider) storedTwice() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for id, n := range p.stores {
		if n > 1 {
			out = append(out, id)
		}
	}
	return out
}

// Issue 9 item 10: tiles whose batch could not be settled under its key
// (the answer lost, then the key expired; or the answer left a tile out)
// are looked up at the provider before they are sent again: those it holds
// with the same sha256 are marked uploaded, and none is stored twice.
func TestTileTheProviderHoldsIsNotSentAgainUnderANewKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lose func(p *storingAgainProvider) func(key string, ids []string) string
	}{
		{"answer lost then key expired", func(p *storingAgainProvider) func(string, []string) string {
			first := true
			return func(key string, ids []string) string {
				if first {
					first = false
					return "drop"
				}
				return ""
			}
		}},
		{"result omitted", func(p *storingAgainProvider) func(string, []string) string {
			first := true
			return func(key string, ids []string) string {
				if first {
					first = false
					return "omit:" + ids[0]
				}
				return ""
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, hs := newStoringAgain(t)
			p.lose = tc.lose(p)
			c := providertest.NewClient(t, "fd")
			c.AddTiles(t, "fd", 4, 256, 6) // one batch
			u, _ := newUploader(t, hs.URL, c, func(o *uploader.HTTPOptions) { o.MaxResends = 1 })
			for run := 1; run <= 3 && c.Counts(t, "fd")[tilestore.StatusUploaded] < 4; run++ {
				_, _ = u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fd", Concurrency: 1})
			}
			if twice := p.storedTwice(); len(twice) > 0 {
				t.Errorf("tiles stored twice under two keys: %s", strings.Join(twice, ", "))
			}
			if n := c.Counts(t, "fd")[tilestore.StatusUploaded]; n != 4 {
				t.Errorf("%d of 4 tiles uploaded", n)
			}
			if p.lookups == 0 {
				t.Errorf("the provider was never asked")
			}
		})
	}
}

// Issue 12 meets issue 9 item 10: run A's batch fails (its key expired)
// while run B works on the same flight. B's claims must not send A's tiles
// under a new key without asking the provider first: this provider stores a
// tile again under every new key. The next run asks, and marks them uploaded.
func TestATileAwaitingLookUpIsNeverClaimedByAnotherRun(t *testing.T) {
	t.Parallel()
	p, hs := newStoringAgain(t)
	c := providertest.NewClient(t, "fa")
	tiles := c.AddTiles(t, "fa", 8, 256, 7) // two batches of 4
	ctx := testCtx(t)
	a := c.Store.ForRun(tilestore.Run{ID: "run-a", Lease: time.Minute})
	ca, err := a.ClaimBatch(ctx, tilestore.Claim{FlightID: "fa", Limit: 4,
		Pick: func(cands []tilestore.Tile) (tilestore.Batch, []tilestore.Rejection) {
			b := tilestore.Batch{OpID: "op-run-a", Fingerprint: "fp-run-a"}
			for _, tl := range cands {
				b.TileIDs, b.SHA256s = append(b.TileIDs, tl.ID), append(b.SHA256s, tl.SHA256)
			}
			return b, nil
		}})
	if err != nil || len(ca.Tiles) != 4 {
		t.Fatalf("run A's claim: %+v %v", ca, err)
	}
	// A's send stored its tiles; its answer was lost.
	for _, tl := range ca.Tiles {
		p.stores[tl.ID], p.sha[tl.ID], p.size[tl.ID] = 1, tl.SHA256, int(tl.SizeBytes)
	}
	first := true
	p.lose = func(key string, ids []string) string {
		if first { // while B's first batch is on the wire, A's key expires
			first = false
			if err := a.FailBatch(ctx, ca.Batch.OpID, 422, "key expired"); err != nil {
				t.Errorf("fail run A's batch: %v", err)
			}
		}
		return ""
	}
	u, _ := newUploader(t, hs.URL, c, nil)
	if _, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fa", Concurrency: 1}); err != nil {
		t.Fatalf("run B: %v", err)
	}
	if twice := p.storedTwice(); len(twice) > 0 {
		t.Fatalf("run B sent run A's tiles under a new key unasked; stored twice: %s", strings.Join(twice, ", "))
	}
	if _, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: "fa", Concurrency: 1}); err != nil {
		t.Fatalf("the next run: %v", err)
	}
	if twice := p.storedTwice(); len(twice) > 0 {
		t.Errorf("tiles stored twice: %s", strings.Join(twice, ", "))
	}
	if n := c.Counts(t, "fa")[tilestore.StatusUploaded]; n != int64(len(tiles)) {
		t.Errorf("%d of %d tiles uploaded", n, len(tiles))
	}
}
