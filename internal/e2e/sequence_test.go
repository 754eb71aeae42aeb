package e2e

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

// clientLast is the provider's GET /v1/clients/{id}/state.
func clientLast(t *testing.T, url, client string) uint64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/clients/"+client+"/state", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st operation.ClientStateResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("client state: %d %v", resp.StatusCode, err)
	}
	return st.LastCommittedSequence
}

func TestUploadPendingWithAClientIDSendsOneNumberPerBatch(t *testing.T) {
	t.Parallel()
	p := providertest.Start(t, func(c *provider.Config) { c.Token, c.StrictSequencing = token, true })
	s := newSite(t, p.URL)
	s.flight("fs1", 5)
	r := s.run(time.Minute, "upload-pending", "--flight", "fs1", "--client-id", "drone-7", "--batch-size", "2")
	if r.exit != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.exit, r.stderr)
	}
	if got := clientLast(t, p.URL, "drone-7"); got != 3 {
		t.Fatalf("provider's last committed %d, want 3 (5 tiles, 2 a batch)", got)
	}
	s.env = append(s.env, "TILECTL_UPLOAD_CLIENT_ID=drone-7")
	view := s.mustRun("config", "view")
	if !strings.Contains(view.stdout, "upload.client_id") || !strings.Contains(view.stdout, "drone-7") ||
		!strings.Contains(view.stdout, "TILECTL_UPLOAD_CLIENT_ID") {
		t.Errorf("config view does not show upload.client_id and its source:\n%s", view.stdout)
	}
}

func TestAClientIDIsRefusedWithConcurrencyAboveOneOrAProviderWithoutSequencing(t *testing.T) {
	t.Parallel()
	p := refProvider(t, provider.FaultConfig{}, nil) // no strict sequencing
	s := newSite(t, p.URL)
	s.flight("fs2", 2)

	r := s.run(time.Minute, "upload-pending", "--flight", "fs2", "--client-id", "drone-7", "--concurrency", "4")
	if r.exit != 2 {
		t.Errorf("--client-id with --concurrency 4: exit %d, want 2", r.exit)
	}
	for _, want := range []string{"upload.concurrency (from flag --concurrency)", "must be 1 when upload.client_id is set (from flag --client-id)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}

	s.env = append(s.env, "TILECTL_UPLOAD_CLIENT_ID=drone-7")
	r = s.run(time.Minute, "upload-pending", "--flight", "fs2")
	if r.exit != 2 {
		t.Errorf("against a provider without sequencing: exit %d, want 2", r.exit)
	}
	for _, want := range []string{"does not offer strict client sequencing", "answered 404",
		"upload.client_id drone-7 comes from env TILECTL_UPLOAD_CLIENT_ID"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	var batches int
	s.query(func(conn *pgx.Conn) error {
		return conn.QueryRow(t.Context(), `SELECT count(*) FROM upload_batches`).Scan(&batches)
	})
	if batches != 0 {
		t.Errorf("%d batches journaled against a provider without sequencing, want none", batches)
	}
}

// The real binary SIGKILLed after the provider committed a sequenced batch
// and before the answer reached it: the next run resends that batch with
// the same key and number, and the provider's numbers stay contiguous.
func TestASIGKILLedRunsSequencedBatchIsResentWithItsNumberByTheNextRun(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		child  *exec.Cmd
		seals  int
		killed string
		dead   = make(chan struct{})
	)
	p := providertest.Start(t, func(c *provider.Config) {
		c.Token, c.StrictSequencing = token, true
		c.Tokens = map[string]string{providertest.Token: "client"} // for the ledger
		c.AfterSeal = func(opID string) {
			mu.Lock()
			seals++
			if seals != 2 || child == nil {
				mu.Unlock()
				return
			}
			killed = opID
			_ = child.Process.Kill()
			mu.Unlock()
			<-dead // the answer is written only once the client is gone
		}
	})
	s := newSite(t, p.URL)
	s.flight("fk1", 6)
	cmd := s.command("upload-pending", "--flight", "fk1", "--client-id", "drone-9", "--batch-size", "2")
	mu.Lock()
	if err := cmd.Start(); err != nil {
		mu.Unlock()
		t.Fatal(err)
	}
	child = cmd
	mu.Unlock()
	err := cmd.Wait()
	close(dead)
	mu.Lock()
	child = nil
	mu.Unlock()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 || killed == "" {
		t.Fatalf("first run: %v, want it SIGKILLed at the second batch's answer", err)
	}
	var seq int64
	s.query(func(conn *pgx.Conn) error {
		// As if the killed run's lease had run out.
		if _, err := conn.Exec(t.Context(), `UPDATE upload_batches SET lease_expires_at = now() WHERE state = 'open'`); err != nil {
			return err
		}
		return conn.QueryRow(t.Context(), `SELECT client_seq FROM upload_batches WHERE op_id = $1 AND state = 'open'`, killed).Scan(&seq)
	})
	if seq != 2 {
		t.Fatalf("the killed batch is journaled with number %d, want 2", seq)
	}
	if r := s.run(time.Minute, "upload-pending", "--flight", "fk1", "--client-id", "drone-9", "--batch-size", "2"); r.exit != 0 {
		t.Fatalf("second run: exit %d\nstderr: %s", r.exit, r.stderr)
	}
	var state string
	var after int64
	s.query(func(conn *pgx.Conn) error {
		return conn.QueryRow(t.Context(), `SELECT state, client_seq FROM upload_batches WHERE op_id = $1`, killed).Scan(&state, &after)
	})
	if state != "settled" || after != 2 {
		t.Errorf("the killed batch ended %s with number %d, want settled with 2", state, after)
	}
	if got := clientLast(t, p.URL, "drone-9"); got != 3 {
		t.Errorf("provider's last committed %d, want 3 (6 tiles, 2 a batch, no number lost or doubled)", got)
	}
	l := p.Ledger(t)
	if len(l.Tiles) != 6 {
		t.Fatalf("provider holds %d tiles, want 6", len(l.Tiles))
	}
	for _, tl := range l.Tiles {
		if tl.Writes != 1 {
			t.Errorf("tile %s written %d times", tl.TileID, tl.Writes)
		}
	}
}
