package provider_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"testing"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

type rawTile struct {
	ID     string
	Z      int
	X, Y   int64
	Data   []byte
	SHA256 string // default: of Data
	Size   int64  // default: len(Data)
}

func tileN(rng *rand.Rand, i int) rawTile {
	return rawTile{ID: fmt.Sprintf("t-%04d", i), Z: 10, X: int64(i), Y: 5, Data: providertest.PNG(rng, 600)}
}

func batchBody(t *testing.T, tiles []rawTile) (string, []byte) {
	t.Helper()
	bt := make([]providertest.BatchTile, len(tiles))
	for i, tl := range tiles {
		bt[i] = providertest.BatchTile{ID: tl.ID, Z: tl.Z, X: tl.X, Y: tl.Y, Size: tl.Size, SHA256: tl.SHA256,
			Body: bytes.NewReader(tl.Data)}
		if bt[i].SHA256 == "" {
			bt[i].SHA256 = providertest.SHA256(tl.Data)
		}
		if bt[i].Size == 0 {
			bt[i].Size = int64(len(tl.Data))
		}
	}
	var buf bytes.Buffer
	ct, err := providertest.WriteBatch(&buf, bt)
	if err != nil {
		t.Fatal(err)
	}
	return ct, buf.Bytes()
}

type answer struct {
	Status int
	Header http.Header
	Body   []byte
}

func (a answer) code() string {
	eb, _ := operation.ParseErrorBody(a.Body)
	return eb.Code()
}

func (a answer) results(t *testing.T) map[string]string {
	t.Helper()
	var r struct {
		Results []struct {
			TileID string `json:"tile_id"`
			Status string `json:"status"`
			Reason string `json:"reason"`
		} `json:"results"`
	}
	if err := json.Unmarshal(a.Body, &r); err != nil {
		t.Fatalf("answer %d %s: %v", a.Status, a.Body, err)
	}
	out := map[string]string{}
	for _, x := range r.Results {
		out[x.TileID] = x.Status + ":" + x.Reason
	}
	return out
}

func do(t *testing.T, method, url, token, key string, hdr map[string]string, body []byte) answer {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

func post(t *testing.T, p *providertest.Provider, flight, key string, tiles []rawTile) answer {
	t.Helper()
	ct, body := batchBody(t, tiles)
	return do(t, http.MethodPost, p.URL+"/v1/flights/"+flight+"/tiles:batch", providertest.Token, key,
		map[string]string{"Content-Type": ct}, body)
}

func writes(t *testing.T, p *providertest.Provider) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, tl := range p.Ledger(t).Tiles {
		out[tl.TileID] = tl.Writes
	}
	return out
}

var _ = provider.AllFaultKinds
