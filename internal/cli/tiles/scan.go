package tiles

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// found is one valid tile file under the import directory.
type found struct {
	Path        string // on disk
	Rel         string // relative to the import directory, slash-separated
	Z           int
	X, Y        int64
	Ext         string // lower case, no dot
	ContentType string
	Size        int64
	SHA256      string
	ModTime     time.Time
}

// Problem is a file that cannot be imported, and why.
type Problem struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

const layout = "<z>/<x>/<y>.<png|jpg|jpeg|webp>"

var contentTypes = map[string]string{
	"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "webp": "image/webp",
}

// scan walks dir and checks every file: its place in the z/x/y layout, the
// coordinates' range, and that its bytes really are the image type its
// extension claims. It reads each file once, hashing it on the way. Hidden
// files and directories (".name") are ignored. The error is for the walk
// itself (dir missing, context cancelled), not for bad files.
func scan(ctx context.Context, dir string) ([]found, []Problem, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("import directory: %w", err)
	}
	if !info.IsDir() {
		return nil, nil, fmt.Errorf("import directory %q is not a directory", dir)
	}
	var (
		tiles    []found
		problems []Problem
		seen     = map[[3]int64]string{}
	)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			problems = append(problems, Problem{path, "unreadable: " + errText(err)})
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if path == dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// WalkDir does not follow links; neither may the import, or a
			// link could pull a file from anywhere into the cache.
			problems = append(problems, Problem{path, "is a symbolic link: tiles are imported only from regular files inside the directory"})
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if d.IsDir() {
			if len(parts) > 2 {
				problems = append(problems, Problem{path, "unexpected directory: the layout is " + layout})
				return fs.SkipDir
			}
			return nil
		}
		t, reason := checkFile(path, parts)
		if reason != "" {
			problems = append(problems, Problem{path, reason})
			return nil
		}
		key := [3]int64{int64(t.Z), t.X, t.Y}
		if first, dup := seen[key]; dup {
			problems = append(problems, Problem{path, fmt.Sprintf("same tile z=%d x=%d y=%d as %q", t.Z, t.X, t.Y, first)})
			return nil
		}
		seen[key] = path
		tiles = append(tiles, t)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("scan %q: %w", dir, err)
	}
	return tiles, problems, nil
}

// checkFile validates one file at parts (its path below the import dir)
// and returns it, or the reason it cannot be imported.
func checkFile(path string, parts []string) (found, string) {
	z, x, y, ext, ct, reason := parseTilePath(parts)
	if reason != "" {
		if strings.HasPrefix(reason, "extension ") {
			reason = fmt.Sprintf("extension %q is not one of .png, .jpg, .jpeg, .webp", filepath.Ext(path))
		}
		return found{}, reason
	}
	t := found{Path: path, Rel: strings.Join(parts, "/"), Z: z, X: x, Y: y, Ext: ext, ContentType: ct}
	if reason := t.readContent(); reason != "" {
		return found{}, reason
	}
	return t, ""
}

// coordinate parses a canonical non-negative decimal (no sign, no leading
// zeros), so that two spellings can never name the same tile.
func coordinate(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("%q is not a non-negative integer without leading zeros", s)
	}
	return n, nil
}

// parseTilePath reads z, x and y from a path's three parts below the
// import directory (<z>/<x>/<y>.<ext>): canonical decimal numbers, z in
// 0..24, x and y in 0..2^z-1, a known image extension. It only reads the
// names, never the file; reason says what is wrong.
func parseTilePath(parts []string) (z int, x, y int64, ext, contentType, reason string) {
	if len(parts) != 3 {
		return 0, 0, 0, "", "", "not in the " + layout + " layout"
	}
	base, ext, _ := strings.Cut(parts[2], ".")
	ext = strings.ToLower(ext)
	ct, ok := contentTypes[ext]
	if !ok {
		return 0, 0, 0, "", "", fmt.Sprintf("extension %q is not one of .png, .jpg, .jpeg, .webp", ext)
	}
	zz, err := coordinate(parts[0])
	if err != nil {
		return 0, 0, 0, "", "", "zoom directory: " + err.Error()
	}
	if zz > 24 {
		return 0, 0, 0, "", "", fmt.Sprintf("zoom %d is outside 0..24", zz)
	}
	x, err = coordinate(parts[1])
	if err != nil {
		return 0, 0, 0, "", "", "x directory: " + err.Error()
	}
	y, err = coordinate(base)
	if err != nil {
		return 0, 0, 0, "", "", "y file name: " + err.Error()
	}
	limit := int64(1)<<zz - 1
	if x > limit {
		return 0, 0, 0, "", "", fmt.Sprintf("x %d is outside 0..%d for zoom %d", x, limit, zz)
	}
	if y > limit {
		return 0, 0, 0, "", "", fmt.Sprintf("y %d is outside 0..%d for zoom %d", y, limit, zz)
	}
	return int(zz), x, y, ext, ct, ""
}

// readContent checks the image type and records size, hash and mtime.
func (t *found) readContent() string {
	// O_NOFOLLOW: a file swapped for a link after the walk is refused too.
	f, err := os.OpenFile(t.Path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "unreadable: " + errText(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "unreadable: " + errText(err)
	}
	if !st.Mode().IsRegular() {
		return "not a regular file"
	}
	h := sha256.New()
	counter := &countWriter{}
	br := bufio.NewReader(io.TeeReader(f, io.MultiWriter(h, counter)))
	head, _ := br.Peek(512)
	if len(head) == 0 {
		return "file is empty"
	}
	if reason := checkImage(t.Ext, head, br); reason != "" {
		return reason
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return "unreadable: " + errText(err)
	}
	t.Size, t.SHA256, t.ModTime = counter.n, hex.EncodeToString(h.Sum(nil)), st.ModTime().UTC()
	return ""
}

func checkImage(ext string, head []byte, r io.Reader) string {
	want := map[string]string{"png": "a PNG", "jpg": "a JPEG", "jpeg": "a JPEG", "webp": "a WebP"}[ext]
	mismatch := func(detail string) string {
		msg := fmt.Sprintf("the extension says .%s but the content is not %s image", ext, want)
		if detail != "" {
			msg += " (" + detail + ")"
		}
		return msg
	}
	var decode func(io.Reader) (image.Config, error)
	switch ext {
	case "png":
		if !bytes.HasPrefix(head, []byte("\x89PNG\r\n\x1a\n")) {
			return mismatch("looks like " + http.DetectContentType(head))
		}
		decode = png.DecodeConfig
	case "jpg", "jpeg":
		if !bytes.HasPrefix(head, []byte("\xff\xd8\xff")) {
			return mismatch("looks like " + http.DetectContentType(head))
		}
		decode = jpeg.DecodeConfig
	case "webp":
		// No WebP decoder in the standard library: the RIFF/WEBP header
		// with a VP8, VP8L or VP8X chunk is the check.
		if len(head) < 16 || string(head[:4]) != "RIFF" || string(head[8:12]) != "WEBP" ||
			!strings.HasPrefix(string(head[12:16]), "VP8") {
			return mismatch("looks like " + http.DetectContentType(head))
		}
		return ""
	}
	cfg, err := decode(r)
	if err != nil {
		return mismatch("header: " + err.Error())
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return mismatch(fmt.Sprintf("size %dx%d", cfg.Width, cfg.Height))
	}
	return ""
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// errText is an OS error without the path, which the Problem already has.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
