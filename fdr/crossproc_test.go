package fdr

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// A test binary started with these variables set is a child writer, not a
// test run: see TestMain.
const (
	envChildPath = "FDR_TEST_CHILD_PATH"
	envChildN    = "FDR_TEST_CHILD_N"
	envChildID   = "FDR_TEST_CHILD_ID"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envChildPath); path != "" {
		n, _ := strconv.Atoi(os.Getenv(envChildN))
		if err := childWrite(path, os.Getenv(envChildID), n); err != nil {
			fmt.Fprintln(os.Stderr, "child writer:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childWrite appends n records; every 25th is keyed with a key all writers
// share, so exactly one writer may record it.
func childWrite(path, id string, n int) error {
	r, err := Open(context.Background(), path, Options{})
	if err != nil {
		return err
	}
	defer r.Close()
	for i := 0; i < n; i++ {
		e := Entry{Kind: "upload.giveup", Payload: map[string]any{"writer": id, "i": i}}
		if i%25 == 0 {
			e.Key = fmt.Sprintf("giveup/shared/%d", i)
			e.Durable = true
		}
		if _, err := r.Append(context.Background(), e); err != nil {
			return err
		}
	}
	return nil
}

func TestConcurrentAppendsAcrossProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fdr.ring")
	// Create it first so every writer agrees on the capacity.
	r, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	const children, each = 3, 300
	var wg sync.WaitGroup
	errs := make([]error, children+1)
	for c := 0; c < children; c++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChildPath+"="+path, envChildN+"="+strconv.Itoa(each), envChildID+"=child"+strconv.Itoa(c))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[c] = cmd.Wait()
		}()
	}
	wg.Add(1)
	go func() { // this process writes too
		defer wg.Done()
		errs[children] = childWrite(path, "parent", each)
	}()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	recs, rep, err := ReadFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	writers := children + 1
	keyed := each / 25
	checkConsecutive(t, recs, rep, writers*each-keyed*(writers-1))
	perWriter := map[string]int{}
	for _, rec := range recs {
		var p struct{ Writer string }
		if err := jsonUnmarshal(rec.Payload, &p); err != nil {
			t.Fatal(err)
		}
		perWriter[p.Writer]++
	}
	if len(perWriter) != writers {
		t.Fatalf("records from %d writers, want %d: %v", len(perWriter), writers, perWriter)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
