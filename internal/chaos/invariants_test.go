package chaos

import (
	"strings"
	"testing"
)

func i32(v int32) *int32 { return &v }

// cleanFacts is one round where everything went right: t1 uploaded, t2
// rejected once by the provider and once locally (blob_corrupt) then given
// up at 2 attempts, t3 stored by op1 whose answer left it out, then
// answered duplicate by op2 and uploaded, t4 with a
// damaged blob never sent and still pending with no attempt.
func cleanFacts() roundFacts {
	return roundFacts{
		FlightID: "f1",
		Victims:  []string{"t2"},
		Damaged:  []string{"t4"},
		Client: clientView{
			Tiles: map[string]clientTile{
				"t1": {ID: "t1", SHA256: "a1", Status: "uploaded"},
				"t2": {ID: "t2", SHA256: "a2", Status: "upload_giveup", Attempts: 2},
				"t3": {ID: "t3", SHA256: "a3", Status: "uploaded", Attempts: 1},
				"t4": {ID: "t4", SHA256: "a4", Status: "pending"},
			},
			Batches: []clientBatch{
				{OpID: "op1", TileIDs: []string{"t1", "t2", "t3"}, SHA256s: []string{"a1", "a2", "a3"}, State: "settled"},
				{OpID: "op2", TileIDs: []string{"t3"}, SHA256s: []string{"a3"}, State: "settled"},
			},
			Rejections: []clientRejection{
				{OpID: "op1", TileID: "t2", Reason: "decode_error", Counted: true},
				{OpID: "op1", TileID: "t3", Reason: "protocol_error", Counted: true},
				{OpID: "local-1", TileID: "t2", Reason: "blob_corrupt", Counted: true},
			},
			GiveUpFDR: map[string]int{"t2": 1},
		},
		Provider: providerView{
			Ops: map[string]providerOp{
				"op1": {OpID: "op1", State: "sealed", Status: i32(200),
					Body: []byte(`{"op_id":"op1","results":[{"tile_id":"t1","status":"accepted"},{"tile_id":"t2","status":"rejected","reason":"decode_error"}]}`)},
				"op2": {OpID: "op2", State: "sealed", Status: i32(200),
					Body: []byte(`{"op_id":"op2","results":[{"tile_id":"t3","status":"duplicate"}]}`)},
			},
			Stored: map[string]storedTile{
				"t1": {ID: "t1", SHA256: "a1", Writes: 1, Rows: 1},
				"t3": {ID: "t3", SHA256: "a3", Writes: 1, Rows: 1},
			},
			// op1 wrote t3 and its answer left it out (omit_results).
			Written: map[string][]string{"op1": {"t1", "t3"}},
		},
		Faults:       faultStats{OpsByKind: map[string][]string{"cut_body": {"op1"}}},
		SealedOK:     []string{"op1", "op2"},
		JournalState: map[string]string{"op1": "settled", "op2": "settled"},
		Budget:       2,
	}
}

// withFingerprints fills in the fingerprints both sides record for f's
// batches, as an honest client and provider would.
func withFingerprints(f roundFacts) roundFacts {
	f.Provider.Fingerprints = map[string][]string{}
	for i, b := range f.Client.Batches {
		fp := fingerprintFor(f.FlightID, b)
		f.Client.Batches[i].Fingerprint = fp
		op := f.Provider.Ops[b.OpID]
		op.Fingerprint = fp
		f.Provider.Ops[b.OpID] = op
		f.Provider.Fingerprints[b.OpID] = []string{fp}
	}
	return f
}

func TestCheckRoundPassesACleanRound(t *testing.T) {
	c := newChecker()
	c.checkRound(withFingerprints(cleanFacts()))
	if len(c.violations) != 0 {
		t.Fatalf("violations on a clean round: %v", c.violations)
	}
	for _, inv := range []string{invStoredOnce, invTerminal, invUploadedHeld, invAttempts, invRejectionsMatch,
		invAllCounted, invGiveUpFDR, invPayloadBinding, invNoConflict, invAmbiguousSettle, invSealedSettled, invNoOpenBatch, invVictimGivenUp, invBudget, invDamagedPending,
		invGivenUpNotHeld, invAnswerAgreesWithWrites} {
		if c.checked[inv] == 0 {
			t.Errorf("invariant %s was never evaluated", inv)
		}
	}
}

