package uploader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// This file decides which of a flight's remaining work other runs hold,
// by whom and until when (tiles in other runs' open batches, while those
// runs are alive or their leases last), and waits for it. Whether a call
// ends for it is Report.Blocked's decision (wait.go).

// holdPoll is how often a run waiting for other runs' batches looks again:
// a holder settles its batches without telling anyone.
const holdPoll = time.Second

// RunLiveness proves, on this machine, whether another run is alive.
// *tilestore.RunLocks implements it (a per-run flock).
type RunLiveness interface {
	State(runID string) (tilestore.RunState, error)
}

// LeaseLister lists who holds a flight's open batches. *tilestore.Store
// implements it.
type LeaseLister interface {
	Leases(ctx context.Context, flightID string) ([]tilestore.Lease, error)
}

// Holder is another run holding open batches of the flight: their tiles
// are its to send while it lives and its lease lasts.
type Holder struct {
	RunID     string    `json:"run_id"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	Tiles     int       `json:"tiles"`
	LeaseEnds time.Time `json:"lease_ends"`
}

// Held is the part of a flight's remaining work this run may not do
// now, and who holds it.
type Held struct {
	Tiles   int      // tiles in the holders' open batches
	Holders []Holder // by lease end, earliest first
	// Until is the first time some of the work may become this run's: the
	// earliest lease end (sooner if a holder on this machine dies), or, for
	// a holder whose every batch waits for the provider's advised time, the
	// later of its lease end and the first of those times.
	Until time.Time
}

// String names the work and its first holder, for the status line and
// the log: "120 tiles held by run 3f9c... (ground-1, pid 4242) until
// 21:04:05" (local time), with "and N other runs" when there are more.
func (b Held) String() string {
	if len(b.Holders) == 0 {
		return fmt.Sprintf("%d tiles held by other runs", b.Tiles)
	}
	h := b.Holders[0]
	s := fmt.Sprintf("%d tiles held by run %s (%s, pid %d) until %s", b.Tiles, h.RunID, h.Host, h.PID,
		b.Until.Local().Format("15:04:05"))
	switch n := len(b.Holders) - 1; {
	case n == 1:
		s += " and 1 other run"
	case n > 1:
		s += fmt.Sprintf(" and %d other runs", n)
	}
	return s
}

// holding is one look at who holds a flight's open batches.
type holding struct {
	Held
	// parked is held work no run may send before the caller's deadline:
	// holders whose every batch waits for the provider's advised time past
	// it. It is reported, but not waited for.
	parked    Held
	dead      []string // holders of this machine proven dead: adoptable now
	adoptable bool     // some open batch is not held by a live run (dead, lease ended, or none)
	// unproven is the first liveness check that failed: that holder's
	// lease decided instead.
	unproven error
}

// all is the held work, waited for or parked.
func (h holding) all() Held {
	if h.parked.Tiles == 0 {
		return h.Held
	}
	a := Held{Tiles: h.Tiles + h.parked.Tiles, Holders: slices.Concat(h.Holders, h.parked.Holders), Until: h.Until}
	slices.SortStableFunc(a.Holders, func(a, b Holder) int { return a.LeaseEnds.Compare(b.LeaseEnds) })
	if a.Until.IsZero() || h.parked.Until.Before(a.Until) {
		a.Until = h.parked.Until
	}
	return a
}

// HeldWork reads who holds the flight's open batches besides run self:
// live holders (their work is Held), and the runs self may take over
// now (dead: runs of self's host whose lock liveness finds free).
// liveness may be nil: then only leases decide, as they do for a run
// whose liveness check fails.
func HeldWork(ctx context.Context, leases LeaseLister, liveness RunLiveness, self tilestore.Run, flightID string) (Held, []string, error) {
	h, err := heldWork(ctx, leases, liveness, self, flightID)
	return h.all(), h.dead, err
}

func heldWork(ctx context.Context, leases LeaseLister, liveness RunLiveness, self tilestore.Run, flightID string) (holding, error) {
	ls, err := leases.Leases(ctx, flightID)
	if err != nil {
		return holding{}, fmt.Errorf("list who holds the open batches of flight %s: %w", flightID, err)
	}
	var h holding
	for _, l := range ls {
		if l.RunID == self.ID {
			continue
		}
		if l.RunID == "" || l.Expired || l.ExpiresAt == nil {
			h.adoptable = true
			continue
		}
		if liveness != nil && l.Host == self.Host {
			// A run of this machine: its lock proves it alive or dead at
			// once; without a lock file nothing is proven and its lease
			// decides.
			st, err := liveness.State(l.RunID)
			if err != nil && h.unproven == nil {
				// Another user's lock file, a filesystem without flock:
				// nothing is proven, and the lease decides, as for a run
				// on another machine.
				h.unproven = fmt.Errorf("check whether run %s (pid %d) is alive: %w", l.RunID, l.PID, err)
			}
			if err == nil && st == tilestore.RunDead {
				h.dead = append(h.dead, l.RunID)
				h.adoptable = true
				continue
			}
		}
		holder := Holder{RunID: l.RunID, Host: l.Host, PID: l.PID, Tiles: l.Tiles, LeaseEnds: *l.ExpiresAt}
		if dl, ok := ctx.Deadline(); ok && l.WaitingTiles == l.Tiles && l.WaitingUntil != nil && l.WaitingUntil.After(dl) {
			// None of it may go before the deadline, whoever holds it.
			h.parked.Tiles += l.Tiles
			h.parked.Holders = append(h.parked.Holders, holder)
			if free := later(holder.LeaseEnds, *l.WaitingUntil); h.parked.Until.IsZero() || free.Before(h.parked.Until) {
				h.parked.Until = free
			}
			continue
		}
		h.Tiles += l.Tiles
		h.Holders = append(h.Holders, holder)
	}
	slices.SortStableFunc(h.Holders, func(a, b Holder) int { return a.LeaseEnds.Compare(b.LeaseEnds) })
	if len(h.Holders) > 0 {
		h.Until = h.Holders[0].LeaseEnds
	}
	return h, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// heldWork is heldWork for this run, saying once per uploader that a
// liveness check failed.
func (u *Client) heldWork(ctx context.Context, flightID string) (holding, error) {
	h, err := heldWork(ctx, u.store, u.liveness, u.store.Run(), flightID)
	if h.unproven != nil && u.livenessWarned.CompareAndSwap(false, true) {
		u.log.Warn().Err(h.unproven).Str("flight_id", flightID).
			Msg("cannot tell whether runs of this machine are alive; their leases decide when their batches may be taken over")
	}
	return h, err
}

// waitForHolders is called after a pass that sent everything this run
// could claim. While other runs hold some of the flight's work it waits
// (announced in the log when the call's first wait starts: *announced),
// and returns (with the dead runs to adopt) as soon as some of that work
// may be this run's: a holder of this machine died, a lease ended, or a
// holder's batches settled (its tiles may be pending again). done is true
// when nobody holds anything and nothing changed since the last pass, or
// when the run's deadline came first (then rep records what blocks). last is
// what the previous look saw.
func (u *Client) waitForHolders(ctx context.Context, req Request, rep *runReport, last *holding, announced *bool) (dead []string, done bool, err error) {
	// Right after a pass, what is adoptable was just tried: look again
	// after a pause, not at once.
	justPassed, waiting := true, false
	defer func() {
		if waiting && req.Holding != nil {
			req.Holding(Held{})
		}
	}()
	for {
		h, err := u.heldWork(ctx, req.FlightID)
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The deadline came during the look: the wait ends as it
				// would in the pause, with what the last look saw held.
				if all := last.all(); all.Tiles > 0 {
					rep.setHeld(&all)
				}
				return nil, true, nil
			}
			return nil, false, err
		}
		switch {
		case h.Tiles == 0 && !h.adoptable && last.Tiles == 0:
			// Nobody holds anything this run could wait for, nor did at
			// the last look; what waits past the deadline is reported.
			if h.parked.Tiles > 0 {
				all := h.all()
				rep.setHeld(&all)
			}
			return nil, true, nil
		case h.Tiles == 0 && !h.adoptable:
			// The last holders ended since the last look (maybe during
			// the pass): one more pass sends what they left pending
			// (rejected, or in a failed batch).
			*last = h
			return nil, false, nil
		case len(h.dead) > 0 && !slices.Equal(h.dead, last.dead):
			*last = h
			return h.dead, false, nil
		case !justPassed && (h.adoptable || h.Tiles != last.Tiles):
			*last = h
			return h.dead, false, nil
		}
		*last, justPassed = h, false
		if h.Tiles > 0 {
			waiting = true
			if !*announced {
				*announced = true
				u.log.Info().Str("flight_id", req.FlightID).Int("tiles", h.Tiles).Int("holders", len(h.Holders)).
					Str("run_id", h.Holders[0].RunID).Str("host", h.Holders[0].Host).Int("pid", h.Holders[0].PID).
					Time("lease_ends", h.Until).Msg("waiting for " + h.Held.String())
			}
			if req.Holding != nil {
				req.Holding(h.Held)
			}
		}
		pause := holdPoll
		if h.Tiles > 0 {
			pause = min(pause, max(h.Until.Sub(u.now()), 10*time.Millisecond))
		}
		all := h.all()
		if dl, ok := ctx.Deadline(); ok && !dl.After(u.now()) {
			rep.setHeld(&all) // the deadline came: the report says what other runs hold
			return nil, true, nil
		}
		if err := u.sleep(ctx, pause); err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				rep.setHeld(&all)
				return nil, true, nil
			}
			return nil, false, err
		}
	}
}
