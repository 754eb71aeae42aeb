package providertest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func postToSink(t *testing.T, s *Sink, key string, tiles []BatchTile) (int, http.Header, string) {
	t.Helper()
	var body bytes.Buffer
	ct, err := WriteBatch(&body, tiles)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/flights/f1/tiles:batch", &body)
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Authorization", "Bearer "+Token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestSinkChecksEveryPartAndReplaysAKeyByteForByte(t *testing.T) {
	s := StartSink(t)
	good, bad := []byte("good tile bytes"), []byte("bytes that lie")
	tiles := func() []BatchTile {
		return []BatchTile{
			{ID: "t1", Z: 1, Size: int64(len(good)), SHA256: SHA256(good), Body: bytes.NewReader(good)},
			{ID: "t2", Z: 1, Size: int64(len(bad)), SHA256: SHA256(good), Body: bytes.NewReader(bad)},
		}
	}
	const key = "key-0123456789abcdef"
	status, _, first := postToSink(t, s, key, tiles())
	if status != 200 || !strings.Contains(first, `{"tile_id":"t1","status":"accepted"}`) ||
		!strings.Contains(first, `"tile_id":"t2","status":"rejected","reason":"checksum_mismatch"`) {
		t.Fatalf("first answer %d %s: want t1 accepted, t2 rejected", status, first)
	}
	if s.Held() != 1 || s.BadParts.Load() != 1 {
		t.Errorf("held %d, bad parts %d; want 1 and 1", s.Held(), s.BadParts.Load())
	}
	status, h, again := postToSink(t, s, key, tiles())
	if status != 200 || again != first || h.Get("Idempotent-Replayed") != "true" {
		t.Errorf("resend: %d %q replayed=%q; want the first answer again, replayed", status, again, h.Get("Idempotent-Replayed"))
	}
	if status, _, body := postToSink(t, s, key, tiles()[:1]); status != 422 || !strings.Contains(body, "IDEMPOTENCY_CONFLICT") {
		t.Errorf("same key, other body: %d %s; want 422 IDEMPOTENCY_CONFLICT", status, body)
	}
	if status, _, body := postToSink(t, s, "key-fedcba9876543210", tiles()[:1]); status != 200 || !strings.Contains(body, `"status":"duplicate"`) {
		t.Errorf("new key, held tile: %d %s; want duplicate", status, body)
	}
}

// SetMaxBatchTiles changes what the sink advertises and what it takes: a
// batch over the limit is refused.
func TestSinkMaxBatchTiles(t *testing.T) {
	s := StartSink(t)
	s.SetMaxBatchTiles(2)
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/v1/capabilities", nil)
	req.Header.Set("Authorization", "Bearer "+Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	caps, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(caps), `"max_batch_tiles":2,`) {
		t.Fatalf("capabilities after SetMaxBatchTiles(2): %s", caps)
	}
	b := []byte("tile")
	tiles := func(n int) []BatchTile {
		var ts []BatchTile
		for i := range n {
			ts = append(ts, BatchTile{ID: fmt.Sprintf("t%d", i), Z: 1, Size: int64(len(b)), SHA256: SHA256(b), Body: bytes.NewReader(b)})
		}
		return ts
	}
	if code, _, body := postToSink(t, s, "key-0123456789abcdef-2", tiles(2)); code != http.StatusOK {
		t.Fatalf("a batch of 2 at limit 2: %d %s", code, body)
	}
	if code, _, body := postToSink(t, s, "key-0123456789abcdef-3", tiles(3)); code == http.StatusOK {
		t.Fatalf("a batch of 3 at limit 2 was taken: %s", body)
	}
}
