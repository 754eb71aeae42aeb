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
	return WriteTileAt(t, dir, 10, i, 7, v)
}

// WriteTileAt writes tile z/x/y as WriteTile does, its pixels from x, y,
// z and v.
func WriteTileAt(t TB, dir string, z, x, y int, v uint8) string {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, 4, 4))
	img.Pix[0], img.Pix[1], img.Pix[2] = uint8(x), uint8(x>>8), v
	if z != 10 || y != 7 {
		img.Pix[3], img.Pix[4], img.Pix[5] = uint8(y), uint8(y>>8), uint8(z)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatalf("encode tile %d/%d/%d: %v", z, x, y, err)
	}
	p := filepath.Join(dir, strconv.Itoa(z), strconv.Itoa(x), strconv.Itoa(y)+".png")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatalf("write tile: %v", err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatalf("write tile: %v", err)
	}
	return p
}
