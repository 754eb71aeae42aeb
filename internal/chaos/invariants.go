package chaos

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
)

// Invariant names, as they appear in violations and in the report.
const (
	invStoredOnce      = "stored-at-most-once"
	invTerminal        = "tile-uploaded-or-given-up" // or, with a damaged blob, pending
	invUploadedHeld    = "uploaded-tile-held-by-provider"
	invAttempts        = "attempts-equal-rejecting-answers"
	invRejectionsMatch = "journal-rejections-match-sealed-answer"
	invAllCounted      = "every-rejection-counted"
	invGiveUpFDR       = "one-fdr-record-per-give-up"
	invPayloadBinding  = "op-id-bound-to-one-payload"
	invNoConflict      = "provider-saw-no-idempotency-conflict"
	invAmbiguousSettle = "ambiguous-batch-settled-under-its-key"
	invSealedSettled   = "provider-sealed-batch-settled-by-client"
	invNoOpenBatch     = "no-open-batch-after-round"
	invVictimGivenUp   = "poison-tile-given-up"
	invDamagedPending  = "damaged-tile-pending-never-counted-never-sent"
	invBudget          = "tile-rejected-by-at-most-budget-keys"
)

// checker evaluates invariants and tallies them.
type checker struct {
	checked    map[string]int
	violations []string
}

func newChecker() *checker { return &checker{checked: map[string]int{}} }

// check records one evaluation of invariant name; ok false is a violation
// described by the format.
func (c *checker) check(name string, ok bool, format string, args ...any) {
	c.checked[name]++
	if !ok {
		c.violations = append(c.violations, name+": "+fmt.Sprintf(format, args...))
	}
}

// sealedAnswer is the part of a sealed 200 body the checks need.
type sealedAnswer struct {
	OpID    string `json:"op_id"`
	Results []struct {
		TileID string `json:"tile_id"`
		Status string `json:"status"`
		Reason string `json:"reason"`
	} `json:"results"`
}

// answeredBy sorts the members of a batch by the provider's sealed answer:
// rejected (named once, "rejected" or any status but accepted and
// duplicate that the contract knows) and unclear (missing, named twice, or
// a status the contract does not have). A clear rejection is one rejecting
// answer for its tile. An unclear tile is one only when tilectl, asking the
// provider, found it not held, and recorded a protocol_error rejection;
// when the provider held it, tilectl recorded none.
func answeredBy(members []string, body []byte) (rejected, unclear map[string]bool, err error) {
	var a sealedAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, nil, fmt.Errorf("sealed answer is not JSON: %w", err)
	}
	seen := map[string]int{}
	status := map[string]string{}
	for _, r := range a.Results {
		seen[r.TileID]++
		status[r.TileID] = r.Status
	}
	rejected, unclear = map[string]bool{}, map[string]bool{}
	for _, id := range members {
		switch {
		case seen[id] != 1 || (status[id] != "accepted" && status[id] != "duplicate" && status[id] != "rejected"):
			unclear[id] = true
		case status[id] == "rejected":
			rejected[id] = true
		}
	}
	return rejected, unclear, nil
}

// protocolError is the rejection reason tilectl records for a tile an
// answer left unclear and the provider does not hold.
const protocolError = "protocol_error"

// roundFacts is everything one round's checks look at.
type roundFacts struct {
	FlightID string
	Client   clientView
	Provider providerView
	Faults   faultStats
	// Victims are tiles the provider always rejects: no answer can
	// accept them.
	Victims []string
	// Damaged are tiles whose blob was damaged on disk: never sent, never
	// counted, still pending.
	Damaged      []string
	SealedOK     []string          // every op the provider sealed with 200
	JournalState map[string]string // every op in tilectl's journal -> state
	// Budget is upload-pending's --max-per-tile-attempts.
	Budget int
	// Seq is a sequenced round's client sequences; nil for a round run
	// without a client ID.
	Seq *seqFacts
	// SequencesBefore is the provider's client_sequences before the round.
	SequencesBefore map[seqKey]uint64
}

