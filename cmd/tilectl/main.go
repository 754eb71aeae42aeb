// Command tilectl uploads a drone flight's map tiles to a satellite provider.
// See README.md; the commands live in internal/cli.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/tilectl/tilectl/internal/cli/exitcode"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/cli/root"
)

// Set by the Makefile with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = ""
)

func main() { os.Exit(run()) }

func run() int {
	f := factory.New(version, commit)
	defer f.Close()
	ctx, stop := exitcode.NotifyContext(context.Background(), func(code int) {
		fmt.Fprintln(f.IOStreams.ErrOut, "tilectl: second signal: exiting now; run again to continue")
		os.Exit(code)
	})
	defer stop()
	err := root.Execute(ctx, f, nil)
	if se := exitcode.Interruption(ctx); se != nil && err != nil && exitcode.Code(err) != se.Code() {
		// The command stopped because of the signal, whatever it says.
		err = exitcode.New(se.Code(), fmt.Errorf("%w: %w", se, err))
	}
	if msg := errorText(err); msg != "" {
		fmt.Fprintln(f.IOStreams.ErrOut, "tilectl:", msg)
	}
	return exitcode.Code(err)
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
