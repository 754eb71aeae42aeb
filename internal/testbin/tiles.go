package testbin

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
)

// WriteTile writes tile 10/i/7 as a valid 4x4 PNG in the z/x/y.png layout
// `tilectl tiles import` reads, under dir, and returns its path. Its pixels
// come from i and v, so distinct (i, v) give distinct bytes.
func WriteTile(t TB, dir string, i int, v uint8) string {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, 4, 4))
	img.Pix[0], img.Pix[1], img.Pix[2] = uint8(i), uint8(i>>8), v
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatalf("encode tile %d: %v", i, err)
	}
	p := filepath.Join(dir, "10", strconv.Itoa(i), "7.png")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatalf("write tile: %v", err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatalf("write tile: %v", err)
	}
	return p
}
