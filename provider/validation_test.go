package provider_test

import (
	"math/rand"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

func TestTilesAreValidatedOneByOne(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, func(c *provider.Config) {
		c.Limits.MaxTileBytes = 1000
		c.Faults.RejectTileIDs = []string{"t-0005"}
	})
	rng := rand.New(rand.NewSource(3))
	good := tileN(rng, 0)
	badSum := tileN(rng, 1)
	badSum.SHA256 = providertest.SHA256([]byte("other"))
	notImage := tileN(rng, 2)
	notImage.Data = []byte("GIF89a is not accepted here, nor is text")
	outside := tileN(rng, 3)
	outside.Z, outside.X = 3, 8
	big := tileN(rng, 4)
	big.Data = providertest.PNG(rng, 1001)
	listed := tileN(rng, 5)
	a := post(t, p, "f1", operation.NewID(), []rawTile{good, badSum, notImage, outside, big, listed})
	if a.Status != 200 {
		t.Fatalf("%d %s", a.Status, a.Body)
	}
	want := map[string]string{
		"t-0000": "accepted:", "t-0001": "rejected:checksum_mismatch", "t-0002": "rejected:decode_error",
		"t-0003": "rejected:out_of_bounds", "t-0004": "rejected:too_large", "t-0005": "rejected:decode_error",
	}
	got := a.results(t)
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: %q, want %q", id, got[id], w)
		}
	}
	if w := writes(t, p); len(w) != 1 || w["t-0000"] != 1 {
		t.Fatalf("stored %v, want only t-0000", w)
	}
}

func TestTransientRejectionsAreStorageBusy(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, func(c *provider.Config) { c.Faults.TransientRejectRate = 1 })
	rng := rand.New(rand.NewSource(4))
	a := post(t, p, "f1", operation.NewID(), []rawTile{tileN(rng, 0)})
	if got := a.results(t)["t-0000"]; got != "rejected:storage_busy" {
		t.Fatalf("got %q", got)
	}
}

func TestRequestsAreRefusedBeforeRunning(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, func(c *provider.Config) {
		c.Limits.MaxBatchTiles = 2
		c.Limits.MaxBatchBytes = 8000
		c.AllowedFlights = []string{"f1"}
	})
	rng := rand.New(rand.NewSource(5))
	three := []rawTile{tileN(rng, 0), tileN(rng, 1), tileN(rng, 2)}
	ct, body := batchBody(t, three[:1])
	url := p.URL + "/v1/flights/f1/tiles:batch"
	cases := []struct {
		name   string
		a      answer
		status int
		code   string
	}{
		{"no token", do(t, http.MethodPost, url, "", operation.NewID(), map[string]string{"Content-Type": ct}, body), 401, operation.CodeUnauthenticated},
		{"wrong token", do(t, http.MethodPost, url, "nope", operation.NewID(), map[string]string{"Content-Type": ct}, body), 401, operation.CodeUnauthenticated},
		{"flight not allowed", post(t, p, "f2", operation.NewID(), three[:1]), 403, operation.CodeForbidden},
		{"no key", do(t, http.MethodPost, url, providertest.Token, "", map[string]string{"Content-Type": ct}, body), 400, operation.CodeIdempotencyKeyMissing},
		{"too many tiles", post(t, p, "f1", operation.NewID(), three), 413, operation.CodeBatchTooLarge},
		{"too many bytes", post(t, p, "f1", operation.NewID(), []rawTile{{ID: "b", Z: 1, Data: providertest.PNG(rng, 9000)}}), 413, operation.CodeBatchTooLarge},
		{"not multipart", do(t, http.MethodPost, url, providertest.Token, operation.NewID(), map[string]string{"Content-Type": "application/json"}, []byte("{}")), 400, operation.CodeInvalidRequest},
	}
	for _, tc := range cases {
		if tc.a.Status != tc.status || tc.a.code() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, tc.a.Status, tc.a.Body, tc.status, tc.code)
		}
	}
	if len(writes(t, p)) != 0 {
		t.Fatalf("a refused request stored tiles")
	}
}

func TestMetricsCountRequestsTilesAndFaults(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, func(c *provider.Config) {
		c.Faults = provider.FaultConfig{Rate: 1, Kinds: []provider.FaultKind{provider.FaultStatus503}}
	})
	rng := rand.New(rand.NewSource(7))
	if a := post(t, p, "f1", operation.NewID(), []rawTile{tileN(rng, 0)}); a.Status != 503 || a.Header.Get("Retry-After") == "" {
		t.Fatalf("injected 503: %d %v", a.Status, a.Header)
	}
	m := string(do(t, http.MethodGet, p.URL+"/metrics", providertest.Token, "", nil, nil).Body)
	for _, want := range []string{
		`tileprovider_requests_total{route="tiles.batch",status="503"} 1`,
		`tileprovider_faults_injected_total{kind="status_503"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if l := p.Ledger(t); l.Faults[provider.FaultStatus503] != 1 || len(l.FaultOps) != 1 {
		t.Fatalf("ledger faults %v %v", l.Faults, l.FaultOps)
	}
}

func TestMetricsNeedTheToken(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, nil)
	for _, tok := range []string{"", "wrong-token"} {
		if a := do(t, http.MethodGet, p.URL+"/metrics", tok, "", nil, nil); a.Status != http.StatusUnauthorized {
			t.Errorf("/metrics with token %q: %d, want 401", tok, a.Status)
		}
	}
	if a := do(t, http.MethodGet, p.URL+"/metrics", providertest.Token, "", nil, nil); a.Status != http.StatusOK {
		t.Errorf("/metrics with the token: %d, want 200", a.Status)
	}
}

// After RestartFaults the requests meet the faults the first requests met,
// in the same order, so two uploads can be compared under the same faults:
// also when what the requests run differs (here the second round's are
// the first round's keys again, replayed, so no omit_results answer draws
// which result to leave out).
func TestRestartFaultsReplaysTheFaultsFromTheSeed(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, func(c *provider.Config) {
		c.Faults = provider.FaultConfig{Rate: 0.5, Seed: 3, Kinds: []provider.FaultKind{
			provider.FaultStatus429, provider.FaultOmitResults, provider.FaultStatus503, provider.FaultHTML502,
			provider.FaultProcessing409}}
	})
	rng := rand.New(rand.NewSource(8))
	var keys []string
	var tiles [][]rawTile
	for i := range 24 {
		keys, tiles = append(keys, operation.NewID()), append(tiles, []rawTile{tileN(rng, i), tileN(rng, 100+i)})
	}
	statuses := func() []int {
		var out []int
		for i := range keys {
			out = append(out, post(t, p, "f1", keys[i], tiles[i]).Status)
		}
		return out
	}
	first := statuses()
	drawn := p.Ledger(t).FaultOps
	p.Server.RestartFaults()
	again := statuses()
	redrawn := p.Ledger(t).FaultOps[len(drawn):]
	if !slices.Equal(redrawn, drawn) {
		t.Fatalf("faults after the restart %v, want the first ones again %v", redrawn, drawn)
	}
	if !slices.Equal(again, first) {
		t.Fatalf("statuses after the restart %v, want the first ones again %v", again, first)
	}
}