func TestCheckRoundCatchesEachKindOfDamage(t *testing.T) {
	cases := []struct {
		name   string
		damage func(f *roundFacts)
		want   string
	}{
		{"tile stored twice", func(f *roundFacts) { f.Provider.Stored["t1"] = storedTile{ID: "t1", SHA256: "a1", Writes: 2, Rows: 1} }, invStoredOnce},
		{"tile left pending", func(f *roundFacts) { setTile(f, "t1", func(t *clientTile) { t.Status = "pending" }) }, invTerminal},
		{"uploaded tile the provider lacks", func(f *roundFacts) { delete(f.Provider.Stored, "t1") }, invUploadedHeld},
		{"uploaded with other bytes", func(f *roundFacts) { f.Provider.Stored["t3"] = storedTile{ID: "t3", SHA256: "zz", Writes: 1, Rows: 1} }, invUploadedHeld},
		{"replayed answer counted twice", func(f *roundFacts) { setTile(f, "t3", func(t *clientTile) { t.Attempts = 2 }) }, invAttempts},
		{"answer lost", func(f *roundFacts) { setTile(f, "t2", func(t *clientTile) { t.Attempts = 1 }) }, invAttempts},
		{"journal misses a rejection", func(f *roundFacts) { f.Client.Rejections = f.Client.Rejections[1:] }, invRejectionsMatch},
		{"unclear tile not held and not rejected", func(f *roundFacts) {
			f.Client.Rejections = append(f.Client.Rejections[:1], f.Client.Rejections[2:]...)
			delete(f.Provider.Stored, "t3")
		}, invRejectionsMatch},
		{"unclear tile rejected for another reason", func(f *roundFacts) { f.Client.Rejections[1].Reason = "decode_error" }, invRejectionsMatch},
		{"rejection never counted", func(f *roundFacts) { f.Client.Rejections[2].Counted = false }, invAllCounted},
		{"give-up recorded twice", func(f *roundFacts) { f.Client.GiveUpFDR["t2"] = 2 }, invGiveUpFDR},
		{"give-up without a record", func(f *roundFacts) { delete(f.Client.GiveUpFDR, "t2") }, invGiveUpFDR},
		{"op ID with two payloads", func(f *roundFacts) {
			f.Provider.Fingerprints["op2"] = append(f.Provider.Fingerprints["op2"], "other")
		}, invPayloadBinding},
		{"provider record for another payload", func(f *roundFacts) {
			op := f.Provider.Ops["op2"]
			op.Fingerprint = "other"
			f.Provider.Ops["op2"] = op
		}, invPayloadBinding},
		{"journal fingerprint disagrees with members", func(f *roundFacts) { f.Client.Batches[0].Fingerprint = "x" }, invPayloadBinding},
		{"tile written but no row", func(f *roundFacts) { f.Provider.Stored["t9"] = storedTile{ID: "t9", Writes: 1} }, invStoredOnce},
		{"provider saw a conflict", func(f *roundFacts) { f.Faults.Conflicts = 1 }, invNoConflict},
		{"ambiguous batch replaced", func(f *roundFacts) { f.JournalState["op1"] = "failed" }, invAmbiguousSettle},
		{"sealed op unknown to the client", func(f *roundFacts) { f.SealedOK = append(f.SealedOK, "op9") }, invSealedSettled},
		{"poison tile uploaded", func(f *roundFacts) { f.Victims = append(f.Victims, "t1") }, invVictimGivenUp},
		{"damaged tile counted", func(f *roundFacts) {
			t := f.Client.Tiles["t4"]
			t.Attempts = 1
			f.Client.Tiles["t4"] = t
		}, invDamagedPending},
		{"batch left open", func(f *roundFacts) { f.Client.Batches[1].State = "open" }, invNoOpenBatch},
		{"tile at its budget sent and rejected again", func(f *roundFacts) {
			b := clientBatch{OpID: "op3", TileIDs: []string{"t2"}, SHA256s: []string{"a2"}, State: "settled"}
			b.Fingerprint = fingerprintFor(f.FlightID, b)
			f.Client.Batches = append(f.Client.Batches, b)
			f.Provider.Ops["op3"] = providerOp{OpID: "op3", State: "sealed", Status: i32(200), Fingerprint: b.Fingerprint,
				Body: []byte(`{"op_id":"op3","results":[{"tile_id":"t2","status":"rejected","reason":"decode_error"}]}`)}
		}, invBudget},
		{"given-up tile the provider holds", func(f *roundFacts) {
			f.Provider.Stored["t2"] = storedTile{ID: "t2", SHA256: "a2", Writes: 1, Rows: 1}
			f.Provider.Written["op1"] = append(f.Provider.Written["op1"], "t2")
		}, invGivenUpNotHeld},
		{"tile written under a key its sealed answer rejects", func(f *roundFacts) {
			f.Provider.Ops["op1"] = sealedWith(f.Provider.Ops["op1"],
				`{"op_id":"op1","results":[{"tile_id":"t1","status":"rejected","reason":"storage_busy"},{"tile_id":"t2","status":"rejected","reason":"decode_error"}]}`)
		}, invAnswerAgreesWithWrites},
		{"tile answered accepted the provider does not hold", func(f *roundFacts) {
			f.Provider.Ops["op1"] = sealedWith(f.Provider.Ops["op1"],
				`{"op_id":"op1","results":[{"tile_id":"t1","status":"accepted"},{"tile_id":"t2","status":"accepted"}]}`)
		}, invAnswerAgreesWithWrites},
		{"tile answered duplicate the provider does not hold", func(f *roundFacts) {
			delete(f.Provider.Stored, "t3")
			delete(f.Provider.Written, "op1")
			f.Provider.Written["op1"] = []string{"t1"}
		}, invAnswerAgreesWithWrites},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := withFingerprints(cleanFacts())
			tc.damage(&f)
			wantViolation(t, f, tc.want)
		})
	}
}

