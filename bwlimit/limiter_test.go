package bwlimit

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock's Sleep moves its time on by the wait at once.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// sendFor takes as much as the limiter gives for d of the fake clock's
// time and returns the bytes per second it got.
func sendFor(t *testing.T, l *Limiter, c *fakeClock, d time.Duration) float64 {
	t.Helper()
	start := c.Now()
	var sent int64
	for c.Now().Sub(start) < d {
		n, err := l.Take(context.Background(), 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		sent += int64(n)
		if l.Current() == Off {
			return math.Inf(1)
		}
	}
	return float64(sent) / c.Now().Sub(start).Seconds()
}

func TestTheTimetableSwitchesWhileARunGoesOn(t *testing.T) {
	t.Parallel()
	tt, err := Parse("08:00,512k 18:00,2M 23:00,off")
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeClock{now: at(time.Tuesday, 7, 59)}
	l := New(tt, c)
	var switches []Rate
	l.OnSwitch = func(r Rate) { switches = append(switches, r) }
	if got := sendFor(t, l, c, time.Second); !math.IsInf(got, 1) {
		t.Fatalf("before 08:00 the limit is off, but sending was paced at %.0f B/s", got)
	}
	c.set(at(time.Tuesday, 8, 0))
	if got := l.Current(); got != 512<<10 {
		t.Fatalf("at 08:00 the limit in force is %s, want 512.0 KiB/s", got)
	}
	if got := sendFor(t, l, c, 10*time.Second); math.Abs(got/(512<<10)-1) > 0.01 {
		t.Fatalf("at 08:00 sent %.0f B/s, want 512 KiB/s", got)
	}
	c.set(at(time.Tuesday, 18, 0))
	if got := sendFor(t, l, c, 10*time.Second); math.Abs(got/(2<<20)-1) > 0.01 {
		t.Fatalf("at 18:00 sent %.0f B/s, want 2 MiB/s", got)
	}
	c.set(at(time.Tuesday, 23, 0))
	if got := sendFor(t, l, c, time.Second); !math.IsInf(got, 1) {
		t.Fatalf("at 23:00 the limit is off, but sending was paced at %.0f B/s", got)
	}
	if want := []Rate{512 << 10, 2 << 20, Off}; !slices.Equal(switches, want) {
		t.Fatalf("OnSwitch told %v, want each switch once: %v", switches, want)
	}
}

func TestToggleTurnsTheLimitOffAndOnAndWakesAWaiter(t *testing.T) {
	t.Parallel()
	tt, _ := Parse("100B") // a Take of the smallest chunk waits seconds
	l := New(tt, realClock{})
	got := make(chan error, 1)
	go func() {
		n, err := l.Take(context.Background(), 4096)
		if err == nil && n != 4096 {
			err = errors.New("a Take with the limit off did not grant all it asked")
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it wait
	if on := l.Toggle(); on {
		t.Fatal("the first Toggle left the limit on")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter slept on after the limit was toggled off")
	}
	if l.Current() != Off {
		t.Fatalf("limit in force %s after toggling off", l.Current())
	}
	if on := l.Toggle(); !on || l.Current() != 100 {
		t.Fatalf("second Toggle: on %v, limit %s, want on at 100 B/s", on, l.Current())
	}
}

func TestACancelledContextCutsAWait(t *testing.T) {
	t.Parallel()
	tt, _ := Parse("100B")
	l := New(tt, realClock{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := l.Take(ctx, 4096); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take = %v, want the deadline's error", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the wait went on %s past its deadline", took)
	}
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pacedBody is a request body that takes from a limiter before each read.
type pacedBody struct {
	ctx  context.Context
	l    *Limiter
	left int64
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	n, err := b.l.Take(b.ctx, int(min(int64(len(p)), b.left)))
	if err != nil {
		return 0, err
	}
	clear(p[:n])
	b.left -= int64(n)
	return n, nil
}

func TestConcurrentBodiesShareTheLimitFairlyOnALoopbackServer(t *testing.T) {
	t.Parallel()
	const bodies, limit, window = 4, 1 << 20, 4 * time.Second
	var received [bodies]atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(r.URL.Query().Get("i")[0] - '0')
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Body.Read(buf)
			received[i].Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	tt, _ := Parse("1M")
	l := New(tt, realClock{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range bodies {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"?i="+string(rune('0'+i)),
				&pacedBody{ctx: ctx, l: l, left: 1 << 30})
			req.ContentLength = 1 << 30
			if resp, err := srv.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	time.Sleep(time.Second) // every body under way
	var start [bodies]int64
	for i := range bodies {
		start[i] = received[i].Load()
	}
	time.Sleep(window)
	var got [bodies]int64
	var total int64
	for i := range bodies {
		got[i] = received[i].Load() - start[i]
		total += got[i]
	}
	cancel()
	wg.Wait()
	if rate := float64(total) / window.Seconds(); math.Abs(rate/limit-1) > 0.05 {
		t.Errorf("%d bodies together got %.0f B/s, want %d within 5%%", bodies, rate, limit)
	}
	for i, n := range got {
		if share := float64(n) / float64(total); math.Abs(share*bodies-1) > 0.1 {
			t.Errorf("body %d got %.1f%% of the bytes, want %.0f%% within a tenth: %v", i, 100*share, 100.0/bodies, got)
		}
	}
}
