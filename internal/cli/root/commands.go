package root

import (
	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/internal/cli/configcmd"
	"github.com/tilectl/tilectl/internal/cli/factory"
	"github.com/tilectl/tilectl/internal/cli/fdrcmd"
	"github.com/tilectl/tilectl/internal/cli/flights"
	"github.com/tilectl/tilectl/internal/cli/migrate"
	"github.com/tilectl/tilectl/internal/cli/status"
	"github.com/tilectl/tilectl/internal/cli/tiles"
	"github.com/tilectl/tilectl/internal/cli/upload"
	"github.com/tilectl/tilectl/internal/cli/version"
)

// Commands are the top-level commands, in help order. To add one, append a
// line here: its constructor receives the factory and returns the command
// (wrap a NewCmdX(f, runF) as func(f) { return x.NewCmdX(f, nil) }).
var Commands = []func(f *factory.Factory) *cobra.Command{
	func(f *factory.Factory) *cobra.Command { return migrate.NewCmdMigrate(f) },
	func(f *factory.Factory) *cobra.Command { return tiles.NewCmdTiles(f) },
	func(f *factory.Factory) *cobra.Command { return upload.NewCmdUploadPending(f, nil) },
	func(f *factory.Factory) *cobra.Command { return status.NewCmdStatus(f, nil) },
	func(f *factory.Factory) *cobra.Command { return flights.NewCmdFlights(f) },
	func(f *factory.Factory) *cobra.Command { return fdrcmd.NewCmdFDR(f) },
	func(f *factory.Factory) *cobra.Command { return version.NewCmdVersion(f, nil) },
	func(f *factory.Factory) *cobra.Command { return configcmd.NewCmdConfig(f) },
}
