// Command mangen writes tilectl's man pages into a directory: `make man`
// and `make package` run it. It lives beside tilectl rather than inside it
// so that the shipped binary carries neither the roff generator nor a
// command that only the build uses.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/cli/root"
	"github.com/tilectl/tilectl/internal/manpage"
)

func main() {
	version := flag.String("version", "dev", "the version the pages name in their footer")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: mangen [-version V] DIR")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	f := factory.New(*version, "")
	defer f.Close()
	paths, err := manpage.Write(flag.Arg(0), root.New(f), "tilectl "+*version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mangen:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "mangen: %d man pages in %s\n", len(paths), flag.Arg(0))
}
