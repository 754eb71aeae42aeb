package uploader_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// TestMain doubles as the child process of the SIGKILL tests: with
// TILECTL_UPLOADER_CHILD=1 the test binary runs one upload and exits.
func TestMain(m *testing.M) {
	if os.Getenv("TILECTL_UPLOADER_CHILD") == "1" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// dyingStore kills its own process, as SIGKILL would, right after the
// n-th batch is journaled and before its first byte is sent.
type dyingStore struct {
	*tilestore.Store
	mu        sync.Mutex
	n, opened int
}

func (d *dyingStore) ClaimBatch(ctx context.Context, c tilestore.Claim) (tilestore.Claimed, error) {
	got, err := d.Store.ClaimBatch(ctx, c)
	if err == nil && got.Batch.OpID != "" {
		d.mu.Lock()
		d.opened++
		die := d.n > 0 && d.opened == d.n
		d.mu.Unlock()
		if die {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	return got, err
}

func childMain() int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	store, err := tilestore.Open(ctx, os.Getenv("CHILD_DB_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	defer store.Close()
	blobs, err := tilestore.NewBlobStore(os.Getenv("CHILD_BLOB_ROOT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	// A short lease: the next child settles what a killed one left open
	// once it has run out (the test waits that long between children).
	store = store.ForRun(tilestore.Run{Lease: childLease})
	dieAfter, _ := strconv.Atoi(os.Getenv("CHILD_DIE_AFTER_OPEN"))
	u, err := uploader.NewClient(uploader.ClientOptions{
		BaseURL: os.Getenv("CHILD_PROVIDER_URL"), Token: os.Getenv("CHILD_TOKEN"),
		Store: &dyingStore{Store: store, n: dieAfter}, Blobs: blobs,
		Logger:   zerolog.New(os.Stderr).Level(zerolog.WarnLevel),
		Sleep:    func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
		ClientID: os.Getenv("CHILD_CLIENT_ID"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	batch, conc := envInt("CHILD_BATCH_SIZE", 10), envInt("CHILD_CONCURRENCY", 2)
	rep, err := u.UploadPendingTiles(ctx, uploader.Request{FlightID: os.Getenv("CHILD_FLIGHT"), BatchSize: batch, Concurrency: conc})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	if os.Getenv("CHILD_REPORT_HWM") != "" {
		// The child's own high-water mark: rusage's Maxrss would include
		// the parent's memory the child shared before exec.
		st, _ := os.ReadFile("/proc/self/status")
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				fmt.Fprintf(os.Stderr, "vmhwm_kb=%s\n", strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			}
		}
	}
	if rep.Pending > 0 {
		return 4
	}
	return 0
}

// childLease is the children's batch lease.
const childLease = time.Second

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
