package uploader_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// hostileSequencer is a sequencing provider written by someone else,
// scripted per test: batch answers each batch request (with the
// Client-Sequence it carried), state answers GET /v1/clients/{id}/state,
// and every tile lookup is 404 (nothing held). After runaway batch
// requests it cancels the run, so a client that never stops fails the
// test instead of hanging it.
type hostileSequencer struct {
	*fakeProvider
	state    func(w http.ResponseWriter, client string)
	lookup   func(w http.ResponseWriter, tileID string) // nil: every tile 404
	runaway  int
	cancel   context.CancelFunc
	mu       sync.Mutex
	seqs     []uint64
	lookups  int
	stateGet int
}

func newHostileSequencer(t *testing.T, batch func(w http.ResponseWriter, b fakeBatch, seq uint64),
	state func(w http.ResponseWriter, client string)) (*hostileSequencer, string) {
	h := &hostileSequencer{state: state, runaway: 40}
	f := &fakeProvider{t: t, tileSeen: map[string]int{},
		caps: map[string]any{"api_version": "v1", "max_batch_tiles": 2, "max_batch_bytes": 1 << 20, "max_tile_bytes": 1 << 16}}
	f.answer = func(w http.ResponseWriter, r *http.Request, b fakeBatch) {
		n, _ := strconv.ParseUint(r.Header.Get(operation.HeaderClientSequence), 10, 64)
		h.mu.Lock()
		h.seqs = append(h.seqs, n)
		over := len(h.seqs) >= h.runaway
		h.mu.Unlock()
		if over && h.cancel != nil {
			h.cancel()
		}
		batch(w, b, n)
	}
	h.fakeProvider = f
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/capabilities", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f.caps)
	})
	mux.HandleFunc("POST /v1/flights/{flight}/tiles:batch", f.batch)
	mux.HandleFunc("GET /v1/clients/{client}/state", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.stateGet++
		h.mu.Unlock()
		h.state(w, r.PathValue("client"))
	})
	mux.HandleFunc("GET /v1/flights/{flight}/tiles/{tile}", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.lookups++
		h.mu.Unlock()
		if h.lookup != nil {
			h.lookup(w, r.PathValue("tile"))
			return
		}
		operation.WriteError(w, http.StatusNotFound, "TILE_NOT_FOUND", "no such tile", nil, nil)
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return h, hs.URL
}

// runHostile uploads a new flight of tiles 256-byte tiles (blobs from seed)
// as client drone-7 against the hostile sequencer h at url, in 2-tile
// batches, with edit's further options; h cancels the run if it runs away.
func runHostile(t *testing.T, h *hostileSequencer, url, flight string, tiles int, seed int64,
	edit func(*uploader.ClientOptions)) (*providertest.Client, uploader.Report, error) {
	t.Helper()
	c := providertest.NewClient(t, flight)
	c.AddTiles(t, flight, tiles, 256, seed)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	h.cancel = cancel
	u, _ := newUploader(t, url, c, func(o *uploader.ClientOptions) {
		o.ClientID = "drone-7"
		if edit != nil {
			edit(o)
		}
	})
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: flight, BatchSize: 2})
	return c, rep, err
}

func (h *hostileSequencer) sent() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]uint64(nil), h.seqs...)
}

func writeState(w http.ResponseWriter, client string, last uint64) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(operation.ClientStateResponse{ClientID: client, LastCommittedSequence: last})
}

func TestAProviderAnsweringAlreadyCommittedToEveryNewNumberEndsTheRunInsteadOfSendingForever(t *testing.T) {
	t.Parallel()
	// The provider says each number we take is already committed, and its
	// state follows (as if another client used our ID just before us).
	var mu sync.Mutex
	var last uint64
	h, url := newHostileSequencer(t, func(w http.ResponseWriter, _ fakeBatch, seq uint64) {
		mu.Lock()
		last = max(last, seq)
		mu.Unlock()
		operation.WriteError(w, http.StatusConflict, operation.CodeAlreadyCommitted, "committed, no longer cached", nil, nil)
	}, func(w http.ResponseWriter, client string) {
		mu.Lock()
		defer mu.Unlock()
		writeState(w, client, last)
	})
	c, rep, err := runHostile(t, h, url, "ha", 4, 21, nil)
	sent := h.sent()
	if len(sent) >= h.runaway {
		t.Fatalf("the run sent %d batches (numbers %v) and was still going when the test stopped it", len(sent), sent)
	}
	if len(sent) > 4 {
		t.Errorf("%d batches sent (numbers %v), want at most 4 before the run gives up", len(sent), sent)
	}
	var pe *uploader.ProviderError
	if !errors.As(err, &pe) || pe.Code != operation.CodeAlreadyCommitted || !strings.Contains(err.Error(), "drone-7") ||
		!strings.Contains(err.Error(), "another client") {
		t.Fatalf("run: %v; want an ALREADY_COMMITTED provider error naming client drone-7 and saying another client may use it", err)
	}
	if rep.Uploaded() != 0 || rep.Rejected != 0 {
		t.Errorf("report %+v: nothing is stored and nothing was rejected", rep)
	}
	if got := c.Counts(t, "ha")[tilestore.StatusUploaded]; got != 0 {
		t.Errorf("%d tiles marked uploaded, want none", got)
	}
}

