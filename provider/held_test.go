package provider_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

// sendCut sends a batch request whose body stops at cut bytes (of a
// declared whole), half-closes the connection and returns the status the
// provider answers: the batch's first execution is interrupted after the
// tiles whose parts arrived whole.
func sendCut(t *testing.T, url, flight, key, ct string, body []byte, cut int) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/flights/%s/tiles:batch HTTP/1.1\r\nHost: provider\r\nAuthorization: Bearer %s\r\n"+
		"Idempotency-Key: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", flight, providertest.Token, key, ct, len(body))
	if _, err := conn.Write(body[:cut]); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the answer to a cut-off batch: %v", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestATileTheProviderHoldsIsAnsweredDuplicateWhenItsBatchRunsAgain
// interrupts a batch after its first tile was stored, then sends it again
// under its key to a provider (over the same database and storage) that
// rejects every tile storage_busy: the execution that runs again answers
// the tile it holds duplicate, as the contract says a batch run again
// does, and the tile it does not hold rejected.
func TestATileTheProviderHoldsIsAnsweredDuplicateWhenItsBatchRunsAgain(t *testing.T) {
	t.Parallel()
	var cfg provider.Config
	p := providertest.Start(t, func(c *provider.Config) { cfg = *c })
	rng := rand.New(rand.NewSource(11))
	tiles := []rawTile{tileN(rng, 0), tileN(rng, 1)}
	ct, body := batchBody(t, tiles)
	key := operation.NewID()
	// Cut inside the second tile's bytes: the first part arrived whole.
	cut := bytes.Index(body, tiles[1].Data) + len(tiles[1].Data)/2
	if st := sendCut(t, p.URL, "f1", key, ct, body, cut); st != http.StatusServiceUnavailable {
		t.Fatalf("cut-off batch answered %d, want 503 (not sealed, to run again)", st)
	}
	if w := writes(t, p); len(w) != 1 || w["t-0000"] != 1 {
		t.Fatalf("after the interrupted execution the provider wrote %v, want t-0000 once", w)
	}

	busy := cfg
	busy.Faults = provider.FaultConfig{TransientRejectRate: 1}
	srv, err := provider.New(busy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	again := do(t, http.MethodPost, hs.URL+"/v1/flights/f1/tiles:batch", providertest.Token, key,
		map[string]string{"Content-Type": ct}, body)
	if again.Status != http.StatusOK {
		t.Fatalf("the batch run again answered %d %s", again.Status, again.Body)
	}
	if got := again.results(t); got["t-0000"] != "duplicate:" || got["t-0001"] != "rejected:storage_busy" {
		t.Errorf("run again under its key: %v, want t-0000 duplicate (held) and t-0001 rejected storage_busy", got)
	}
	// Under a new key too, a held tile is duplicate whatever the faults.
	other := do(t, http.MethodPost, hs.URL+"/v1/flights/f1/tiles:batch", providertest.Token, operation.NewID(),
		map[string]string{"Content-Type": ct}, body)
	if got := other.results(t); got["t-0000"] != "duplicate:" {
		t.Errorf("a new key: t-0000 answered %q, want duplicate (held)", got["t-0000"])
	}
	if w := writes(t, p); len(w) != 1 || w["t-0000"] != 1 {
		t.Errorf("the provider wrote %v, want t-0000 once and nothing else", w)
	}
}

// TestATileWhoseStoreAnswerWasLostIsAnsweredAsWhatHappened stores a tile
// whose record commits but whose commit's answer is lost (the database
// restarted between the two): the provider looks again instead of
// answering it storage_busy, and answers it accepted, as the write it
// made; its sealed answer agrees with what it wrote.
func TestATileWhoseStoreAnswerWasLostIsAnsweredAsWhatHappened(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, func(c *provider.Config) {
		c.Faults = provider.FaultConfig{LoseStoreAnswerTileIDs: []string{"t-0000"}}
	})
	rng := rand.New(rand.NewSource(12))
	ct, body := batchBody(t, []rawTile{tileN(rng, 0), tileN(rng, 1)})
	r := do(t, http.MethodPost, p.URL+"/v1/flights/f1/tiles:batch", providertest.Token, operation.NewID(),
		map[string]string{"Content-Type": ct}, body)
	if r.Status != http.StatusOK {
		t.Fatalf("batch answered %d %s", r.Status, r.Body)
	}
	if got := r.results(t); got["t-0000"] != "accepted:" || got["t-0001"] != "accepted:" {
		t.Errorf("results %v, want both accepted: t-0000's record committed, only its answer was lost", got)
	}
	if w := writes(t, p); len(w) != 2 || w["t-0000"] != 1 {
		t.Errorf("the provider wrote %v, want each tile once", w)
	}
}
