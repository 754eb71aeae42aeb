package config

import (
	"strings"
	"testing"
)

func TestAClientIDMakesConcurrencyDefaultToOne(t *testing.T) {
	c := Default(func(string) string { return "" })
	c.CacheDir = "/cache"
	if err := c.SetFrom(Source{Kind: SourceEnv, Name: "TILECTL_UPLOAD_CLIENT_ID"}, "upload.client_id", "drone-7"); err != nil {
		t.Fatal(err)
	}
	c.Complete()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	if c.Upload.Concurrency != 1 {
		t.Fatalf("concurrency %d with a client ID and no concurrency set, want 1", c.Upload.Concurrency)
	}
}

func TestAClientIDWithAnExplicitConcurrencyAboveOneIsRefusedNamingBothSources(t *testing.T) {
	c := Default(func(string) string { return "" })
	c.CacheDir = "/cache"
	if err := c.SetFrom(Source{Kind: SourceEnv, Name: "TILECTL_UPLOAD_CONCURRENCY"}, "upload.concurrency", "8"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetFrom(Source{Kind: SourceFlag, Name: "--client-id"}, "upload.client_id", "drone-7"); err != nil {
		t.Fatal(err)
	}
	c.Complete()
	err := c.Validate()
	for _, want := range []string{"upload.concurrency (from env TILECTL_UPLOAD_CONCURRENCY)",
		"must be 1 when upload.client_id is set (from flag --client-id)", "got 8"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate() = %v, want it to say %q", err, want)
		}
	}
	// Concurrency 1, said explicitly, is fine.
	if err := c.SetFrom(Source{Kind: SourceEnv, Name: "TILECTL_UPLOAD_CONCURRENCY"}, "upload.concurrency", "1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() with concurrency 1 = %v", err)
	}
}

func TestABadClientIDIsRefusedNamingItsSource(t *testing.T) {
	for _, id := range []string{"drone 7", "drone/7", "drone\n7", strings.Repeat("d", 129)} {
		c := validConfig()
		if err := c.SetFrom(Source{Kind: SourceFile, Name: "/etc/tilectl/config.yaml", Line: 9}, "upload.client_id", id); err != nil {
			t.Fatal(err)
		}
		err := c.Validate()
		want := "upload.client_id (from file /etc/tilectl/config.yaml:9): must be 1..128 characters of letters, digits"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("client ID %q: Validate() = %v, want %q", id, err, want)
		}
	}
}
