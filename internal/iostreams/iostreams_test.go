package iostreams

import "testing"

func TestTestStreamsCaptureOutputAndAreNotTerminals(t *testing.T) {
	ios, _, out, errOut := Test()
	if ios.IsStdoutTTY() || ios.IsStderrTTY() {
		t.Fatal("test streams claim to be terminals")
	}
	_, _ = ios.Out.Write([]byte("data"))
	_, _ = ios.ErrOut.Write([]byte("diag"))
	if out.String() != "data" || errOut.String() != "diag" {
		t.Fatalf("out %q err %q", out, errOut)
	}
	ios.SetStderrTTY(true)
	if !ios.IsStderrTTY() || ios.IsStdoutTTY() {
		t.Fatal("SetStderrTTY changed the wrong stream")
	}
}
