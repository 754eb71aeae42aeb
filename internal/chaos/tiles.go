package chaos

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// tileZoom is the zoom level of generated tiles: 2^12 columns and rows leave
// plenty of room for unique random coordinates.
const tileZoom = 12

// writeFlightDir writes n small, valid, distinct PNG tiles under dir in the
// z/x/y.png layout `tilectl tiles import` reads. Contents and coordinates
// come from rng, so a seed reproduces the same flight.
func writeFlightDir(dir string, n int, rng *rand.Rand) error {
	seen := make(map[[2]int]bool, n)
	for len(seen) < n {
		x, y := rng.IntN(1<<tileZoom), rng.IntN(1<<tileZoom)
		if seen[[2]int{x, y}] {
			continue
		}
		seen[[2]int{x, y}] = true
		b, err := tilePNG(rng)
		if err != nil {
			return err
		}
		p := filepath.Join(dir, strconv.Itoa(tileZoom), strconv.Itoa(x), strconv.Itoa(y)+".png")
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return fmt.Errorf("write tile %s: %w", p, err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return fmt.Errorf("write tile %s: %w", p, err)
		}
	}
	return nil
}

// tilePNG encodes a 16x16 image of random pixels: every tile's bytes (and
// so its sha256) differ.
func tilePNG(rng *rand.Rand) ([]byte, error) {
	img := image.NewRGBA(image.Rect(0, 0, 16, 16))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)), 255
	}
	img.Set(0, 0, color.RGBA{1, 2, 3, 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("encode tile: %w", err)
	}
	return buf.Bytes(), nil
}

// corruption is what was done to one imported tile's blob on disk.
type corruption string

const (
	corruptTruncate corruption = "truncate" // size differs: blob_corrupt
	corruptAlter    corruption = "alter"    // same size, sha256 differs: blob_corrupt
	corruptDelete   corruption = "delete"   // blob_missing
)

var corruptions = []corruption{corruptTruncate, corruptAlter, corruptDelete}

// corruptBlob damages the blob at path the way c says.
func corruptBlob(path string, c corruption) error {
	switch c {
	case corruptTruncate:
		st, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("corrupt %s: %w", path, err)
		}
		if err := os.Truncate(path, st.Size()/2); err != nil {
			return fmt.Errorf("corrupt %s: %w", path, err)
		}
	case corruptAlter:
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("corrupt %s: %w", path, err)
		}
		if len(b) == 0 {
			return fmt.Errorf("corrupt %s: empty blob", path)
		}
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return fmt.Errorf("corrupt %s: %w", path, err)
		}
	case corruptDelete:
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("corrupt %s: %w", path, err)
		}
	default:
		return fmt.Errorf("corrupt %s: unknown corruption %q", path, c)
	}
	return nil
}
