package upload

import (
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/tilestore"
)

func TestARunOverEveryFlightSaysWhichFlightsItSkipsAndWhy(t *testing.T) {
	r := newCmdRig(t)
	r.seed("F1", tilestore.FlightOnGround, 2)
	r.seed("F2", tilestore.FlightAirborne, 2)
	r.seed("F3", tilestore.FlightAirborne, 1)
	res := r.run(nil)
	if res.code != exitcode.OK {
		t.Fatalf("exit %d (%v)\n%s", res.code, res.err, res.stderr)
	}
	var line string
	for _, l := range strings.Split(res.stderr, "\n") {
		if strings.Contains(l, "skipped") {
			line = l
		}
	}
	for _, want := range []string{"skipped 2 flights", "F2", "F3", "airborne", "3 pending tiles", "tilectl flights land ID"} {
		if !strings.Contains(line, want) {
			t.Errorf("the run does not say %q about the flights it skipped:\n%s", want, res.stderr)
		}
	}
	if strings.Contains(line, "F1") {
		t.Errorf("names the flight it uploaded as skipped: %s", line)
	}
}
