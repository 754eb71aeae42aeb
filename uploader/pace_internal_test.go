package uploader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/tilectl/tilectl/tilestore"
)

// grantLimiter grants at most most bytes per Take and counts them; once
// err is set it fails every Take.
type grantLimiter struct {
	most    int
	granted int
	takes   int
	err     error
}

func (g *grantLimiter) Take(ctx context.Context, want int) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	g.takes++
	n := min(want, g.most)
	g.granted += n
	return n, ctx.Err()
}

func pacedTestBody(t *testing.T) *batchBody {
	t.Helper()
	tiles := make([]tilestore.Tile, 8)
	tb := &tileBytes{}
	for i := range tiles {
		tiles[i] = tilestore.Tile{ID: fmt.Sprintf("F-%d", i), Z: 18, ContentType: "image/png", SizeBytes: 1000,
			SHA256: fmt.Sprintf("%064d", i), CapturedAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
		tb.data = append(tb.data, bytes.Repeat([]byte{byte(i)}, 1000))
	}
	body, err := newBatchBody("0190f5a2-7c1e-7d3b-9a55-3f1e2d4c5b6a", tiles, tb)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// Every byte of a paced body is taken from the limiter before it is read,
// in pieces no larger than the limiter grants, and the body is the same
// bytes as an unpaced one.
func TestAPacedBodyTakesEveryByteFromItsLimiter(t *testing.T) {
	body := pacedTestBody(t)
	pr := body.reader()
	defer pr.Close()
	plain, err := io.ReadAll(pr)
	if err != nil {
		t.Fatal(err)
	}
	g := &grantLimiter{most: 300}
	r := body.paced(context.Background(), g)
	defer r.Close()
	paced, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain, paced) {
		t.Fatal("the paced body differs from the unpaced one")
	}
	if g.granted != len(plain) || g.takes < len(plain)/300 {
		t.Fatalf("limiter granted %d bytes in %d takes for a body of %d", g.granted, g.takes, len(plain))
	}
}

// A limiter's error (the request's deadline, say) ends the body's read.
func TestAPacedBodyStopsWhenItsLimiterFails(t *testing.T) {
	body := pacedTestBody(t)
	g := &grantLimiter{most: 300, err: context.DeadlineExceeded}
	r := body.paced(context.Background(), g)
	defer r.Close()
	if _, err := io.ReadAll(r); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read = %v, want the limiter's deadline", err)
	}
}