// sealedWith is op sealed 200 with body instead of its own answer.
func sealedWith(op providerOp, body string) providerOp {
	op.Body = []byte(body)
	return op
}

func setTile(f *roundFacts, id string, fn func(*clientTile)) {
	t := f.Client.Tiles[id]
	fn(&t)
	f.Client.Tiles[id] = t
}

func TestAnsweredBySortsClearRejectionsFromUnclearAnswers(t *testing.T) {
	body := []byte(`{"results":[{"tile_id":"a","status":"accepted"},{"tile_id":"b","status":"rejected"},
		{"tile_id":"c","status":"duplicate"},{"tile_id":"c","status":"duplicate"},{"tile_id":"e","status":"weird"}]}`)
	rej, unclear, err := answeredBy([]string{"a", "b", "c", "d", "e"}, body)
	if err != nil {
		t.Fatal(err)
	}
	if len(rej) != 1 || !rej["b"] {
		t.Errorf("rejected %v, want only b", rej)
	}
	if len(unclear) != 3 || !unclear["c"] || !unclear["d"] || !unclear["e"] {
		t.Errorf("unclear %v, want c (named twice), d (missing), e (unknown status)", unclear)
	}
}

// A tile an answer left unclear that the provider holds is uploaded
// without a rejection (only a clear "rejected" spends an attempt): no
// attempt, no violation.
func TestCheckRoundAcceptsAnUnclearTileTheProviderHeldWithoutARejection(t *testing.T) {
	f := withFingerprints(cleanFacts())
	f.Client.Rejections = append(f.Client.Rejections[:1], f.Client.Rejections[2:]...) // t3's protocol_error
	setTile(&f, "t3", func(t *clientTile) { t.Attempts = 0 })
	c := newChecker()
	c.checkRound(f)
	if len(c.violations) != 0 {
		t.Fatalf("violations: %v", c.violations)
	}
}

func TestParseMetricLineReadsLabelsAndValue(t *testing.T) {
	name, labels, v, ok := parseMetricLine(`tileprovider_faults_total{kind="cut_body",route="batch"} 7`)
	if !ok || name != "tileprovider_faults_total" || labels["kind"] != "cut_body" || v != 7 {
		t.Fatalf("got %q %v %v %v", name, labels, v, ok)
	}
	if _, _, _, ok := parseMetricLine("garbage"); ok {
		t.Fatal("a line without a value parsed")
	}
}

func TestParseLedgerFindsOpsByKind(t *testing.T) {
	fs := faultStats{ByKind: map[string]int{}, OpsByKind: map[string][]string{}}
	err := parseLedger([]byte(`{"faults":{"cut_body":2},"ops":[{"op_id":"o3","fingerprints":1}],
		"fault_ops":[{"op_id":"o1","kind":"cut_body"},{"op_id":"o2","fault":"drop_after_store"},{"route":"x"}]}`), &fs)
	if err != nil {
		t.Fatal(err)
	}
	if fs.ByKind["cut_body"] != 2 || len(fs.OpsByKind["cut_body"]) != 1 || len(fs.OpsByKind["drop_after_store"]) != 1 || len(fs.OpsByKind) != 2 {
		t.Fatalf("got %v", fs.OpsByKind)
	}
}

func i64(v int64) *int64 { return &v }

