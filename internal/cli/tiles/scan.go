package tiles

import (
	"bytes"
	"context"
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
)

// candidate is a file whose path names a tile: its place in the z/x/y
// layout and the coordinates' range are checked, its content is not.
type candidate struct {
	Path        string // on disk
	Z           int
	X, Y        int64
	Ext         string // lower case, no dot
	ContentType string
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

// scanBatch is how many files scan checks at once.
const scanBatch = 256

// scan checks every file under dir as the import will: its place in the
// z/x/y layout, the coordinates' range, and that its first bytes are an
// image of the type its extension claims, and that it reads to its end (it
// is not hashed). A second file naming a tile already found valid
// (3/2/4.png, then 3/2/4.webp) is a problem too. It holds one batch of
// paths, so its memory does not grow with the directory: it returns how
// many files are valid and every problem, in walk order. The error is for
// the walk itself (dir missing, context cancelled), not for bad files.
func scan(ctx context.Context, dir string, block int64) (valid int, problems []Problem, footprint int64, err error) {
	s := &scanner{readers: newTileReaders(), block: max(block, 1)}
	err = walkTiles(ctx, dir, func(c candidate) error {
		s.batch = append(s.batch, scanned{c: c})
		if len(s.batch) < scanBatch {
			return nil
		}
		return s.check(ctx)
	}, func(p Problem) { s.batch = append(s.batch, scanned{problem: &p}) })
	if err == nil {
		err = s.check(ctx)
	}
	return s.valid, s.problems, s.footprint, err
}

// scanner is scan's state between batches.
type scanner struct {
	readers  []*tileReader
	batch    []scanned        // in walk order
	col      [2]int64         // the z/x directory being walked
	seen     map[int64]string // y -> the first valid file of that tile in col
	valid    int
	problems []Problem
	// block is the cache filesystem's block size; footprint adds up what
	// the valid files will take there: each file and each z/x directory
	// rounded up to whole blocks.
	block     int64
	footprint int64
}

// scanned is one entry of the walk: a file to check, or a problem the
// walk found by itself.
type scanned struct {
	c       candidate
	problem *Problem
	reason  string // what check found wrong with c
	size    int64
}

// check checks the batch's files at once, then takes the results in walk
// order.
func (s *scanner) check(ctx context.Context) error {
	b := s.batch
	defer func() { s.batch = s.batch[:0] }()
	err := forEach(ctx, len(b), s.readers, func(r *tileReader, i int) error {
		if b[i].problem == nil {
			b[i].size, b[i].reason = r.check(b[i].c)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range b {
		c := e.c
		switch {
		case e.problem != nil:
			s.problems = append(s.problems, *e.problem)
			continue
		case e.reason != "":
			s.problems = append(s.problems, Problem{c.Path, e.reason})
			continue
		}
		// Every file of a z/x column is in one directory, which the walk
		// visits whole: the tiles seen are those of this directory.
		if k := [2]int64{int64(c.Z), c.X}; s.seen == nil || k != s.col {
			s.col, s.seen = k, map[int64]string{}
			s.footprint += s.block
		}
		if first, dup := s.seen[c.Y]; dup {
			s.problems = append(s.problems, Problem{c.Path, fmt.Sprintf("same tile z=%d x=%d y=%d as %q", c.Z, c.X, c.Y, first)})
			continue
		}
		s.seen[c.Y] = c.Path
		s.valid++
		s.footprint += (e.size + s.block - 1) / s.block * s.block
	}
	return nil
}

// walkTiles walks dir in lexical order and hands visit every file whose
// path names a tile, and problem every other entry that is not imported
// (a symbolic link, a path outside the layout). Hidden files and
// directories (".name") are ignored. The error is for the walk itself (dir
// missing, context cancelled) or visit's.
func walkTiles(ctx context.Context, dir string, visit func(candidate) error, problem func(Problem)) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("import directory: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("import directory %q is not a directory", dir)
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			problem(Problem{path, "unreadable: " + errText(err)})
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
			problem(Problem{path, "is a symbolic link: tiles are imported only from regular files inside the directory"})
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if d.IsDir() {
			if len(parts) > 2 {
				problem(Problem{path, "unexpected directory: the layout is " + layout})
				return fs.SkipDir
			}
			return nil
		}
		z, x, y, ext, ct, reason := parseTilePath(parts)
		if reason != "" {
			if strings.HasPrefix(reason, "extension ") {
				reason = fmt.Sprintf("extension %q is not one of .png, .jpg, .jpeg, .webp", filepath.Ext(path))
			}
			problem(Problem{path, reason})
			return nil
		}
		return visit(candidate{Path: path, Z: z, X: x, Y: y, Ext: ext, ContentType: ct})
	})
	if err != nil {
		return fmt.Errorf("scan %q: %w", dir, err)
	}
	return nil
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

// errText is an OS error without the path, which the Problem already has.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
