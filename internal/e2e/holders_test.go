package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

// gate holds the provider at the start of the first batch it runs until
// the test opens it, so the run that sent it holds an open batch for as
// long as the test likes. It says when that batch arrived.
type gate struct {
	mu      sync.Mutex
	calls   int
	arrived chan string // the first batch's op ID
	open    chan struct{}
	openOne sync.Once
}

func newGate() *gate {
	return &gate{arrived: make(chan string, 1), open: make(chan struct{})}
}

func (g *gate) hook(opID string) {
	g.mu.Lock()
	g.calls++
	first := g.calls == 1
	g.mu.Unlock()
	if !first {
		return
	}
	g.arrived <- opID
	<-g.open
}

func (g *gate) release() { g.openOne.Do(func() { close(g.open) }) }

func (g *gate) waitArrived(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.arrived:
		return id
	case <-time.After(60 * time.Second):
		t.Fatal("no batch reached the provider")
		return ""
	}
}

// holderSite is a site whose provider the test can inspect (its ledger).
func holderSite(t *testing.T, hook func(string)) (*site, *providertest.Provider) {
	t.Helper()
	p := providertest.Start(t, func(c *provider.Config) { c.BeforeRun = hook })
	s := newSite(t, p.URL)
	// The provider's default token, which its ledger route takes too (the
	// last value of a variable wins).
	s.env = append(s.env, "TILECTL_PROVIDER_TOKEN="+providertest.Token)
	return s, p
}

// storedOnce fails the test unless the provider holds each of ids exactly
// once, written once, and every key came with one body.
func storedOnce(t *testing.T, p *providertest.Provider, ids []string) provider.Ledger {
	t.Helper()
	l := p.Ledger(t)
	held := map[string]int{}
	for _, tl := range l.Tiles {
		held[tl.TileID]++
		if tl.Writes != 1 {
			t.Errorf("tile %s written %d times", tl.TileID, tl.Writes)
		}
	}
	for _, id := range ids {
		if held[id] != 1 {
			t.Errorf("tile %s held %d times, want 1", id, held[id])
		}
	}
	if len(l.Tiles) != len(ids) {
		t.Errorf("provider holds %d tiles, want %d", len(l.Tiles), len(ids))
	}
	for _, o := range l.Ops {
		if o.Fingerprints != 1 {
			t.Errorf("op %s came with %d bodies", o.OpID, o.Fingerprints)
		}
	}
	return l
}

