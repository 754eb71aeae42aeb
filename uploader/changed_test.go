package uploader_test

import (
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/uploader"
)

// changingBlobs hands out the real file on the first realOpens opens of a
// path (the pre-flight's size check and the one verified read) and other
// bytes of the same size on later opens.
type changingBlobs struct {
	root      string
	realOpens int
	mu        sync.Mutex
	opens     map[string]int
}

func (c *changingBlobs) Open(rel string) (*os.File, error) {
	c.mu.Lock()
	c.opens[rel]++
	n := c.opens[rel]
	c.mu.Unlock()
	p := filepath.Join(c.root, rel)
	if n <= c.realOpens {
		return os.Open(p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	b[len(b)-1] ^= 0x55
	alt := p + ".changed"
	if err := os.WriteFile(alt, b, 0o600); err != nil {
		return nil, err
	}
	return os.Open(alt)
}

// TestBytesChangedAfterVerificationNeverReachTheProvider: each blob is read
// once (after the pre-flight's size check), verified against its recorded sha256 and sent from that read, so
// bytes that change on disk afterwards (every later open here returns
// other bytes of the same size) never reach the provider, and every tile
// the provider accepted carries exactly its recorded checksum.
func TestBytesChangedAfterVerificationNeverReachTheProvider(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	c := providertest.NewClient(t, "fw")
	tiles := c.AddTiles(t, "fw", 3, 1024, 16)
	blobs := &changingBlobs{root: c.Blobs.Root(), realOpens: 2, opens: map[string]int{}}
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.ClientOptions) { o.Blobs = blobs })
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fw"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Uploaded() != 3 {
		t.Fatalf("report %+v, want the 3 tiles uploaded from their one verified read", rep)
	}
	got := map[string]string{}
	for _, b := range f.received() {
		for id, data := range b.Bytes {
			got[id] = providertest.SHA256(data)
		}
	}
	for i, tl := range tiles {
		if got[tl.ID] != tl.SHA256 {
			t.Errorf("tile %s reached the provider with sha256 %s, recorded %s", tl.ID, got[tl.ID], tl.SHA256)
		}
		// The pre-flight opens the first tile's blob for its size, without
		// reading (it is there: the cache dir is right); the send reads
		// each once.
		want := 1
		if i == 0 {
			want = 2
		}
		if n := blobs.opens[tl.BlobPath]; n != want {
			t.Errorf("blob of %s opened %d times, want %d (pre-flight stat of the first, one read each)", tl.ID, n, want)
		}
	}
}