func TestAClientStateWithNoNumberAfterItEndsTheRunBeforeJournalingABatch(t *testing.T) {
	t.Parallel()
	for _, last := range []uint64{1<<63 - 1, 1 << 63, 1<<64 - 1} {
		t.Run(strconv.FormatUint(last, 10), func(t *testing.T) {
			t.Parallel()
			h, url := newHostileSequencer(t, func(w http.ResponseWriter, b fakeBatch, _ uint64) {
				answerAll(w, b, "accepted")
			}, func(w http.ResponseWriter, client string) { writeState(w, client, last) })
			c, _, err := runHostile(t, h, url, "hn", 2, 22, nil)
			want := "client drone-7"
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), strconv.FormatUint(last, 10)) ||
				!strings.Contains(err.Error(), "another client ID") {
				t.Fatalf("run: %v; want an error naming %q, the provider's number and advising another client ID", err, want)
			}
			if s := h.sent(); len(s) != 0 {
				t.Errorf("batches sent with numbers %v", s)
			}
			if open := openBatches(t, c, "hn"); len(open) != 0 {
				t.Errorf("%d batches journaled, want none", len(open))
			}
		})
	}
}

func TestAClientStateEchoingTheTokenNeverPutsItInTheRunsError(t *testing.T) {
	t.Parallel()
	cases := map[string]func(w http.ResponseWriter, client string){
		"a 200 naming another client": func(w http.ResponseWriter, _ string) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"client_id":"you sent Bearer ` + providertest.Token + `","last_committed_sequence":0}`))
		},
		"a 401 quoting the token": func(w http.ResponseWriter, _ string) {
			operation.WriteError(w, http.StatusUnauthorized, operation.CodeUnauthenticated,
				"token "+providertest.Token+" may not read client state", nil, nil)
		},
	}
	for name, state := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, url := newHostileSequencer(t, func(w http.ResponseWriter, b fakeBatch, _ uint64) { answerAll(w, b, "accepted") }, state)
			_, _, err := runHostile(t, h, url, "ht", 2, 23, nil)
			if err == nil || !strings.Contains(err.Error(), "drone-7") {
				t.Fatalf("run: %v; want an error about client drone-7's state", err)
			}
			if strings.Contains(err.Error(), providertest.Token) {
				t.Errorf("the run's error holds the provider token: %v", err)
			}
		})
	}
}

func TestAProviderAnsweringSequenceGapForeverLeavesTheBatchOpenAfterThreeRebinds(t *testing.T) {
	t.Parallel()
	// Its state says 4 committed; its gap check refuses 5 all the same.
	h, url := newHostileSequencer(t, func(w http.ResponseWriter, _ fakeBatch, _ uint64) {
		operation.WriteError(w, http.StatusConflict, operation.CodeSequenceGap, "gap", nil,
			map[string]uint64{"last_committed_sequence": 4})
	}, func(w http.ResponseWriter, client string) { writeState(w, client, 4) })
	c, _, err := runHostile(t, h, url, "hg", 4, 24, nil)
	if s := h.sent(); len(s) != 4 || s[0] != 5 || s[3] != 5 {
		t.Errorf("numbers sent %v, want 5 four times (the first send and three rebinds)", s)
	}
	var pe *uploader.ProviderError
	if !errors.As(err, &pe) || pe.Code != operation.CodeSequenceGap || !strings.Contains(err.Error(), "drone-7") ||
		!strings.Contains(err.Error(), "next run") {
		t.Fatalf("run: %v; want a SEQUENCE_GAP provider error naming client drone-7 and saying the next run resends the batch", err)
	}
	open := openBatches(t, c, "hg")
	if len(open) != 1 || open[0].ClientSeq != 5 {
		t.Fatalf("open batches %+v, want the one batch, still bound to number 5", open)
	}
	if got := localLast(t, c, url, "drone-7"); got != 4 {
		t.Errorf("client's last committed %d, want 4", got)
	}
}

func TestAnotherOperationsAnswerNamingTheTokenNeverPutsItInTheLogOrTheJournal(t *testing.T) {
	t.Parallel()
	// Every batch is answered 200 for an "operation" whose ID quotes the
	// token: another batch's answer, as far as the client can tell.
	h, url := newHostileSequencer(t, func(w http.ResponseWriter, b fakeBatch, _ uint64) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		_ = json.NewEncoder(w).Encode(map[string]any{"op_id": "Bearer " + providertest.Token, "results": []any{}})
	}, func(w http.ResponseWriter, client string) { writeState(w, client, 0) })
	var logs strings.Builder // written through zerolog.SyncWriter, read after the run
	c, _, err := runHostile(t, h, url, "hl", 2, 25, func(o *uploader.ClientOptions) {
		o.Logger = zerolog.New(zerolog.SyncWriter(&logs)).Level(zerolog.DebugLevel)
	})
	var pe *uploader.ProviderError
	if !errors.As(err, &pe) || pe.Status != 200 || pe.Code != "" {
		t.Fatalf("run: %v; want the run to end after three numbers called committed, naming the 200 and no error code", err)
	}
	if !strings.Contains(logs.String(), "settling it by tile lookup") {
		t.Fatalf("the log does not show the batch settled by lookup:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), providertest.Token) {
		t.Errorf("the log holds the provider token:\n%s", logs.String())
	}
	if strings.Contains(err.Error(), providertest.Token) {
		t.Errorf("the run's error holds the provider token: %v", err)
	}
	var details int
	if err := c.Store.Pool().QueryRow(testCtx(t), `SELECT count(*) FROM upload_batches WHERE detail LIKE '%' || $1 || '%'`,
		providertest.Token).Scan(&details); err != nil || details != 0 {
		t.Errorf("%d journaled batch details hold the token (%v)", details, err)
	}
}

func TestAClientStateThatIsNotANumberEndsTheRunSayingWhatWasWrong(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, body, want string }{
		{"negative", `{"client_id":"drone-7","last_committed_sequence":-1}`, "last_committed_sequence is not a whole number"},
		{"a string", `{"client_id":"drone-7","last_committed_sequence":"7"}`, "last_committed_sequence is not a whole number"},
		{"a fraction", `{"client_id":"drone-7","last_committed_sequence":1.5}`, "last_committed_sequence is not a whole number"},
		{"another client", `{"client_id":"drone-8","last_committed_sequence":1}`, `names client "drone-8"`},
		{"not JSON", `<html>ok</html>`, "is not JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, url := newHostileSequencer(t, func(w http.ResponseWriter, b fakeBatch, _ uint64) { answerAll(w, b, "accepted") },
				func(w http.ResponseWriter, _ string) {
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(tc.body))
				})
			_, _, err := runHostile(t, h, url, "hs", 2, 26, func(o *uploader.ClientOptions) { o.MaxResends = 1 })
			if err == nil || !strings.Contains(err.Error(), "client drone-7") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run: %v; want an error about client drone-7's state saying %q", err, tc.want)
			}
			if s := h.sent(); len(s) != 0 {
				t.Errorf("batches sent with numbers %v", s)
			}
		})
	}
}

func TestBatchesWhoseAnswersAreLostPastTheProvidersCacheAreAllSettledByLookup(t *testing.T) {
	t.Parallel()
	// A provider with no outcome cache on a link that drops every answer:
	// each batch is stored and committed, its answer lost, and its resend
	// answered ALREADY_COMMITTED. Every number is this client's own: the
	// run settles each batch by lookup and goes on.
	var mu sync.Mutex
	var last uint64
	stored := map[string][]byte{}
	h, url := newHostileSequencer(t, func(w http.ResponseWriter, b fakeBatch, seq uint64) {
		if b.Attempt > 1 {
			operation.WriteError(w, http.StatusConflict, operation.CodeAlreadyCommitted, "committed, no longer cached", nil, nil)
			return
		}
		mu.Lock()
		for id, data := range b.Bytes {
			stored[id] = data
		}
		last = seq
		mu.Unlock()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // the answer is lost
		}
	}, func(w http.ResponseWriter, client string) {
		mu.Lock()
		defer mu.Unlock()
		writeState(w, client, last)
	})
	h.lookup = func(w http.ResponseWriter, id string) {
		mu.Lock()
		data, ok := stored[id]
		mu.Unlock()
		if !ok {
			operation.WriteError(w, http.StatusNotFound, "TILE_NOT_FOUND", "no such tile", nil, nil)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"tile_id": id, "sha256": providertest.SHA256(data), "size": len(data)})
	}
	c, rep, err := runHostile(t, h, url, "hd", 8, 27, nil)
	if err != nil || rep.Pending != 0 || rep.Uploaded() != 8 {
		t.Fatalf("run: %+v, %v; want all 8 settled by lookup", rep, err)
	}
	if s := h.sent(); len(s) != 8 || s[0] != 1 || s[7] != 4 {
		t.Errorf("numbers sent %v, want 1..4, each twice (the send whose answer was lost, its resend)", s)
	}
	if got := c.Counts(t, "hd")[tilestore.StatusUploaded]; got != 8 {
		t.Errorf("%d tiles marked uploaded, want 8", got)
	}
}
