package upload

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/schollz/progressbar/v3"

	"github.com/tilectl/tilectl/internal/metricsfile"
	"github.com/tilectl/tilectl/retrydecorator"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// progressLogEvery is how often progress is logged when stderr is not a
// terminal.
const progressLogEvery = 5 * time.Second

// progress follows one flight's upload: a bar on a terminal, periodic INFO
// lines otherwise. Its methods are safe for concurrent use (batches settle
// on several goroutines).
type progress struct {
	flightID   string
	totalTiles int
	totalBytes int64
	metrics    *metricsfile.Metrics

	tiles, retries, giveups atomic.Int64
	bytes                   atomic.Int64

	bar  *progressbar.ProgressBar
	log  zerolog.Logger
	stop func()
	done chan struct{}
	wg   sync.WaitGroup
}

func newProgress(flightID string, tiles int, bytes int64, tty bool, errOut io.Writer, log zerolog.Logger,
	ticker func(time.Duration) (<-chan time.Time, func()), m *metricsfile.Metrics) *progress {
	p := &progress{flightID: flightID, totalTiles: tiles, totalBytes: bytes, metrics: m, log: log, done: make(chan struct{})}
	if tty {
		p.bar = progressbar.NewOptions64(max(bytes, 1),
			progressbar.OptionSetWriter(errOut),
			progressbar.OptionShowBytes(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetDescription(p.describe()),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		return p
	}
	c, stop := ticker(progressLogEvery)
	p.stop = stop
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-p.done:
				return
			case <-c:
				p.logLine()
			}
		}
	}()
	return p
}

func (p *progress) describe() string {
	return fmt.Sprintf("%s: %d/%d tiles, %d retries, %d given up",
		p.flightID, p.tiles.Load(), p.totalTiles, p.retries.Load(), p.giveups.Load())
}

func (p *progress) logLine() {
	p.log.Info().Str("flight_id", p.flightID).
		Int64("tiles_done", p.tiles.Load()).Int("tiles_total", p.totalTiles).
		Int64("bytes_done", p.bytes.Load()).Int64("bytes_total", p.totalBytes).
		Int64("retries", p.retries.Load()).Int64("given_up", p.giveups.Load()).
		Msg("upload progress")
}

// batch is the uploader's Request.Progress. Only uploaded tiles advance the
// bar, so a retried tile is counted once, when it finally goes through.
func (p *progress) batch(b uploader.BatchProgress) {
	if b.Latency > 0 {
		p.metrics.ObserveBatch(b.Latency)
	}
	if b.Uploaded == 0 {
		return
	}
	p.tiles.Add(int64(b.Uploaded))
	var done int64
	if b.Tiles > 0 {
		done = b.Bytes * int64(b.Uploaded) / int64(b.Tiles)
	}
	p.bytes.Add(done)
	if p.bar != nil {
		p.bar.Describe(p.describe())
		_ = p.bar.Add64(done)
	}
}

func (p *progress) hooks() retrydecorator.Hooks {
	return retrydecorator.Hooks{
		OnRetry: func(retrydecorator.RetryEvent) {
			p.retries.Add(1)
			if p.bar != nil {
				p.bar.Describe(p.describe())
			}
		},
		OnGiveUp: func(tilestore.GiveUp) {
			p.giveups.Add(1)
			if p.bar != nil {
				p.bar.Describe(p.describe())
			}
		},
	}
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		return
	}
	close(p.done)
	p.stop()
	p.wg.Wait()
}
