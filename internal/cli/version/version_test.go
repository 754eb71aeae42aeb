package version

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/iostreams"
)

func TestVersionPrintsBuildInfo(t *testing.T) {
	ios, _, out, _ := iostreams.Test()
	if err := Run(context.Background(), &Options{IO: ios, Version: "v1.2.3", Commit: "abc123", Output: "json"}); err != nil {
		t.Fatal(err)
	}
	var info Info
	if err := json.Unmarshal(out.Bytes(), &info); err != nil {
		t.Fatal(err)
	}
	if info != (Info{Version: "v1.2.3", Commit: "abc123", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}) {
		t.Fatalf("info %+v", info)
	}
	out.Reset()
	if err := Run(context.Background(), &Options{IO: ios, Output: "text"}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "tilectl dev (commit ") || !strings.Contains(out.String(), runtime.Version()) {
		t.Fatalf("text %q", out)
	}
}
