package uploader_test

import (
	"testing"

	"github.com/tilectl/tilectl/provider/providertest"
	"github.com/tilectl/tilectl/tilestore"
	"github.com/tilectl/tilectl/uploader"
)

// A call's report counts every request it made, not the batches only: the
// capabilities, the tile lookups and the operation-state reads are
// requests too (Report.Requests, the summary's requests and the SLI rates
// over them). Each call here is checked against the requests the provider
// saw while it ran.
func TestACallsReportCountsEveryRequestItMadeLookupsAndStateReadsIncluded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lose string // how the first key's answer is lost (Recorder.LoseAnswers)
		gets string // the GETs beyond the capabilities that must be among them
	}{
		{"result omitted: the tile is looked up", "omit", "lookup"},
		{"key expired: the batch's tiles are looked up", "drop", "lookup"},
		{"answer cut off: the operation's state is read", "cut", "operation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := storingAgain(t)
			first := true
			p.LoseAnswers(func(key string, ids []string) string {
				if !first {
					return ""
				}
				first = false
				if tc.lose == "omit" {
					return "omit:" + ids[0]
				}
				return tc.lose
			})
			c := providertest.NewClient(t, "fq")
			c.AddTiles(t, "fq", 4, 256, 6) // one batch
			u, _ := newUploader(t, p.URL, c, func(o *uploader.ClientOptions) { o.MaxResends = 1 })
			calls, batchPosts := 0, p.Posts()
			for ; calls < 3 && c.Counts(t, "fq")[tilestore.StatusUploaded] < 4; calls++ {
				before := len(p.Auth())
				rep, _ := u.UploadPendingTiles(testCtx(t), uploader.Request{FlightID: "fq", Concurrency: 1})
				if made := len(p.Auth()) - before; rep.Requests != made || rep.FirstAttempts+rep.Resends != made {
					t.Errorf("call %d: report counts %d requests (%d first attempts + %d resends); the provider saw %d",
						calls+1, rep.Requests, rep.FirstAttempts, rep.Resends, made)
				}
			}
			if n := c.Counts(t, "fq")[tilestore.StatusUploaded]; n != 4 {
				t.Fatalf("%d of 4 tiles uploaded after %d calls", n, calls)
			}
			gets := len(p.Auth()) - (p.Posts() - batchPosts) - calls // less the batches and each call's capabilities
			switch {
			case tc.gets == "lookup" && p.Lookups() == 0:
				t.Errorf("no tile was looked up: the case does not test what it names")
			case tc.gets == "operation" && gets-p.Lookups() == 0:
				t.Errorf("no operation state was read: the case does not test what it names")
			}
		})
	}
}
