package fdr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Follow calls emit for every record with a sequence number above after,
// oldest first, then keeps polling the ring every interval and emits new
// records as they are appended, until ctx ends (it then returns ctx.Err())
// or emit fails. Records appended and overwritten between two polls are
// never seen; the jump in Seq shows it.
func Follow(ctx context.Context, path string, after uint64, interval time.Duration, emit func(Record) error) error {
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var seen uint64 // header nextSeq at the last full read
	for {
		next, err := peekNextSeq(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err == nil && next != seen {
			recs, _, err := ReadFile(ctx, path)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.Seq <= after {
					continue
				}
				if err := emit(r); err != nil {
					return err
				}
				after = r.Seq
			}
			seen = next
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// peekNextSeq reads only the header, so an idle ring costs one small read
// per poll. A damaged header reads as 0, which forces a full read.
func peekNextSeq(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("follow fdr %s: %w", path, err)
	}
	defer f.Close()
	var b [headerLen]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		return 0, nil
	}
	h, err := decodeHeader(b[:])
	if err != nil {
		return 0, nil
	}
	return h.nextSeq, nil
}
