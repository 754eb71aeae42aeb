package migrate

import (
	"encoding/json"
	"fmt"

	"github.com/tilectl/tilectl/internal/iostreams"
)

// Result is `migrate up|down|force -o json`'s output (stable; see README):
// the action, the schema version before and after, and whether anything
// changed.
type Result struct {
	Action  string `json:"action"` // "up", "down" or "force"
	From    int64  `json:"from_version"`
	To      int64  `json:"to_version"`
	Changed bool   `json:"changed"`
}

// report prints r as JSON with -o json, else the sentence text.
func (d Deps) report(r Result, text string, args ...any) error {
	if iostreams.IsJSON(d.Output) {
		enc := json.NewEncoder(d.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	_, err := fmt.Fprintf(d.IO.Out, text, args...)
	return err
}
