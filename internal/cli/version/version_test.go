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

func TestVersionIsSemverOrDevWithTheCommit(t *testing.T) {
	for _, tc := range []struct{ version, commit, want string }{
		{"v1.4.0", "abc1234", "v1.4.0 (commit abc1234)"},
		{"v1.4.0-3-gabc1234-dirty", "abc1234", "v1.4.0-3-gabc1234-dirty (commit abc1234)"},
		{"abc1234", "", "dev (commit abc1234)"}, // git describe --always without a tag
		{"abc1234", "abc1234", "dev (commit abc1234)"},
	} {
		if got := String(tc.version, tc.commit); got != tc.want {
			t.Errorf("String(%q, %q) = %q, want %q", tc.version, tc.commit, got, tc.want)
		}
	}
}
