package uploader_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// meetingStore holds the run's first page of pending tiles until the run
// has also asked who holds the flight's open batches (or until its bound
// passes): it proves the two reads are in flight at once.
type meetingStore struct {
	*tilestore.Store
	once   sync.Once
	asked  chan struct{} // closed at the first Leases call
	bound  time.Duration
	missed chan struct{} // closed when the first page waited out its bound
}

func (s *meetingStore) Leases(ctx context.Context, flightID string) ([]tilestore.Lease, error) {
	s.once.Do(func() { close(s.asked) })
	return s.Store.Leases(ctx, flightID)
}

func (s *meetingStore) PendingUploads(ctx context.Context, flightID, afterTileID string, limit int) ([]tilestore.Tile, error) {
	if afterTileID == "" {
		select {
		case <-s.asked:
		case <-time.After(s.bound):
			select {
			case <-s.missed:
			default:
				close(s.missed)
			}
		}
	}
	return s.Store.PendingUploads(ctx, flightID, afterTileID, limit)
}

// The two reads a run makes before its first claim that depend on
// neither each other nor the provider's answer (the first page of pending
// tiles, for the pre-flight and the batches' size, and who holds the
// flight's open batches) are made at once, not one after the other.
func TestTheFirstPageAndTheHoldersAreReadAtOnce(t *testing.T) {
	p := providertest.Start(t, nil)
	const flight = "reads"
	c := providertest.NewClient(t, flight)
	c.AddTiles(t, flight, 3, 1<<10, 1)
	s := &meetingStore{Store: c.Store, asked: make(chan struct{}), missed: make(chan struct{}), bound: 10 * time.Second}
	u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) { o.Store = s })
	rep, err := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: flight})
	if err != nil || rep.Accepted != 3 {
		t.Fatalf("accepted %d of 3: %v", rep.Accepted, err)
	}
	select {
	case <-s.missed:
		t.Fatalf("the first page of pending tiles waited %v for the read of the flight's holders: they went one after the other", s.bound)
	default:
	}
}
