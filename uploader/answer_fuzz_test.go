package uploader

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tilectl/tilectl/tilestore"
)

// FuzzClassifyAnswer feeds arbitrary 200 bodies to the answer check. Whatever
// a provider says, every tile of the batch must come out exactly once,
// uploaded or rejected, and a tile is uploaded only when the body names it
// exactly once as accepted or duplicate under the batch's own op_id.
func FuzzClassifyAnswer(f *testing.F) {
	const op = "01a1fd96-d4ec-7862-9880-7828ac203056"
	for _, seed := range []string{
		`{"op_id":"` + op + `","results":[{"tile_id":"a","status":"accepted"},{"tile_id":"b","status":"duplicate"},{"tile_id":"c","status":"rejected","reason":"decode_error"}]}`,
		`{"op_id":"` + op + `","results":[{"tile_id":"a","status":"accepted"},{"tile_id":"a","status":"accepted"}]}`,
		`{"op_id":"other","results":[{"tile_id":"a","status":"accepted"}]}`,
		`{"op_id":"` + op + `","results":[{"tile_id":"zz","status":"accepted"}]}`,
		`<html><body>502 Bad Gateway</body></html>`,
		`{"op_id":"` + op + `","results":[{"tile_id":"a","status":"ACCEPTED"}`,
		``,
	} {
		f.Add(seed, "a,b,c")
	}
	f.Fuzz(func(t *testing.T, body, members string) {
		ids := uniqueNonEmpty(strings.Split(members, ","))
		st, accepted, duplicate, strangers := classifyAnswer(op, ids, 200, []byte(body), nil)
		// Through a memo that parsed another body, then this one (the
		// transport's check), the verdict is the same.
		memo := &responseMemo{}
		memo.accept([]byte(`{"op_id":"` + op + `","results":[{"tile_id":"` + strings.Join(ids, `","status":"accepted"},{"tile_id":"`) + `","status":"accepted"}]}`))
		memo.accept([]byte(body))
		mst, macc, mdup, mstr := classifyAnswer(op, ids, 200, []byte(body), memo)
		if !reflect.DeepEqual(mst, st) || macc != accepted || mdup != duplicate || !slices.Equal(mstr, strangers) {
			t.Fatalf("through a memo: %+v %d %d %v; parsed alone: %+v %d %d %v", mst, macc, mdup, mstr, st, accepted, duplicate, strangers)
		}
		seen := map[string]int{}
		for _, id := range st.Uploaded {
			seen[id]++
		}
		for _, r := range st.Rejections {
			seen[r.TileID]++
			if r.OpID != op || r.Reason == "" {
				t.Fatalf("rejection %+v lacks its op_id or reason", r)
			}
			for _, text := range []string{r.Reason, r.Message} {
				if strings.ContainsRune(text, 0) || !utf8.ValidString(text) {
					t.Fatalf("rejection text %q would be refused by Postgres", text)
				}
			}
		}
		for _, id := range ids {
			if seen[id] != 1 {
				t.Fatalf("tile %q came out %d times (uploaded %v, rejected %v)", id, seen[id], st.Uploaded, st.Rejections)
			}
		}
		if len(seen) != len(ids) {
			t.Fatalf("settlement names tiles outside the batch: %v", seen)
		}
		if accepted+duplicate != len(st.Uploaded) {
			t.Fatalf("accepted %d + duplicate %d != uploaded %d", accepted, duplicate, len(st.Uploaded))
		}
		ans, ok := parseBatchResponse([]byte(body))
		for _, id := range st.Uploaded {
			if !ok || ans.OpID != op {
				t.Fatalf("tile %q uploaded from an unreadable or foreign answer", id)
			}
			n := 0
			for _, r := range ans.Results {
				if r.TileID == id {
					n++
					if r.Status != "accepted" && r.Status != "duplicate" {
						t.Fatalf("tile %q uploaded with status %q", id, r.Status)
					}
				}
			}
			if n != 1 {
				t.Fatalf("tile %q uploaded though named %d times", id, n)
			}
		}
		for _, s := range strangers {
			for _, id := range ids {
				if s == id {
					t.Fatalf("member %q reported as a stranger", s)
				}
			}
		}
	})
}

func uniqueNonEmpty(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// FuzzAnswerToSettlement follows a 200 body down the path production takes
// to SettleBatch (classify, redact the token, name strangers) and checks
// that the settlement passes tilestore's own validation: no answer a
// provider sends, with any token, may keep a batch from ever settling, and
// the token never reaches the store.
func FuzzAnswerToSettlement(f *testing.F) {
	const op = "01a1fd96-d4ec-7862-9880-7828ac203056"
	for _, seed := range []string{
		`{"op_id":"` + op + `","results":[{"tile_id":"a","status":"rejected","reason":"\u0000"},{"tile_id":"b","status":"accepted"}]}`,
		`{"op_id":"` + op + `","results":[{"tile_id":"a","status":"rejected","reason":" \t","message":"\u0000tok-123456789"}]}`,
		`{"op_id":"` + op + `","results":[{"tile_id":"\u0000","status":"accepted"},{"tile_id":"a","status":"rejected","reason":"tok-123456789"}]}`,
		`{"op_id":"` + op + `","results":[{"tile_id":"a","status":"rejected","reason":"\u00e9"}]}`,
	} {
		f.Add(seed, "a,b,c", "tok-123456789")
	}
	f.Add(`{"op_id":"`+op+`","results":[{"tile_id":"a","status":"rejected","reason":"\u00e9"}]}`, "a", "\xc3")
	f.Fuzz(func(t *testing.T, body, members, token string) {
		ids := uniqueNonEmpty(strings.Split(members, ","))
		for _, id := range ids {
			if tilestore.ValidateTileID(id) != nil {
				return // the batch's own IDs come from the store, already valid
			}
		}
		u := &Client{token: token}
		st, accepted, duplicate, _ := u.settlement(op, ids, 200, []byte(body), nil)
		if err := st.Validate(); err != nil {
			t.Fatalf("a settlement from this answer would never be stored: %v", err)
		}
		if len(st.Uploaded)+len(st.Rejections) != len(ids) || accepted+duplicate != len(st.Uploaded) {
			t.Fatalf("uploaded %d + rejected %d != %d members", len(st.Uploaded), len(st.Rejections), len(ids))
		}
		if token == "" {
			return
		}
		texts := []string{st.Detail}
		for _, r := range st.Rejections {
			texts = append(texts, r.Reason, r.Message)
		}
		// The token may be a piece of the redaction marker or of any
		// word (a one-letter token is in almost every text): look for it
		// with each marker cut out, replaced by a byte the token lacks so
		// that the pieces around a marker cannot join into the token.
		sep := ""
		for _, c := range []string{"\x00", "\x01", "\x02", "\x03"} {
			if !strings.Contains(token, c) {
				sep = c
				break
			}
		}
		if sep == "" {
			return
		}
		for _, s := range texts {
			if strings.Contains(strings.ReplaceAll(s, "[redacted]", sep), token) {
				t.Fatalf("token %q reaches the store in %q", token, s)
			}
		}
	})
}
