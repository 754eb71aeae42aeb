package provider_test

import (
	"encoding/json"
	"math/rand"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tilectl/tilectl/operation"
	"github.com/tilectl/tilectl/provider"
	"github.com/tilectl/tilectl/provider/providertest"
)

// The provider collects expired operation records on its own schedule, and
// a key whose record is gone is still refused as expired (by the UUIDv7's
// time), never run as new.
func TestExpiredOperationRecordsAreCollectedAndTheirKeysStayExpired(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	p := providertest.Start(t, func(c *provider.Config) {
		c.Retention = time.Hour
		c.GCEvery = 5 * time.Millisecond
		c.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	rng := rand.New(rand.NewSource(11))
	tiles := []rawTile{tileN(rng, 0), tileN(rng, 1)}
	key := operation.NewID()
	if a := post(t, p, "f1", key, tiles); a.Status != 200 {
		t.Fatalf("first send: %d %s", a.Status, a.Body)
	}

	clock.Add(int64(3 * time.Hour)) // past retention and the GC margin (= retention)
	p.WaitForNoOperationRecords(t, 15*time.Second)

	if a := post(t, p, "f1", key, tiles); a.Status != 422 || a.code() != operation.CodeIdempotencyExpired {
		t.Fatalf("collected key resent: %d %s, want 422 %s", a.Status, a.Body, operation.CodeIdempotencyExpired)
	}
	st := do(t, http.MethodGet, p.URL+"/v1/operations/"+key, providertest.Token, "", nil, nil)
	var s operation.StateResponse
	if err := json.Unmarshal(st.Body, &s); err != nil || s.State != "expired" {
		t.Fatalf("state of a collected key: %d %s, want expired", st.Status, st.Body)
	}
	for id, n := range writes(t, p) {
		if n != 1 {
			t.Fatalf("tile %s written %d times", id, n)
		}
	}
	m := string(do(t, http.MethodGet, p.URL+"/metrics", providertest.Token, "", nil, nil).Body)
	if !strings.Contains(m, "tileprovider_operation_records_collected_total 1") {
		t.Errorf("metrics do not count the collected record:\n%s", m)
	}
}
