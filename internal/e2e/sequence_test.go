package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
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