// checkRound evaluates every invariant over f.
func (c *checker) checkRound(f roundFacts) {
	cl, pv := f.Client, f.Provider
	// Stored at most once, and held with the bytes tilectl has.
	for _, st := range pv.Stored {
		c.check(invStoredOnce, st.Writes == 1 && st.Rows == 1,
			"tile %s written %d time(s) in %d row(s) at the provider", st.ID, st.Writes, st.Rows)
	}
	ids := make([]string, 0, len(cl.Tiles))
	for id := range cl.Tiles {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	damaged := map[string]bool{}
	for _, id := range f.Damaged {
		damaged[id] = true
	}
	for _, id := range ids {
		t := cl.Tiles[id]
		c.check(invTerminal, t.Status == "uploaded" || t.Status == "upload_giveup" || damaged[id],
			"tile %s ended the round %s", id, t.Status)
		if t.Status == "uploaded" {
			st, held := pv.Stored[id]
			c.check(invUploadedHeld, held && st.SHA256 == t.SHA256,
				"tile %s is uploaded locally but the provider holds %v (sha256 %q, want %q)", id, held, st.SHA256, t.SHA256)
		}
	}

	// Attempts: one per rejecting answer. Provider answers come from the
	// sealed outcome of each batch tilectl settled; local answers are
	// rejections of tiles that were not members of a batch under that ID.
	expected := map[string]int{}
	members := map[string]map[string]bool{}
	for _, b := range f.Client.Batches {
		m := map[string]bool{}
		for _, id := range b.TileIDs {
			m[id] = true
		}
		members[b.OpID] = m
		c.check(invNoOpenBatch, b.State != "open", "batch %s is still open after the round", b.OpID)
		op, known := pv.Ops[b.OpID]
		if b.State == "settled" {
			ok := known && op.State == "sealed" && op.Status != nil && *op.Status == 200
			c.check(invPayloadBinding, ok, "batch %s is settled but the provider has no sealed 200 for it (record %v, state %q)", b.OpID, known, op.State)
			if !ok {
				continue
			}
			rej, unclear, err := answeredBy(b.TileIDs, op.Body)
			c.check(invRejectionsMatch, err == nil, "batch %s: %v", b.OpID, err)
			var journal []string
			reasons := map[string]string{}
			for _, r := range cl.Rejections {
				if r.OpID == b.OpID && m[r.TileID] {
					journal = append(journal, r.TileID)
					reasons[r.TileID] = r.Reason
				}
			}
			want := make([]string, 0, len(rej))
			for id := range rej {
				want = append(want, id)
				expected[id]++
			}
			for id := range unclear {
				reason, recorded := reasons[id]
				if !recorded {
					_, held := pv.Stored[id]
					c.check(invRejectionsMatch, held, "batch %s left tile %s unclear and tilectl recorded no rejection, "+
						"but the provider does not hold it", b.OpID, id)
					continue
				}
				c.check(invRejectionsMatch, reason == protocolError, "batch %s left tile %s unclear, and tilectl recorded "+
					"its rejection as %q, not %s", b.OpID, id, reason, protocolError)
				want = append(want, id)
				expected[id]++
			}
			sort.Strings(journal)
			sort.Strings(want)
			c.check(invRejectionsMatch, slices.Equal(journal, want),
				"batch %s: journal rejects %v, the provider's sealed answer rejects %v", b.OpID, journal, want)
		}
		want := fingerprintFor(f.FlightID, b)
		c.check(invPayloadBinding, b.Fingerprint == want,
			"op %s: tilectl journaled fingerprint %q for members whose fingerprint is %q", b.OpID, b.Fingerprint, want)
		if known {
			c.check(invPayloadBinding, op.Fingerprint == want,
				"op %s: the provider's operation record has fingerprint %q, the journaled members give %q", b.OpID, op.Fingerprint, want)
		}
		if fps, seen := pv.Fingerprints[b.OpID]; seen {
			c.check(invPayloadBinding, len(fps) == 1 && fps[0] == want,
				"op %s arrived at the provider with fingerprints %v; the journaled members give %q", b.OpID, fps, want)
		}
		if b.HTTPStatus != nil {
			c.check(invNoConflict, *b.HTTPStatus != 422, "batch %s failed with 422", b.OpID)
		}
	}
	for _, r := range cl.Rejections {
		if !members[r.OpID][r.TileID] {
			expected[r.TileID]++
		}
		c.check(invAllCounted, r.Counted, "rejection (%s, %s, %s) was never counted", r.OpID, r.TileID, r.Reason)
	}
	for _, id := range ids {
		t := cl.Tiles[id]
		c.check(invAttempts, t.Attempts == expected[id],
			"tile %s has upload_attempts %d, but %d answers rejected it", id, t.Attempts, expected[id])
		if t.Status == "upload_giveup" {
			c.check(invGiveUpFDR, cl.GiveUpFDR[id] == 1, "given-up tile %s has %d FDR give-up records", id, cl.GiveUpFDR[id])
		}
	}
	for id, n := range cl.GiveUpFDR {
		t, ok := cl.Tiles[id]
		c.check(invGiveUpFDR, ok && t.Status == "upload_giveup",
			"FDR has %d give-up record(s) for tile %s, which is %q", n, id, t.Status)
	}

	c.checkBudget(f, members)
	c.checkHeld(f)
	c.checkSequences(f)

	c.check("provider-metrics-agree-with-ledger", maps.Equal(f.Faults.ByKind, f.Faults.MetricsByKind),
		"the provider's ledger counts faults %v, its /metrics %v", f.Faults.ByKind, f.Faults.MetricsByKind)
	for _, id := range f.Victims {
		t := cl.Tiles[id]
		c.check(invVictimGivenUp, t.Status == "upload_giveup" && t.Attempts >= 1,
			"tile %s can never be accepted but ended %q after %d attempt(s)", id, t.Status, t.Attempts)
	}
	for _, id := range f.Damaged {
		t := cl.Tiles[id]
		_, sent := pv.Stored[id]
		c.check(invDamagedPending, t.Status == "pending" && t.Attempts == 0 && !sent,
			"tile %s has a damaged blob but ended %q after %d attempt(s), held by the provider: %v", id, t.Status, t.Attempts, sent)
	}
	c.check(invNoConflict, f.Faults.Conflicts == 0, "the provider answered IDEMPOTENCY_CONFLICT %d time(s)", f.Faults.Conflicts)
	for _, kind := range []string{"drop_after_store", "cut_body"} {
		for _, op := range f.Faults.OpsByKind[kind] {
			st, known := f.JournalState[op]
			if !known {
				// Not a batch (a capabilities or lookup call), or not
				// this soak's: nothing to settle.
				continue
			}
			c.check(invAmbiguousSettle, st == "settled", "batch %s hit by %s ended %s, not settled under its key", op, kind, st)
		}
	}
	for _, op := range f.SealedOK {
		st := f.JournalState[op]
		c.check(invSealedSettled, st == "settled", "the provider sealed a 200 for %s but tilectl's journal has it %q", op, st)
	}
}

// checkBudget: for each tile, the distinct keys whose answer rejected it
// (the provider's sealed answer for any journaled batch, settled or not,
// and local rejections) are at most the budget. A tile at its budget is
// never sent again. The soak never runs tiles requeue:
// a requeued tile gets a new budget, so a soak that requeues must count
// only the keys after the tile's last requeue.
func (c *checker) checkBudget(f roundFacts, members map[string]map[string]bool) {
	recorded := map[string]bool{}
	for _, r := range f.Client.Rejections {
		recorded[r.OpID+"/"+r.TileID] = true
	}
	keys := map[string]map[string]bool{}
	add := func(tile, op string) {
		if keys[tile] == nil {
			keys[tile] = map[string]bool{}
		}
		keys[tile][op] = true
	}
	for _, b := range f.Client.Batches {
		op, known := f.Provider.Ops[b.OpID]
		if !known || op.State != "sealed" || op.Status == nil || *op.Status != 200 {
			continue
		}
		rej, unclear, err := answeredBy(b.TileIDs, op.Body)
		if err != nil {
			continue // reported by invRejectionsMatch
		}
		for id := range rej {
			add(id, b.OpID)
		}
		for id := range unclear {
			if recorded[b.OpID+"/"+id] { // asked about, and not held
				add(id, b.OpID)
			}
		}
	}
	for _, r := range f.Client.Rejections {
		if !members[r.OpID][r.TileID] {
			add(r.TileID, r.OpID)
		}
	}
	ids := make([]string, 0, len(f.Client.Tiles))
	for id := range f.Client.Tiles {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ops := slices.Sorted(maps.Keys(keys[id]))
		c.check(invBudget, len(ops) <= f.Budget,
			"tile %s was rejected under %d distinct keys %v, over the budget of %d", id, len(ops), ops, f.Budget)
	}
}
