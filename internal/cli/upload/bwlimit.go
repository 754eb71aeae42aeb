package upload

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"

	"github.com/tilectl/tilectl/bwlimit"
	"github.com/tilectl/tilectl/uploader"
)

// newLimiter is the run's bandwidth limit, one for the whole process: every
// batch of every flight shares it. upload.bwlimit was checked by
// config.Validate.
func (r *run) newLimiter() error {
	tt, err := bwlimit.Parse(r.cfg.Upload.BWLimit)
	if err != nil {
		return fmt.Errorf("upload.bwlimit (from %s): %w", r.cfg.Source("upload.bwlimit"), err)
	}
	r.limiter = bwlimit.New(tt, r.opts.Clock)
	r.limiter.OnSwitch = func(rate bwlimit.Rate) {
		r.log.Info().Str("bwlimit", rate.String()).Msgf("bandwidth limit now %s, as the upload.bwlimit timetable says (from %s)",
			rate, r.cfg.Source("upload.bwlimit"))
	}
	r.sent = &sentCounter{limit: r.limiter}
	if tt.Limited() {
		r.log.Info().Str("bwlimit", tt.String()).Str("in_force", r.limiter.Current().String()).
			Msg("bandwidth limit set (per process; SIGUSR2 toggles it off and on)")
	}
	return nil
}

// sentCounter is the uploader's Pace: the run's limiter, and a count of
// the body bytes it let through (the batch bodies put on the wire, resends
// included), from which the progress display takes the rate and the ETA.
type sentCounter struct {
	limit *bwlimit.Limiter
	n     atomic.Int64
}

var _ uploader.BodyLimiter = (*sentCounter)(nil)

// Take is the limiter's Take (at once when no limit is in force), counted.
func (s *sentCounter) Take(ctx context.Context, want int) (int, error) {
	n, err := s.limit.Take(ctx, want)
	s.n.Add(int64(n))
	return n, err
}

func (s *sentCounter) sent() int64 { return s.n.Load() }

// watchToggle toggles the bandwidth limit on each SIGUSR2 (as rclone does)
// until stop. The handler is installed whether or not a limit is set, so
// the signal never ends the run.
func (r *run) watchToggle(ctx context.Context) (stop func()) {
	ch := make(chan os.Signal, 1)
	notifyToggle(ch)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-ch:
				r.toggleLimit()
			}
		}
	})
	return func() {
		signal.Stop(ch)
		close(done)
		wg.Wait()
	}
}

func (r *run) toggleLimit() {
	if !r.limiter.Configured() {
		r.log.Info().Msg("SIGUSR2: no bandwidth limit is set (--bwlimit, upload.bwlimit), so there is none to toggle")
		return
	}
	if r.limiter.Toggle() {
		r.log.Info().Str("bwlimit", r.limiter.Current().String()).Msg("SIGUSR2: bandwidth limit back on")
	} else {
		r.log.Info().Str("bwlimit", "off").Msgf("SIGUSR2: bandwidth limit off until the next SIGUSR2 (configured: %s)", r.limiter.Timetable())
	}
	if p := r.progress.Load(); p != nil {
		p.redraw()
	}
}
