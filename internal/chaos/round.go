package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// providerFaultKinds are all the faults the reference provider injects.
var providerFaultKinds = []string{"drop_after_store", "status_429", "status_503", "html_502",
	"cut_body", "omit_results", "processing_409"}

// soak is one soak's state.
type soak struct {
	cfg   Config
	dbs   *databases
	rep   *Report
	chk   *checker
	rng   *mrand.Rand
	token string
	cache string
	fdr   string
	store string
	env   []string
	// runTime is the longest a finished run took (at least 1.2 s): kill
	// moments are drawn within it.
	runTime time.Duration
	// cluster is the soak's own Postgres, restarted under the runs.
	cluster *cluster
	// faultMu serialises a database restart and a provider crash, so a
	// provider never restarts against a database that is down.
	faultMu sync.Mutex
	// prov is the round's provider (replaced when it is crashed), and
	// faults what its incarnations counted (read before each crash).
	prov     *providerProc
	provBase string
	faults   faultStats
}

func (s *soak) setup(ctx context.Context) error {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("make provider token: %w", err)
	}
	s.token = "chaos-" + hex.EncodeToString(b)
	s.runTime = 1200 * time.Millisecond
	s.cache = filepath.Join(s.cfg.WorkDir, "cache")
	s.fdr = filepath.Join(s.cfg.WorkDir, "fdr.ring")
	s.store = filepath.Join(s.cfg.WorkDir, "provider-storage")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TILECTL_") {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env,
		"TILECTL_DATABASE_URL="+s.dbs.clientURL(),
		"TILECTL_CACHE_DIR="+s.cache,
		"TILECTL_FDR_PATH="+s.fdr,
		"TILECTL_PROVIDER_TOKEN="+s.token,
		"TILECTL_LOG_FORMAT=json",
	)
	if out, err := s.tilectl(ctx, "migrate", "up"); err != nil {
		return fmt.Errorf("tilectl migrate up: %w\n%s", err, out)
	}
	return nil
}

// tilectl runs a tilectl command to completion (no chaos) with the soak's
// environment; providerURL is not needed for these commands.
func (s *soak) tilectl(ctx context.Context, args ...string) ([]byte, error) {
	res, err := runTilectl(ctx, s.cfg.TilectlBin, s.env, args, runPlan{hardLimit: 2 * time.Minute}, runHooks{})
	if err != nil {
		return nil, err
	}
	out := append(res.stdout, res.stderr...)
	if res.exit != 0 {
		return out, fmt.Errorf("exit %d", res.exit)
	}
	return out, nil
}

func (s *soak) round(ctx context.Context, n int) error {
	// Each round has its own stream, so a round's flight, victims and
	// schedule do not depend on how many runs earlier rounds needed.
	s.rng = mrand.New(mrand.NewPCG(s.cfg.Seed, uint64(n)))
	flight := fmt.Sprintf("chaos-s%d-r%02d", s.cfg.Seed, n)
	dir := filepath.Join(s.cfg.WorkDir, "flights", flight)
	if err := writeFlightDir(dir, s.cfg.Tiles, s.rng); err != nil {
		return err
	}
	if out, err := s.tilectl(ctx, "tiles", "import", "--flight", flight, dir); err != nil {
		return fmt.Errorf("tilectl tiles import: %w\n%s", err, out)
	}
	tiles, err := s.landAndList(ctx, flight)
	if err != nil {
		return err
	}
	if len(tiles) != s.cfg.Tiles {
		return fmt.Errorf("import of %d tiles left %d in tilectl's database", s.cfg.Tiles, len(tiles))
	}
	corrupt, poison := s.pickVictims(tiles)
	for i, t := range corrupt {
		if err := corruptBlob(s.blobPath(t.BlobPath), corruptions[i%len(corruptions)]); err != nil {
			return err
		}
	}
	poisonIDs := make([]string, len(poison))
	for i, t := range poison {
		poisonIDs[i] = t.ID
	}
	// Every other round (by the seed's parity) sends Client-Id and
	// Client-Sequence; the provider enforces sequencing in every round.
	clientID := ""
	if sequenced(s.cfg.Seed, n) {
		clientID = clientIDFor(flight)
		s.rep.SequencedRounds++
	}
	fmt.Fprintf(s.cfg.Log, "round %d: flight %s, %d tiles, %d corrupt blobs, %d poison tiles, client ID %q\n",
		n, flight, len(tiles), len(corrupt), len(poison), clientID)

	prov, err := s.startProvider(ctx, n, poisonIDs)
	if err != nil {
		return err
	}
	damaged := make([]string, len(corrupt))
	for i, t := range corrupt {
		damaged[i] = t.ID
	}
	s.prov, s.provBase, s.faults = prov, prov.base, newFaultStats()
	start, err := s.readRoundStart(ctx)
	if err != nil {
		s.prov.stop()
		return err
	}
	runErr := s.uploadUntilSettled(ctx, flight, clientID, len(damaged))
	last, scrapeErr := scrapeFaults(ctx, s.prov.base, s.token)
	s.prov.stop()
	if runErr != nil {
		return runErr
	}
	if scrapeErr != nil {
		return fmt.Errorf("read the provider's fault counts: %w", scrapeErr)
	}
	faults := s.faults
	faults.merge(last)
	for k, v := range faults.ByKind {
		s.rep.Faults[k] += v
	}
	s.rep.Replays += faults.Replays
	return s.checkRound(ctx, flight, clientID, start, faults, poisonIDs, damaged)
}

