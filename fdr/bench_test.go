package fdr

import (
	"context"
	"path/filepath"
	"testing"
)

func benchAppend(b *testing.B, durable bool) {
	r, err := Open(context.Background(), filepath.Join(b.TempDir(), "fdr.ring"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	e := Entry{Kind: "upload.giveup", Durable: durable, Payload: map[string]any{
		"tile_id": "f1-17-70312-43079", "flight_id": "f1", "attempts": 5, "last_rejection_reason": "checksum_mismatch"}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkAppend(b *testing.B)        { benchAppend(b, false) }
func BenchmarkAppendDurable(b *testing.B) { benchAppend(b, true) }

func BenchmarkReadFile(b *testing.B) {
	path := filepath.Join(b.TempDir(), "fdr.ring")
	r, err := Open(context.Background(), path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 50000; i++ { // fills and wraps the default 4 MiB
		r.Append(context.Background(), Entry{Kind: "upload.giveup", Payload: map[string]int{"i": i}})
	}
	r.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ReadFile(context.Background(), path); err != nil {
			b.Fatal(err)
		}
	}
}
