package upload

import (
	"context"
	"testing"
	"time"

	"github.com/tilectl/tilectl/fdr"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/retrydecorator"
	"github.com/tilectl/tilectl/tilestore"
)

// The flight data recorder is a file of its own: it opens while the
// database connects, not after. The store's open here waits (up to a
// bound) for the recorder's open to begin.
func TestTheRecorderOpensWhileTheDatabaseConnects(t *testing.T) {
	r := newCmdRig(t)
	r.seed("F1", tilestore.FlightOnGround, 2)
	const bound = 10 * time.Second
	recorderOpening := make(chan struct{})
	waited := false
	res := r.run(func(o *Options) {
		store := o.Store
		o.Store = func(ctx context.Context) (*tilestore.Store, error) {
			select {
			case <-recorderOpening:
			case <-time.After(bound):
				waited = true
			}
			return store(ctx)
		}
		o.OpenFDR = func(ctx context.Context, path string, capacity int64) (GiveUpRecorder, error) {
			close(recorderOpening)
			rec, err := fdr.Open(ctx, path, fdr.Options{Capacity: capacity})
			if err != nil {
				return nil, err
			}
			return retrydecorator.RingRecorder{Recorder: rec}, nil
		}
	}, "--flight", "F1", "-o", "json")
	if res.code != exitcode.OK {
		t.Fatalf("exit %d: %v\n%s", res.code, res.err, res.stderr)
	}
	if waited {
		t.Fatalf("the store's open waited %v for the recorder's: the recorder opened only after the database", bound)
	}
}