// landAndList marks the flight on_ground (the aircraft landed: that is the
// navigation system's business, not tilectl's) and lists its tiles.
func (s *soak) landAndList(ctx context.Context, flight string) ([]clientTile, error) {
	conn, err := pgx.Connect(ctx, s.dbs.url(s.dbs.client, "tilechaos_checker"))
	if err != nil {
		return nil, fmt.Errorf("read tilectl's database: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE flights SET state = 'on_ground', updated_at = now() WHERE flight_id = $1`, flight); err != nil {
		return nil, fmt.Errorf("land flight %s: %w", flight, err)
	}
	rows, _ := conn.Query(ctx, `SELECT tile_id, sha256, voting_status, upload_attempts, blob_path
		FROM tiles WHERE flight_id = $1 ORDER BY tile_id`, flight)
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (clientTile, error) {
		var t clientTile
		err := r.Scan(&t.ID, &t.SHA256, &t.Status, &t.Attempts, &t.BlobPath)
		return t, err
	})
}

// pickVictims chooses, from tiles in tile_id order, disjoint sets of tiles
// to corrupt on disk and to have the provider always reject.
func (s *soak) pickVictims(tiles []clientTile) (corrupt, poison []clientTile) {
	perm := s.rng.Perm(len(tiles))
	nc := max(len(corruptions), len(tiles)/20)
	np := max(1, len(tiles)/30)
	for i, p := range perm {
		switch {
		case i < nc:
			corrupt = append(corrupt, tiles[p])
		case i < nc+np:
			poison = append(poison, tiles[p])
		}
	}
	return corrupt, poison
}

// blobPath finds a blob on disk from its path relative to the cache root,
// which is the cache directory or a folder in it.
func (s *soak) blobPath(rel string) string {
	direct := filepath.Join(s.cache, filepath.FromSlash(rel))
	if _, err := os.Stat(direct); err == nil {
		return direct
	}
	found := direct
	_ = filepath.WalkDir(s.cache, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(filepath.ToSlash(p), "/"+rel) {
			found = p
			return fs.SkipAll
		}
		return nil
	})
	return found
}

// batchWait bounds how long a crash waits for a batch to be executing at
// the provider before it strikes anyway.
const batchWait = 1500 * time.Millisecond

// waitForRunningBatch polls the provider's tileprovider_batches_running
// gauge until a batch is executing (true), the run ends or batchWait
// passes (false).
func (s *soak) waitForRunningBatch(run context.Context) bool {
	ctx, cancel := context.WithTimeout(run, batchWait)
	defer cancel()
	for {
		if b, err := get(ctx, s.provBase+"/metrics", s.token); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if name, _, v, ok := parseMetricLine(line); ok && name == "tileprovider_batches_running" && v > 0 {
					return true
				}
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// restartDB restarts the soak's Postgres as a crash would (-m immediate),
// preferably while a batch is executing at the provider, under whatever
// tilectl is doing. It does nothing when the run ended first.
func (s *soak) restartDB(run context.Context) (hit, error) {
	mid := s.waitForRunningBatch(run)
	if run.Err() != nil {
		return hit{}, nil
	}
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return hit{landed: true, midBatch: mid}, s.cluster.restart(context.WithoutCancel(run))
}

// crashProvider reads the provider's counters (they die with it), then,
// preferably while a batch is executing, SIGKILLs it and starts it again
// on the same port, database and storage. It does nothing when the run
// ended first.
func (s *soak) crashProvider(run context.Context) (hit, error) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	ctx := context.WithoutCancel(run)
	var fs faultStats
	var err error
	// Batches are still flowing: a fault injected between the read of
	// /metrics and of /debug/ledger makes them differ, so read again
	// until they agree (a real disagreement stays and is reported).
	for attempt := 0; attempt < 10; attempt++ {
		if fs, err = scrapeFaults(ctx, s.prov.base, s.token); err == nil && maps.Equal(fs.ByKind, fs.MetricsByKind) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return hit{}, fmt.Errorf("read the provider's counters before crashing it: %w", err)
	}
	s.faults.merge(fs)
	mid := s.waitForRunningBatch(run)
	if run.Err() != nil {
		return hit{}, nil
	}
	p, err := s.prov.crashAndRestart(ctx)
	if err != nil {
		return hit{}, fmt.Errorf("restart the provider after SIGKILL: %w", err)
	}
	s.prov = p
	return hit{landed: true, midBatch: mid}, nil
}

func (s *soak) startProvider(ctx context.Context, n int, poison []string) (*providerProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	sort.Strings(poison)
	args := []string{
		"--listen", addr,
		"--database-url", s.dbs.providerURL(),
		"--storage-dir", s.store,
		"--fault-rate", fmt.Sprint(s.cfg.FaultRate),
		"--fault-seed", fmt.Sprint(int64((s.cfg.Seed*1000 + uint64(n)) & (1<<62 - 1))),
		"--fault-kinds", strings.Join(providerFaultKinds, ","),
		"--reject-tiles", strings.Join(poison, ","),
		"--transient-reject-rate", "0.05",
		"--latency", "10ms",
		// On in every round: a request without Client-Id must pass
		// through as if it were off (only-the-rounds-client-sequence-moves).
		"--strict-sequencing",
	}
	return startProvider(ctx, s.cfg.ProviderBin, args, "http://"+addr, s.token)
}
