package iostreams

import (
	"strings"
	"unicode/utf8"
)

// Field is one part of a status line. Fit keeps the fields of lowest
// Priority longest: when the line is too wide for the terminal, the field
// of highest Priority goes first (shortened to Short first, when it has
// one), and so on, instead of the line being cut wherever the width ends.
type Field struct {
	Text     string
	Short    string // a shorter form to try before dropping it; "" for none
	Priority int    // 0 is kept longest
}

// Fit joins fields, in their order, with two spaces, dropping fields by
// priority until the line is narrower than width (one column is left free
// so the line never wraps). A last field still too wide is cut.
func Fit(fields []Field, width int) string {
	shown := make([]string, len(fields))
	for i, f := range fields {
		shown[i] = f.Text
	}
	join := func() string {
		var parts []string
		for _, s := range shown {
			if s != "" {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, "  ")
	}
	for line := join(); utf8.RuneCountInString(line) >= width; line = join() {
		worst := -1
		for i, f := range fields {
			if shown[i] != "" && (worst < 0 || f.Priority >= fields[worst].Priority) {
				worst = i
			}
		}
		left := 0
		for _, s := range shown {
			if s != "" {
				left++
			}
		}
		if worst < 0 || left == 1 {
			return cut(line, width)
		}
		if f := fields[worst]; f.Short != "" && shown[worst] != f.Short {
			shown[worst] = f.Short
		} else {
			shown[worst] = ""
		}
	}
	return join()
}

// cut is text cut to width-1 columns.
func cut(text string, width int) string {
	if utf8.RuneCountInString(text) < width {
		return text
	}
	r := []rune(text)
	return string(r[:max(width-1, 0)])
}
