// Command tilectl uploads a drone flight's map tiles to a satellite provider.
// See README.md; the commands live in internal/cli.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := root.Execute(ctx, f, nil)
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
