package provider_test

import (
	"encoding/json"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

func TestStrictSequencingRefusesGaps(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, func(c *provider.Config) { c.StrictSequencing = true })
	rng := rand.New(rand.NewSource(6))
	url := p.URL + "/v1/flights/f1/tiles:batch"
	send := func(seq string, tiles []rawTile) answer {
		ct, body := batchBody(t, tiles)
		return do(t, http.MethodPost, url, providertest.Token, operation.NewID(),
			map[string]string{"Content-Type": ct, "Client-Id": "drone-7", "Client-Sequence": seq}, body)
	}
	if a := send("1", []rawTile{tileN(rng, 0)}); a.Status != 200 {
		t.Fatalf("seq 1: %d %s", a.Status, a.Body)
	}
	gap := send("3", []rawTile{tileN(rng, 1)})
	if gap.Status != 409 || gap.code() != operation.CodeSequenceGap {
		t.Fatalf("seq 3 after 1: %d %s", gap.Status, gap.Body)
	}
	st := do(t, http.MethodGet, p.URL+"/v1/clients/drone-7/state", providertest.Token, "", nil, nil)
	var cs operation.ClientStateResponse
	if err := json.Unmarshal(st.Body, &cs); err != nil || cs.LastCommittedSequence != 1 {
		t.Fatalf("client state: %d %s", st.Status, st.Body)
	}
	if w := writes(t, p); len(w) != 1 {
		t.Fatalf("the gapped batch stored tiles: %v", w)
	}
}

// A provider restarted over the same database has lost its outcome cache,
// not its sealed records: a committed batch resent under its key and
// number gets its stored outcome (docs/provider-api.md "Strict client
// sequencing (optional)"), another key with that number ALREADY_COMMITTED.
// Were both ALREADY_COMMITTED, a batch whose answer was lost could never
// be settled under its key (the chaos soak's seed 3912842808208168489
// reaches that case).
func TestStrictSequencingReplaysACommittedBatchAfterARestart(t *testing.T) {
	t.Parallel()
	var cfg provider.Config
	p := providertest.Start(t, func(c *provider.Config) { c.StrictSequencing = true; cfg = *c })
	rng := rand.New(rand.NewSource(7))
	ct, body := batchBody(t, []rawTile{tileN(rng, 0)})
	key := operation.NewID()
	send := func(url, key string) answer {
		return do(t, http.MethodPost, url+"/v1/flights/f1/tiles:batch", providertest.Token, key,
			map[string]string{"Content-Type": ct, "Client-Id": "drone-7", "Client-Sequence": "1"}, body)
	}
	first := send(p.URL, key)
	if first.Status != 200 {
		t.Fatalf("seq 1: %d %s", first.Status, first.Body)
	}
	restarted, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restarted.Close)
	hs := httptest.NewServer(restarted.Handler())
	t.Cleanup(hs.Close)
	again := send(hs.URL, key)
	if again.Status != 200 || string(again.Body) != string(first.Body) || again.Header.Get(operation.HeaderIdempotentReplayed) != "true" {
		t.Fatalf("resend after restart: %d %s, want the sealed answer %s replayed", again.Status, again.Body, first.Body)
	}
	if other := send(hs.URL, operation.NewID()); other.Status != 409 || other.code() != operation.CodeAlreadyCommitted {
		t.Fatalf("another key with the committed number: %d %s", other.Status, other.Body)
	}
}