// sequencedFacts is the clean round run with client ID c1: op1 and op2
// carry numbers 1 and 2, both committed at the provider and at tilectl;
// another client's sequence (c0) stays where it was.
func sequencedFacts() roundFacts {
	f := withFingerprints(cleanFacts())
	f.Client.Batches[0].ClientSeq, f.Client.Batches[1].ClientSeq = i64(1), i64(2)
	f.Provider.Sequences = map[seqKey]uint64{{"tok", "c1"}: 2, {"tok", "c0"}: 5}
	f.SequencesBefore = map[seqKey]uint64{{"tok", "c0"}: 5}
	f.Seq = &seqFacts{ClientID: "c1", ClientLast: 2, ClientRows: 1, Committed: []string{"op1", "op2"}}
	return f
}

func TestCheckRoundPassesACleanSequencedRound(t *testing.T) {
	c := newChecker()
	c.checkRound(sequencedFacts())
	if len(c.violations) != 0 {
		t.Fatalf("violations on a clean sequenced round: %v", c.violations)
	}
	for _, inv := range []string{invSeqCount, invSeqNotAhead, invSeqSettled, invSeqOthers, invSeqNumbered} {
		if c.checked[inv] == 0 {
			t.Errorf("invariant %s was never evaluated", inv)
		}
	}
}

func TestCheckRoundCatchesEachKindOfSequencingDamage(t *testing.T) {
	cases := []struct {
		name   string
		base   func() roundFacts
		damage func(f *roundFacts)
		want   string
	}{
		{"provider committed more numbers than batches", sequencedFacts, func(f *roundFacts) { f.Provider.Sequences[seqKey{"tok", "c1"}] = 3 }, invSeqCount},
		{"provider sealed a batch without committing its number", sequencedFacts, func(f *roundFacts) {
			f.Seq.Committed = append(f.Seq.Committed, "op9")
		}, invSeqCount},
		{"client sequence under two scopes", sequencedFacts, func(f *roundFacts) { f.Provider.Sequences[seqKey{"other", "c1"}] = 0 }, invSeqCount},
		{"tilectl ahead of the provider", sequencedFacts, func(f *roundFacts) { f.Seq.ClientLast = 3 }, invSeqNotAhead},
		{"tilectl behind the provider after the round", sequencedFacts, func(f *roundFacts) { f.Seq.ClientLast = 1 }, invSeqSettled},
		{"tilectl holds the client in two streams", sequencedFacts, func(f *roundFacts) { f.Seq.ClientRows = 2 }, invSeqSettled},
		{"another client's sequence moved", sequencedFacts, func(f *roundFacts) { f.Provider.Sequences[seqKey{"tok", "c0"}] = 6 }, invSeqOthers},
		{"another client's sequence vanished", sequencedFacts, func(f *roundFacts) { delete(f.Provider.Sequences, seqKey{"tok", "c0"}) }, invSeqOthers},
		{"a round without a client ID moved a sequence", func() roundFacts { return withFingerprints(cleanFacts()) }, func(f *roundFacts) {
			f.Provider.Sequences = map[seqKey]uint64{{"tok", "c0"}: 1}
		}, invSeqOthers},
		{"sequenced batch without a number", sequencedFacts, func(f *roundFacts) { f.Client.Batches[1].ClientSeq = nil }, invSeqNumbered},
		{"one number settled by two batches", sequencedFacts, func(f *roundFacts) { f.Client.Batches[1].ClientSeq = i64(1) }, invSeqNumbered},
		{"settled number past tilectl's last committed", sequencedFacts, func(f *roundFacts) { f.Client.Batches[1].ClientSeq = i64(7) }, invSeqNumbered},
		{"unsequenced batch with a number", func() roundFacts { return withFingerprints(cleanFacts()) }, func(f *roundFacts) {
			f.Client.Batches[0].ClientSeq = i64(1)
		}, invSeqUnnumbered},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.base()
			tc.damage(&f)
			wantViolation(t, f, tc.want)
		})
	}
}

func TestEveryOtherRoundIsSequencedWhateverTheSeed(t *testing.T) {
	for seed := uint64(1); seed < 5; seed++ {
		for n := 1; n < 6; n++ {
			if sequenced(seed, n) == sequenced(seed, n+1) {
				t.Fatalf("seed %d: rounds %d and %d are both sequenced=%v", seed, n, n+1, sequenced(seed, n))
			}
		}
	}
}

// wantViolation checks one round of f and fails t unless the checker
// reports a violation of the invariant want.
func wantViolation(t *testing.T, f roundFacts, want string) {
	t.Helper()
	c := newChecker()
	c.checkRound(f)
	for _, v := range c.violations {
		if strings.HasPrefix(v, want+":") {
			return
		}
	}
	t.Fatalf("want a %s violation, got %v", want, c.violations)
}
