package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// providerOp is one row of the provider's operation table.
type providerOp struct {
	OpID        string
	Fingerprint string
	State       string
	Status      *int32
	Body        []byte
}

// storedTile is one tile the provider holds, with how many times its bytes
// were written.
type storedTile struct {
	ID     string
	SHA256 string
	Writes int
	Rows   int
}

// providerView is what the invariants read from the provider's own records.
type providerView struct {
	Ops    map[string]providerOp
	Stored map[string]storedTile
	// Fingerprints is every fingerprint each op ID arrived with
	// (provider_op_fingerprints): a correct client sends one per ID.
	Fingerprints map[string][]string
	// Sequences is the provider's client_sequences (strict sequencing):
	// the last committed number per caller scope and client ID.
	Sequences map[seqKey]uint64
	// Written is, per op ID, the flight's tiles the provider wrote under
	// that key (provider_tile_writes), in tile_id order.
	Written map[string][]string
}

// storedTilesSQL reads the reference provider's tables (provider package,
// EnsureSchema): provider_tiles holds what it stores, provider_tile_writes
// one row per time a tile's bytes were written. Rows counts rows of
// provider_tiles for one tile, which its primary key should hold at one.
const storedTilesSQL = `SELECT t.tile_id, min(t.sha256), count(*)::int,
	(SELECT count(*) FROM provider_tile_writes w WHERE w.flight_id = $1 AND w.tile_id = t.tile_id)::int
	FROM provider_tiles t WHERE t.flight_id = $1 GROUP BY t.tile_id
	UNION ALL
	SELECT w.tile_id, min(w.sha256), 0, count(*)::int FROM provider_tile_writes w
	WHERE w.flight_id = $1 AND NOT EXISTS (SELECT 1 FROM provider_tiles t WHERE t.flight_id = w.flight_id AND t.tile_id = w.tile_id)
	GROUP BY w.tile_id`

func loadProviderView(ctx context.Context, dbURL, flightID string, opIDs []string) (providerView, error) {
	v := providerView{Ops: map[string]providerOp{}, Stored: map[string]storedTile{}, Fingerprints: map[string][]string{},
		Written: map[string][]string{}}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return v, fmt.Errorf("read the provider's database: %w", err)
	}
	defer conn.Close(ctx)

	// The ops of the journaled batches, and of any key the provider wrote
	// one of the flight's tiles under, whether tilectl knows it or not.
	rows, _ := conn.Query(ctx, `SELECT op_id, fingerprint, state, outcome_status, outcome_body
		FROM operation_records WHERE op_id = ANY($1)
		   OR op_id IN (SELECT op_id FROM provider_tile_writes WHERE flight_id = $2)`, opIDs, flightID)
	var op providerOp
	if _, err := pgx.ForEachRow(rows, []any{&op.OpID, &op.Fingerprint, &op.State, &op.Status, &op.Body}, func() error {
		if prev, dup := v.Ops[op.OpID]; dup {
			// Two scopes hold the ID: keep both visible to the checks
			// by marking the fingerprint ambiguous.
			op.Fingerprint = prev.Fingerprint + "|" + op.Fingerprint
		}
		v.Ops[op.OpID] = op
		op = providerOp{}
		return nil
	}); err != nil {
		return v, fmt.Errorf("read the provider's operation records: %w", err)
	}

	rows, _ = conn.Query(ctx, storedTilesSQL, flightID)
	var st storedTile
	if _, err := pgx.ForEachRow(rows, []any{&st.ID, &st.SHA256, &st.Rows, &st.Writes}, func() error {
		v.Stored[st.ID] = st
		return nil
	}); err != nil {
		return v, fmt.Errorf("read the provider's stored tiles: %w", err)
	}

	rows, _ = conn.Query(ctx, `SELECT op_id, tile_id FROM provider_tile_writes WHERE flight_id = $1 ORDER BY op_id, tile_id`, flightID)
	var wop, wtile string
	if _, err := pgx.ForEachRow(rows, []any{&wop, &wtile}, func() error {
		v.Written[wop] = append(v.Written[wop], wtile)
		return nil
	}); err != nil {
		return v, fmt.Errorf("read the provider's tile writes per op ID: %w", err)
	}

	rows, _ = conn.Query(ctx, `SELECT op_id, fingerprint FROM provider_op_fingerprints WHERE op_id = ANY($1) ORDER BY op_id, fingerprint`, opIDs)
	var id, fp string
	if _, err := pgx.ForEachRow(rows, []any{&id, &fp}, func() error {
		v.Fingerprints[id] = append(v.Fingerprints[id], fp)
		return nil
	}); err != nil {
		return v, fmt.Errorf("read the provider's fingerprints per op ID: %w", err)
	}
	v.Sequences, err = providerSequences(ctx, conn)
	return v, err
}

