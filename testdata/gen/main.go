// Command gen writes tilectl's test tiles: small, real, deterministic PNGs in
// testdata/tiles/<z>/<x>/<y>.png, and a few invalid cases in testdata/bad.
// Run it from the repository root: go run ./testdata/gen
//
// Each tile is a gradient whose colours depend on z, x and y, with the three
// numbers drawn as bit rows, so every tile's bytes differ.
package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"log"
	"os"
	"path/filepath"
)

const size = 32 // pixels per side: small, but a real image

func main() {
	if err := run("testdata"); err != nil {
		log.Fatal(err)
	}
}

func run(root string) error {
	for _, d := range []string{"tiles", "bad"} {
		if err := os.RemoveAll(filepath.Join(root, d)); err != nil {
			return err
		}
	}
	n := 0
	// z=1: all 4; z=2: all 16; z=3: the 28 tiles of columns 0..3 except
	// four corners of that block = 48 tiles over three zoom levels.
	for z := 1; z <= 3; z++ {
		side := 1 << z
		for x := 0; x < side; x++ {
			for y := 0; y < side; y++ {
				if z == 3 && (x > 3 || (x == 0 || x == 3) && (y == 0 || y == 7)) {
					continue
				}
				if err := writePNG(filepath.Join(root, "tiles", fmt.Sprint(z), fmt.Sprint(x), fmt.Sprintf("%d.png", y)), z, x, y); err != nil {
					return err
				}
				n++
			}
		}
	}
	bad := []struct {
		path string
		png  [3]int
		text string
	}{
		{path: "not-an-image/2/1/1.png", text: "this is text, not a PNG\n"},
		{path: "y-out-of-range/1/0/2.png", png: [3]int{1, 0, 2}},
		{path: "x-out-of-range/2/4/0.png", png: [3]int{2, 4, 0}},
		{path: "zoom-too-deep/25/0/0.png", png: [3]int{25, 0, 0}},
		{path: "bad-layout/2/1.png", png: [3]int{2, 0, 1}},
		{path: "mixed/2/0/0.png", png: [3]int{2, 0, 0}},
		{path: "mixed/2/0/1.png", png: [3]int{2, 0, 1}},
		{path: "mixed/2/0/2.png", text: "not an image either\n"},
	}
	for _, b := range bad {
		p := filepath.Join(root, "bad", filepath.FromSlash(b.path))
		var err error
		if b.text != "" {
			err = write(p, []byte(b.text))
		} else {
			err = writePNG(p, b.png[0], b.png[1], b.png[2])
		}
		if err != nil {
			return err
		}
	}
	fmt.Printf("wrote %d tiles to %s and %d invalid cases to %s\n", n,
		filepath.Join(root, "tiles"), len(bad), filepath.Join(root, "bad"))
	return nil
}

func writePNG(path string, z, x, y int) error {
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	for py := 0; py < size; py++ {
		for px := 0; px < size; px++ {
			img.Set(px, py, color.NRGBA{
				R: uint8(px*255/size + x*37),
				G: uint8(py*255/size + y*53),
				B: uint8(z * 60),
				A: 255,
			})
		}
	}
	// Rows 2, 4 and 6 spell z, x and y in binary (white = 1, black = 0),
	// four pixels per bit.
	for row, v := range []int{z, x, y} {
		for bit := 0; bit < 8; bit++ {
			c := color.NRGBA{A: 255}
			if v>>(7-bit)&1 == 1 {
				c = color.NRGBA{R: 255, G: 255, B: 255, A: 255}
			}
			for dx := 0; dx < 4; dx++ {
				img.Set(bit*4+dx, (row+1)*2, c)
			}
		}
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&buf, img); err != nil {
		return err
	}
	return write(path, buf.Bytes())
}

func write(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
