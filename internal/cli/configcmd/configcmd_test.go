package configcmd_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tilectl/tilectl/internal/cli/configcmd"
	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/cli/root"
	"github.com/tilectl/tilectl/internal/iostreams"
)

func execute(t *testing.T, env map[string]string, args ...string) (code int, out, errOut string) {
	t.Helper()
	ios, _, o, e := iostreams.Test()
	f := factory.NewWith(ios, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, "test", "abc")
	defer f.Close()
	err := root.Execute(context.Background(), f, args)
	if err != nil {
		e.WriteString(err.Error())
	}
	return exitcode.Code(err), o.String(), e.String()
}

func TestConfigViewShowsEverySourceAndNeverTheToken(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("provider_token: file-secret-42\nupload:\n  concurrency: 6\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOME": dir, "TILECTL_CONFIG": cfg, "TILECTL_PROVIDER_URL": "https://env.example"}

	code, out, errOut := execute(t, env, "config", "view")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"config file: " + cfg, "file " + cfg + ":3", "env TILECTL_PROVIDER_URL", "[redacted]", "default"} {
		if !strings.Contains(out, want) {
			t.Errorf("text view lacks %q:\n%s", want, out)
		}
	}

	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("flag-secret-77\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out2, errOut2 := execute(t, env, "--provider-token-file", tokenFile, "config", "view", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut2)
	}
	var v configcmd.View
	if err := json.Unmarshal([]byte(out2), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out2)
	}
	got := map[string]configcmd.Value{}
	for _, val := range v.Values {
		got[val.Key] = val
	}
	if tok := got["provider_token"]; tok.Value != "[redacted]" || tok.Source.Name != "--provider-token-file" || tok.Source.File != tokenFile {
		t.Errorf("provider_token %+v, want redacted from --provider-token-file %s", tok, tokenFile)
	}
	if c := got["upload.concurrency"]; c.Value != "6" || c.Source.Line != 3 {
		t.Errorf("upload.concurrency %+v, want 6 from line 3", c)
	}
	if v.File == nil || *v.File != cfg {
		t.Errorf("file %v, want %s", v.File, cfg)
	}
	for _, s := range []string{out, errOut, out2, errOut2} {
		if strings.Contains(s, "secret-42") || strings.Contains(s, "secret-77") {
			t.Fatalf("token printed:\n%s", s)
		}
	}
}
