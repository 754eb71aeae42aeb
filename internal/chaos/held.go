package chaos

import (
	"encoding/json"
	"maps"
	"slices"
	"sort"
)

// Invariants that hold tilectl's give-ups and the provider's sealed
// answers to what the provider actually wrote.
const (
	invGivenUpNotHeld         = "given-up-tile-not-held-by-provider"
	invAnswerAgreesWithWrites = "sealed-answer-agrees-with-provider-writes"
)

// checkHeld: a tile tilectl gave up is not held by the provider (a
// give-up asks a person to act on a tile that is not up; a held one would
// be sent again by a requeue), and each answer the provider sealed with a
// 200 agrees with its own writes under that key: a tile written under the
// key is not answered rejected (a batch run again under its key answers
// what it holds duplicate), and a tile answered accepted or duplicate is
// held. Answers a fault left a tile out of say nothing about it.
func (c *checker) checkHeld(f roundFacts) {
	cl, pv := f.Client, f.Provider
	ids := slices.Sorted(maps.Keys(cl.Tiles))
	for _, id := range ids {
		if cl.Tiles[id].Status != "upload_giveup" {
			continue
		}
		st, held := pv.Stored[id]
		c.check(invGivenUpNotHeld, !held || st.Rows == 0,
			"tile %s is given up locally but the provider holds it (sha256 %q, written under %v)", id, st.SHA256, writersOf(pv, id))
	}
	ops := slices.Sorted(maps.Keys(pv.Ops))
	for _, opID := range ops {
		op := pv.Ops[opID]
		if op.State != "sealed" || op.Status == nil || *op.Status != 200 {
			continue
		}
		var a sealedAnswer
		if err := json.Unmarshal(op.Body, &a); err != nil {
			c.check(invAnswerAgreesWithWrites, false, "op %s: sealed answer is not JSON: %v", opID, err)
			continue
		}
		written := map[string]bool{}
		for _, id := range pv.Written[opID] {
			written[id] = true
		}
		for _, r := range a.Results {
			switch r.Status {
			case "rejected":
				c.check(invAnswerAgreesWithWrites, !written[r.TileID],
					"op %s wrote tile %s, but its sealed answer rejects it (%s)", opID, r.TileID, r.Reason)
			case "accepted", "duplicate":
				st, held := pv.Stored[r.TileID]
				c.check(invAnswerAgreesWithWrites, held && st.Rows > 0,
					"op %s answers tile %s %s, but the provider does not hold it", opID, r.TileID, r.Status)
			}
		}
	}
}

// writersOf lists the op IDs the provider wrote tile id under.
func writersOf(pv providerView, id string) []string {
	var out []string
	for op, tiles := range pv.Written {
		if slices.Contains(tiles, id) {
			out = append(out, op)
		}
	}
	sort.Strings(out)
	return out
}