// pendingIn counts the flight's tiles not yet uploaded and its open batches.
func (s *site) pendingIn(flight string) (pending, open int) {
	s.t.Helper()
	s.query(func(conn *pgx.Conn) error {
		return conn.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM tiles WHERE flight_id = $1 AND voting_status IN ('pending', 'trusted')),
			(SELECT count(*) FROM upload_batches WHERE flight_id = $1 AND state = 'open')`, flight).Scan(&pending, &open)
	})
	return pending, open
}

// proc is a tilectl started in the background.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	args   []string
	began  time.Time
	done   chan struct{}
	stdout strings.Builder
	mu     sync.Mutex
	stderr strings.Builder
	grew   chan struct{} // closed and replaced whenever stderr grows
}

// Write is the child's stderr.
func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.grew)
	p.grew = make(chan struct{})
	return p.stderr.Write(b)
}

// start starts tilectl with args in the background; the test's cleanup
// kills it if it is still running.
func (s *site) start(args ...string) *proc {
	s.t.Helper()
	p := &proc{t: s.t, cmd: s.command(args...), args: args, done: make(chan struct{}), grew: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, p
	p.began = time.Now()
	if err := p.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	s.t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	return p
}

// wait waits for the command to end (killing it after limit) and returns
// its result.
func (p *proc) wait(limit time.Duration) result {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("tilectl %s still running after %s; killed", strings.Join(p.args, " "), limit)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return result{exit: p.cmd.ProcessState.ExitCode(), stdout: p.stdout.String(), stderr: p.stderr.String(), took: time.Since(p.began)}
}

// waitForLog waits until the command's stderr contains want, or fails the
// test after limit or when the command ends without it.
func (p *proc) waitForLog(limit time.Duration, want string) {
	p.t.Helper()
	timeout := time.After(limit)
	for {
		p.mu.Lock()
		got, grew := p.stderr.String(), p.grew
		p.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		select {
		case <-grew:
		case <-p.done:
			p.t.Fatalf("tilectl ended without logging %q:\n%s", want, got)
		case <-timeout:
			p.t.Fatalf("no %q logged within %s:\n%s", want, limit, got)
		}
	}
}

func TestAfterASIGKILLTheNextRunAdoptsTheDeadRunsBatchesAtOnce(t *testing.T) {
	t.Parallel()
	g := newGate()
	s, p := holderSite(t, g.hook)
	t.Cleanup(g.release) // before the provider stops, which waits for its batches
	ids := s.flight("kill1", 24)
	// The default lease (30 s): the dead run's batches stay "held" that
	// long unless its death is recognised.
	first := s.start("upload-pending", "--flight", "kill1", "--batch-size", "4", "--concurrency", "3")
	killedOp := g.waitArrived(t)
	// SIGKILL the run while the provider holds its first batch.
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if r := first.wait(30 * time.Second); r.exit != -1 {
		t.Fatalf("the first run exited %d, want killed", r.exit)
	}
	g.release()
	if _, open := s.pendingIn("kill1"); open == 0 {
		t.Fatal("the killed run left no open batch")
	}
	r := s.run(60*time.Second, "upload-pending", "--flight", "kill1", "-o", "json")
	if r.exit != 0 {
		t.Fatalf("the run after the kill exited %d, want 0\nstdout: %s\nstderr: %s", r.exit, r.stdout, r.stderr)
	}
	if r.took > 15*time.Second {
		t.Errorf("the run after the kill took %s: it waited for the dead run's lease instead of adopting its batches", r.took)
	}
	if pending, open := s.pendingIn("kill1"); pending != 0 || open != 0 {
		t.Fatalf("after a run that exited 0: %d tiles pending, %d batches open", pending, open)
	}
	l := storedOnce(t, p, ids)
	if !slices.ContainsFunc(l.Ops, func(o provider.LedgerOp) bool { return o.OpID == killedOp && o.Requests >= 2 }) {
		t.Errorf("the killed run's batch %s was not resent under its key: %+v", killedOp, l.Ops)
	}
}

func TestALiveHoldersBatchesAreNeverTouchedAndBothRunsEndTogether(t *testing.T) {
	t.Parallel()
	g := newGate()
	s, p := holderSite(t, g.hook)
	t.Cleanup(g.release) // before the provider stops, which waits for its batches
	ids := s.flight("live1", 16)
	procA := s.start("upload-pending", "--flight", "live1", "--batch-size", "4", "--concurrency", "1", "--lease", "3s")
	held := g.waitArrived(t)
	// A holds its first batch at the provider; B sends the rest and must
	// then wait for A's batch, not resend it, however long A takes (A's
	// lease, renewed while A lives, is shorter than the wait).
	procB := s.start("upload-pending", "--flight", "live1", "--batch-size", "4", "--concurrency", "2")
	procB.waitForLog(60*time.Second, "waiting for 4 tiles held by run")
	time.Sleep(4 * time.Second) // past A's first lease: A renews it, B must still wait
	g.release()
	a, b := procA.wait(60*time.Second), procB.wait(60*time.Second)
	if a.exit != 0 || b.exit != 0 {
		t.Fatalf("exits %d and %d, want 0 and 0\nA stderr: %s\nB stderr: %s", a.exit, b.exit, a.stderr, b.stderr)
	}
	if !strings.Contains(b.stderr, "waiting for 4 tiles held by run") {
		t.Errorf("B did not say it was waiting:\n%s", b.stderr)
	}
	l := storedOnce(t, p, ids)
	for _, o := range l.Ops {
		if o.OpID == held && o.Requests != 1 {
			t.Errorf("the live run's batch %s was sent %d times: another run touched it", held, o.Requests)
		}
	}
	if pending, open := s.pendingIn("live1"); pending != 0 || open != 0 {
		t.Fatalf("after two runs that exited 0: %d tiles pending, %d batches open", pending, open)
	}
}

func TestARunWhoseDeadlineComesWhileALiveRunHoldsTilesExits3NamingTheHolder(t *testing.T) {
	t.Parallel()
	g := newGate()
	s, _ := holderSite(t, g.hook)
	t.Cleanup(g.release) // before the provider stops, which waits for its batches
	s.flight("dl1", 12)
	procA := s.start("upload-pending", "--flight", "dl1", "--batch-size", "4", "--concurrency", "1")
	g.waitArrived(t)
	b := s.run(60*time.Second, "upload-pending", "--flight", "dl1", "--batch-size", "4", "--deadline", "4s", "-o", "json")
	// The text summary names the holder too.
	bt := s.run(60*time.Second, "upload-pending", "--flight", "dl1", "--deadline", "2s")
	g.release()
	if a := procA.wait(60 * time.Second); a.exit != 0 {
		t.Errorf("the holder exited %d:\n%s", a.exit, a.stderr)
	}
	if bt.exit != 3 || !strings.Contains(bt.stdout, "4 tiles are held by run ") || !strings.Contains(bt.stdout, "4 still pending") {
		t.Errorf("text run: exit %d, want 3 naming the holder of the 4 pending tiles:\n%s", bt.exit, bt.stdout)
	}
	if b.exit != 3 {
		t.Fatalf("the waiting run exited %d, want 3\nstdout: %s\nstderr: %s", b.exit, b.stdout, b.stderr)
	}
	var sum struct {
		Outcome      string     `json:"outcome"`
		StillPending int        `json:"still_pending"`
		NextRetryAt  *time.Time `json:"next_retry_at"`
		Error        *string    `json:"error"`
		Flights      []struct {
			StillPending    int        `json:"still_pending"`
			HeldByOtherRuns int        `json:"held_by_other_runs"`
			NextRetryAt     *time.Time `json:"next_retry_at"`
			HeldBy          []struct {
				RunID     string    `json:"run_id"`
				Host      string    `json:"host"`
				PID       int       `json:"pid"`
				Tiles     int       `json:"tiles"`
				LeaseEnds time.Time `json:"lease_ends"`
			} `json:"held_by"`
		} `json:"flights"`
	}
	if err := json.Unmarshal([]byte(b.stdout), &sum); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, b.stdout)
	}
	if sum.Outcome != "partial" || sum.StillPending != 4 || sum.NextRetryAt == nil || len(sum.Flights) != 1 {
		t.Fatalf("summary: outcome %q, still_pending %d, next_retry_at %v; want partial, 4 (the held tiles), set\n%s",
			sum.Outcome, sum.StillPending, sum.NextRetryAt, b.stdout)
	}
	f := sum.Flights[0]
	if f.StillPending != 4 || f.HeldByOtherRuns != 4 || f.NextRetryAt == nil || len(f.HeldBy) != 1 {
		t.Fatalf("flight: still_pending %d, held_by_other_runs %d, next_retry_at %v, held_by %+v", f.StillPending,
			f.HeldByOtherRuns, f.NextRetryAt, f.HeldBy)
	}
	h := f.HeldBy[0]
	host, _ := os.Hostname()
	if h.PID != procA.cmd.Process.Pid || h.Host != host || h.RunID == "" || h.Tiles != 4 || !h.LeaseEnds.Equal(*f.NextRetryAt) {
		t.Fatalf("held_by %+v, want pid %d on %s with 4 tiles until next_retry_at %v", h, procA.cmd.Process.Pid, host, f.NextRetryAt)
	}
	if !strings.Contains(b.stderr, h.RunID) || !strings.Contains(b.stderr, "waiting for 4 tiles held by run "+h.RunID) {
		t.Fatalf("stderr does not name the holder %s:\n%s", h.RunID, b.stderr)
	}
	if !strings.Contains(b.stderr, "pid "+itoa(h.PID)) && !strings.Contains(b.stderr, itoa(h.PID)) {
		t.Fatalf("stderr does not name the holder's pid %d:\n%s", h.PID, b.stderr)
	}
}

func TestADeadRunWhosePIDAnotherProcessReusesIsNotTakenForAlive(t *testing.T) {
	t.Parallel()
	s, p := holderSite(t, nil)
	ids := s.flight("pid1", 8)
	// A run that died (its lock file left behind, unlocked) holding an
	// open batch with a long lease, whose PID a live process now has.
	other := exec.Command("sleep", "300")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	host, _ := os.Hostname()
	const deadRun = "0123456789abcdef0123456789abcdef"
	runs := filepath.Join(s.dir, "cache", "runs")
	if err := os.MkdirAll(runs, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(runs, deadRun+".lock"), "", 0o600)
	s.openBatch("pid1", ids[:4], deadRun, host, other.Process.Pid, time.Hour)

	r := s.run(60*time.Second, "upload-pending", "--flight", "pid1")
	if r.exit != 0 || r.took > 15*time.Second {
		t.Fatalf("exit %d after %s, want 0 at once (the dead run's lock is free)\nstdout: %s\nstderr: %s", r.exit, r.took, r.stdout, r.stderr)
	}
	if pending, open := s.pendingIn("pid1"); pending != 0 || open != 0 {
		t.Fatalf("%d tiles pending, %d batches open", pending, open)
	}
	l := storedOnce(t, p, ids)
	if !slices.ContainsFunc(l.Ops, func(o provider.LedgerOp) bool { return o.OpID == "op-"+deadRun+"-4" }) {
		t.Errorf("the dead run's batch was not sent under its own key: %+v", l.Ops)
	}
}

func TestARunOnAnotherHostOrWithoutALockFileIsWaitedForByItsLease(t *testing.T) {
	t.Parallel()
	s, p := holderSite(t, nil)
	ids := s.flight("far1", 8)
	host, _ := os.Hostname()
	// One batch of a run on another machine, one of a run on this machine
	// that left no lock file: neither is proven dead, so both are waited
	// for until their leases end, and then adopted.
	s.openBatch("far1", ids[:2], "11111111111111111111111111111111", "elsewhere", 4242, 3*time.Second)
	s.openBatch("far1", ids[2:4], "22222222222222222222222222222222", host, 4243, 3*time.Second)
	r := s.run(60*time.Second, "upload-pending", "--flight", "far1")
	if r.exit != 0 {
		t.Fatalf("exit %d, want 0\nstdout: %s\nstderr: %s", r.exit, r.stdout, r.stderr)
	}
	if r.took < 2*time.Second {
		t.Errorf("took %s: the holders' batches were taken before their leases ended", r.took)
	}
	if pending, open := s.pendingIn("far1"); pending != 0 || open != 0 {
		t.Fatalf("%d tiles pending, %d batches open", pending, open)
	}
	storedOnce(t, p, ids)
}

// openBatch journals an open batch of tiles for run on host/pid, as
// ClaimBatch does, with a lease that ends after lease.
func (s *site) openBatch(flight string, tiles []string, run, host string, pid int, lease time.Duration) {
	s.t.Helper()
	opID := "op-" + run + "-" + itoa(len(tiles))
	s.query(func(conn *pgx.Conn) error {
		ctx := context.Background()
		var shas []string
		rows, err := conn.Query(ctx, `SELECT sha256 FROM tiles t JOIN unnest($1::text[]) WITH ORDINALITY m(id, n) ON t.tile_id = m.id ORDER BY m.n`, tiles)
		if err != nil {
			return err
		}
		if shas, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		fp := fingerprint(flight, tiles, shas)
		if _, err := conn.Exec(ctx, `INSERT INTO upload_batches (op_id, flight_id, fingerprint, tile_ids, sha256s, state,
				owner_run, owner_host, owner_pid, lease_expires_at)
			VALUES ($1, $2, $3, $4, $5, 'open', $6, $7, $8, now() + make_interval(secs => $9::float8))`,
			opID, flight, fp, tiles, shas, run, host, pid, lease.Seconds()); err != nil {
			return err
		}
		_, err = conn.Exec(ctx, `UPDATE tiles SET open_op_id = $1 WHERE tile_id = ANY($2)`, opID, tiles)
		return err
	})
}

// fingerprint is the journal's batch fingerprint (uploader's): the
// sha256 of the flight ID and each member's ID and sha256, NUL-separated.
func fingerprint(flightID string, ids, sums []string) string {
	h := sha256.New()
	h.Write([]byte(flightID))
	for i := range ids {
		h.Write([]byte{0})
		h.Write([]byte(ids[i]))
		h.Write([]byte{0})
		h.Write([]byte(sums[i]))
	}
	return hex.EncodeToString(h.Sum(nil))
}
