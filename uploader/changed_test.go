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
// path (the pre-flight's size check and the sha256 verification) and other
// bytes of the same size on later opens (the send).
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

func TestBytesChangedAfterVerificationNeverReachTheProviderWhole(t *testing.T) {
	t.Parallel()
	f, hs := newFake(t, func(w http.ResponseWriter, r *http.Request, b fakeBatch) { answerAll(w, b, "accepted") })
	c := providertest.NewClient(t, "fw")
	c.AddTiles(t, "fw", 3, 1024, 16)
	u, _ := newUploader(t, hs.URL, c, func(o *uploader.HTTPOptions) {
		o.Blobs = &changingBlobs{root: c.Blobs.Root(), realOpens: 2, opens: map[string]int{}}
	})
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fw"})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.received()) != 0 || rep.Uploaded() != 0 {
		t.Fatalf("provider got %d complete batches, report %+v; want none", len(f.received()), rep)
	}
	if open := openBatches(t, c, "fw"); len(open) != 1 {
		t.Fatalf("open batches %d, want the aborted batch left for the next run to settle", len(open))
	}
}
