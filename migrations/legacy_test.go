package migrations_test

import (
	"testing"

	"github.com/tilectl/tilectl/internal/pgtest"
)

// Local rejections an earlier version recorded for bad blobs must stop
// spending the tiles' budget; provider rejections keep counting.
func TestUp0006StopsLegacyBlobRejectionsFromCountingAsAttempts(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewEmptyDatabase(t)
	migrateTo(t, dbURL, 5)
	exec(t, dbURL, `INSERT INTO flights (flight_id, state) VALUES ('F1', 'on_ground');
INSERT INTO tiles (tile_id, flight_id, z, x, y, content_type, size_bytes, sha256, blob_path, captured_at, voting_status, upload_attempts)
SELECT id, 'F1', 2, x, 0, 'image/png', 1, repeat('a', 64), 'F1/2/' || x || '/0.png', now(), st, n
  FROM (VALUES ('pend', 0, 'pending', 3), ('gone', 1, 'upload_giveup', 5), ('prov', 2, 'pending', 1)) AS v(id, x, st, n);
INSERT INTO upload_batches (op_id, flight_id, fingerprint, tile_ids, sha256s, state)
VALUES ('batch-1', 'F1', 'f', ARRAY['prov'], ARRAY[repeat('a', 64)], 'settled');
INSERT INTO upload_rejections (op_id, tile_id, reason, counted_at) VALUES
  ('local-1', 'pend', 'blob_missing', now()),
  ('local-2', 'pend', 'blob_corrupt', now()),
  ('local-3', 'pend', 'blob_missing', NULL),
  ('local-1', 'gone', 'blob_missing', now()),
  ('batch-1', 'prov', 'blob_missing', now())`)
	migrateTo(t, dbURL, 6)
	ctx, conn := connect(t, dbURL)
	want := map[string]struct {
		attempts int
		status   string
	}{"pend": {1, "pending"}, "gone": {5, "upload_giveup"}, "prov": {1, "pending"}}
	for id, w := range want {
		var n int
		var st string
		if err := conn.QueryRow(ctx, `SELECT upload_attempts, voting_status FROM tiles WHERE tile_id = $1`, id).Scan(&n, &st); err != nil {
			t.Fatal(err)
		}
		if n != w.attempts || st != w.status {
			t.Errorf("tile %s: %d attempts, %s; want %d, %s", id, n, st, w.attempts, w.status)
		}
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM upload_rejections`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 1 {
		t.Errorf("%d rejections left, want only the provider's (a provider may call its reason anything)", left)
	}
}
