package exitcode

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tilectl/tilectl/uploader"
)

func TestCodeMapsErrorsToDocumentedCodes(t *testing.T) {
	notOnGround := &uploader.FlightStateNotOnGroundError{FlightID: "f", State: "airborne"}
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"plain", errors.New("boom"), 1},
		{"usage", UsageError(errors.New("unknown flag")), 2},
		{"wrapped usage", fmt.Errorf("x: %w", UsageError(errors.New("y"))), 2},
		{"partial", New(Partial, errors.New("3 tiles pending")), 3},
		{"not on ground", fmt.Errorf("upload: %w", notOnGround), 4},
		{"explicit code wins over sentinel", New(Failure, notOnGround), 1},
	}
	for _, tc := range cases {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("%s: Code = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestExitErrorPrintsItsCause(t *testing.T) {
	e := New(3, errors.New("2 tiles given up"))
	if e.Error() != "2 tiles given up" || !errors.Is(e, e.Err) {
		t.Fatalf("Error() = %q", e.Error())
	}
	if (&ExitError{Code: 1}).Error() != "" {
		t.Fatal("nil Err must print nothing")
	}
}
