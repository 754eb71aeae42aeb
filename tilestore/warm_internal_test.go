package tilestore

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/tilectl/tilectl/internal/pgtest"
)

// A warm pool opens every connection it may hold at once, beside the
// ping, before any query asks for them: a command that soon runs that many
// queries at once finds them open. A cold one opens only the ping's.
func TestAWarmPoolOpensItsConnectionsBeforeAnyQueryNeedsThem(t *testing.T) {
	_, dbURL := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, warm := range []bool{false, true} {
		connected := make(chan struct{}, 64)
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("pool_max_conns", "3")
		u.RawQuery = q.Encode()
		s, err := OpenWith(ctx, u.String(), OpenOptions{Warm: warm, afterConnect: func() { connected <- struct{}{} }})
		if err != nil {
			t.Fatal(err)
		}
		if !warm {
			// The ping's connection is open when Open returns; nothing
			// else asked for one.
			if got := s.pool.Stat().TotalConns(); got != 1 {
				t.Errorf("cold pool: %d connections open after Open, want the ping's 1", got)
			}
			s.Close()
			continue
		}
		// No query runs: each connection the pool opens tells, up to its
		// most (3 by the URL).
		for i := range 3 {
			select {
			case <-connected:
			case <-ctx.Done():
				t.Fatalf("warm pool: %d of 3 connections opened before any query", i)
			}
		}
		if got := s.pool.Stat().TotalConns(); got != 3 {
			t.Errorf("warm pool: %d connections open, want 3", got)
		}
		s.Close()
	}
}
