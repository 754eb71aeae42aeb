package tiles

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzParseTilePath: whatever names a directory holds, the layout parser
// never panics, and what it accepts is a real tile address whose canonical
// path is exactly the input (so two spellings never name one tile).
func FuzzParseTilePath(f *testing.F) {
	for _, seed := range []string{"3/2/5.png", "0/0/0.jpg", "24/16777215/16777215.webp", "25/0/0.png",
		"3/8/0.png", "03/1/1.png", "3/-1/1.png", "3/1/1", "3/1/1.PNG", "1/1/1.png.png", "a/b/c.png", "3/1/+1.png",
		"3/1/1.png/x", "9223372036854775807/0/0.png"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		parts := strings.Split(rel, "/")
		z, x, y, ext, ct, reason := parseTilePath(parts)
		if reason != "" {
			return
		}
		if z < 0 || z > 24 {
			t.Fatalf("%q: accepted zoom %d", rel, z)
		}
		limit := int64(1)<<z - 1
		if x < 0 || y < 0 || x > limit || y > limit {
			t.Fatalf("%q: accepted x=%d y=%d at zoom %d", rel, x, y, z)
		}
		if ct == "" {
			t.Fatalf("%q: accepted without a content type", rel)
		}
		if canon := fmt.Sprintf("%d/%d/%d.%s", z, x, y, ext); !strings.EqualFold(canon, rel) {
			t.Fatalf("%q accepted but its canonical form is %q", rel, canon)
		}
	})
}