// sealedOKOps lists every operation the provider sealed with a 200, of any
// flight, whether or not tilectl's journal knows the ID.
func sealedOKOps(ctx context.Context, dbURL string) ([]string, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("read the provider's database: %w", err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT op_id FROM operation_records WHERE state = 'sealed' AND outcome_status = 200`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the provider's sealed operations: %w", err)
	}
	return ids, nil
}

// faultStats is what the provider says it injected.
type faultStats struct {
	ByKind        map[string]int      // from /debug/ledger's "faults"
	MetricsByKind map[string]int      // from /metrics, to cross-check
	OpsByKind     map[string][]string // fault kind -> op IDs, when the ledger attributes them
	Conflicts     int                 // 422 answers on the batch route
	Replays       int                 // answers replayed for a known key
}

func newFaultStats() faultStats {
	return faultStats{ByKind: map[string]int{}, MetricsByKind: map[string]int{}, OpsByKind: map[string][]string{}}
}

// merge adds what another provider incarnation counted.
func (fs *faultStats) merge(o faultStats) {
	for k, v := range o.ByKind {
		fs.ByKind[k] += v
	}
	for k, v := range o.MetricsByKind {
		fs.MetricsByKind[k] += v
	}
	for k, ops := range o.OpsByKind {
		fs.OpsByKind[k] = append(fs.OpsByKind[k], ops...)
	}
	fs.Conflicts += o.Conflicts
	fs.Replays += o.Replays
}

func scrapeFaults(ctx context.Context, base, token string) (faultStats, error) {
	fs := newFaultStats()
	metrics, err := get(ctx, base+"/metrics", token)
	if err != nil {
		return fs, err
	}
	sc := bufio.NewScanner(strings.NewReader(string(metrics)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, value, ok := parseMetricLine(line)
		if !ok {
			continue
		}
		if strings.Contains(name, "fault") && labels["kind"] != "" {
			fs.MetricsByKind[labels["kind"]] += int(value)
		}
		// The provider answers 422 on the batch route only for
		// IDEMPOTENCY_CONFLICT and IDEMPOTENCY_EXPIRED; neither may happen.
		if name == "tileprovider_requests_total" && labels["route"] == "tiles.batch" && labels["status"] == "422" {
			fs.Conflicts += int(value)
		}
		if name == "tileprovider_replays_total" {
			fs.Replays += int(value)
		}
	}
	ledger, err := get(ctx, base+"/debug/ledger", token)
	if err != nil {
		return fs, err
	}
	if err := parseLedger(ledger, &fs); err != nil {
		return fs, err
	}
	return fs, nil
}

// parseLedger reads the provider's /debug/ledger: "faults" counts faults
// by kind; any entry (at any depth) that names both an op_id and a fault
// "kind" (or "fault") attributes that fault to that operation.
func parseLedger(b []byte, fs *faultStats) error {
	var l struct {
		Faults map[string]int `json:"faults"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("parse /debug/ledger: %w", err)
	}
	for k, v := range l.Faults {
		fs.ByKind[k] += v
	}
	var raw any
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("parse /debug/ledger: %w", err)
	}
	var walk func(any)
	walk = func(x any) {
		switch t := x.(type) {
		case []any:
			for _, e := range t {
				walk(e)
			}
		case map[string]any:
			op, _ := t["op_id"].(string)
			kind, _ := t["kind"].(string)
			if kind == "" {
				kind, _ = t["fault"].(string)
			}
			if op != "" && kind != "" {
				fs.OpsByKind[kind] = append(fs.OpsByKind[kind], op)
				return
			}
			for _, e := range t {
				walk(e)
			}
		}
	}
	walk(raw)
	return nil
}

// parseMetricLine splits a Prometheus text line into name, labels, value.
func parseMetricLine(line string) (string, map[string]string, float64, bool) {
	labels := map[string]string{}
	name, rest := line, ""
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", nil, 0, false
		}
		name, rest = line[:i], strings.TrimSpace(line[j+1:])
		for _, kv := range strings.Split(line[i+1:j], ",") {
			k, v, ok := strings.Cut(kv, "=")
			if ok {
				labels[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
			}
		}
	} else {
		f := strings.Fields(line)
		if len(f) < 2 {
			return "", nil, 0, false
		}
		name, rest = f[0], f[1]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}

// get reads one of the provider's debug routes. The soak restarts the
// provider's database and the provider itself, so a route that reads the
// database may answer 5xx, or nothing may listen, for a while after a
// round: get retries those for up to getPatience before it gives up.
func get(ctx context.Context, url, token string) ([]byte, error) {
	deadline := time.Now().Add(getPatience)
	for {
		b, retry, err := getOnce(ctx, url, token)
		if err == nil || !retry || time.Now().After(deadline) {
			return b, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// getPatience bounds get's retries: longer than a database restart and a
// provider restart take on a loaded machine.
const getPatience = 30 * time.Second

func getOnce(ctx context.Context, url, token string) (b []byte, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, ctx.Err() == nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, ctx.Err() == nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode >= 500, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, false, nil
}
