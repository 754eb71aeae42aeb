package provider_test

import (
	"encoding/json"
	"math/rand"
	"net/http"
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
