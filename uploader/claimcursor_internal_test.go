package uploader

import (
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// The shared claim cursor goes back to the first tile when the call's
// lookup read changes and found tiles not held (they go at their place in
// the order), and only then; it never moves back otherwise.
func TestALookupSendsTheClaimCursorBackToTheFirstTile(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cur := claimCursor{order: tilestore.OrderZoom}
	cur.sawLookup([]string{"F-9-0-0"}, t0) // the call's first lookup
	cur.advance(tilestore.Cursor{Z: 11, ID: "F-11-5-3"})
	cur.advance(tilestore.Cursor{Z: 10, ID: "F-10-9-3"}) // behind: ignored
	if want := (tilestore.Cursor{Z: 11, ID: "F-11-5-3"}); cur.last != want {
		t.Fatalf("cursor %v, want %v", cur.last, want)
	}
	cur.sawLookup([]string{"F-9-0-0"}, t0) // the same read again
	if cur.last.IsZero() {
		t.Fatal("the same lookup read sent the cursor back")
	}
	cur.sawLookup(nil, t0.Add(time.Second)) // a new read that found nothing to send
	if cur.last.IsZero() {
		t.Fatal("a lookup that gave nothing back sent the cursor back")
	}
	cur.sawLookup([]string{"F-9-1-0"}, t0.Add(2*time.Second)) // mid-call: a tile found not held
	if !cur.last.IsZero() {
		t.Fatalf("cursor %v after a new lookup gave a tile back, want the first tile", cur.last)
	}
}
