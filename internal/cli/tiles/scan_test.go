package tiles

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

func itoa(n int) string     { return strconv.Itoa(n) }
func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func put(t *testing.T, root, rel string, b []byte) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func jpegBytes(t *testing.T) []byte {
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, image.NewGray(image.Rect(0, 0, 4, 4)), nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// webp is a minimal RIFF/WEBP container header with a VP8L chunk.
var webp = []byte("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00")

func TestScanChecksLayoutRangeAndContent(t *testing.T) {
	root := t.TempDir()
	png, err := os.ReadFile(filepath.Join(tilesDir, "1", "0", "0.png"))
	if err != nil {
		t.Fatal(err)
	}
	put(t, root, "3/2/1.jpg", jpegBytes(t))
	put(t, root, "3/2/2.JPEG", jpegBytes(t))
	put(t, root, "3/2/3.webp", webp)
	put(t, root, "3/2/4.png", png)
	put(t, root, ".hidden/x", []byte("ignored"))
	put(t, root, "3/2/.DS_Store", []byte("ignored"))
	bad := map[string]string{
		"3/2/5.webp":  "not a WebP image",
		"3/2/6.jpg":   "not a JPEG image (looks like image/png)",
		"3/2/7.gif":   `extension ".gif" is not one of`,
		"3/02/0.png":  `x directory: "02" is not a non-negative integer without leading zeros`,
		"3/2/-1.png":  "y file name",
		"z/2/1.png":   "zoom directory",
		"3/2/9/1.png": "unexpected directory",
		"3/1/1.png":   "file is empty",
		"3/1/0.png":   "the extension says .png", // truncated PNG: magic only
		"3/2/4.webp":  "same tile z=3 x=2 y=4",
	}
	contents := map[string][]byte{
		"3/2/5.webp": []byte("RIFF....AVI LIST"), "3/2/6.jpg": png, "3/2/7.gif": png, "3/02/0.png": png,
		"3/2/-1.png": png, "z/2/1.png": png, "3/2/9/1.png": png, "3/1/1.png": {}, "3/1/0.png": png[:12],
		"3/2/4.webp": webp,
	}
	for rel := range bad {
		put(t, root, rel, contents[rel])
	}
	valid, problems, _, err := scan(context.Background(), root, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if valid != 4 {
		t.Errorf("%d valid tiles, want 4", valid)
	}
	got := map[string]string{}
	for _, p := range problems {
		rel, _ := filepath.Rel(root, p.Path)
		got[filepath.ToSlash(rel)] = p.Reason
	}
	for rel, want := range bad {
		if rel == "3/2/9/1.png" {
			rel = "3/2/9"
		}
		if !strings.Contains(got[rel], want) {
			t.Errorf("%s: reason %q, want it to contain %q", rel, got[rel], want)
		}
	}
	if len(problems) != len(bad) {
		t.Errorf("%d problems, want %d: %v", len(problems), len(bad), got)
	}
}

func TestScanOfMissingDirectoryIsAnError(t *testing.T) {
	if _, _, _, err := scan(context.Background(), filepath.Join(t.TempDir(), "nope"), 4096); err == nil {
		t.Fatal("missing directory accepted")
	}
}

func TestScanFindsATileNamedTwiceWhenTheTwoFilesFallInDifferentBatches(t *testing.T) {
	root := t.TempDir()
	png, err := os.ReadFile(filepath.Join(tilesDir, "1", "0", "0.png"))
	if err != nil {
		t.Fatal(err)
	}
	// 9/0/<y>.png for y = 0..299, in walk (lexical) order; the webp of the
	// tile whose png is the last file of the first batch comes right after
	// it, in the second batch.
	var names []string
	for y := range 300 {
		names = append(names, itoa(y)+".png")
	}
	sort.Strings(names)
	last := names[scanBatch-1]
	for _, n := range names {
		put(t, root, "9/0/"+n, png)
	}
	twin := strings.TrimSuffix(last, ".png") + ".webp"
	put(t, root, "9/0/"+twin, webp)
	valid, problems, _, err := scan(context.Background(), root, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if valid != 300 || len(problems) != 1 || !strings.HasSuffix(problems[0].Path, twin) ||
		!strings.Contains(problems[0].Reason, "same tile z=9 x=0 y="+strings.TrimSuffix(last, ".png")) {
		t.Fatalf("%d valid, problems %v; want 300 valid and %s named as the same tile as %s", valid, problems, twin, last)
	}
}
