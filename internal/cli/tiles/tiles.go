// Package tiles is `tilectl tiles`: getting a flight's tiles into the cache
// and the tile store. Import checks every file before writing anything, so
// a bad directory leaves no trace unless --skip-invalid says otherwise.
package tiles

import (
	"github.com/spf13/cobra"

	"github.com/tilectl/tilectl/internal/cli/factory"
)

// NewCmdTiles is the `tiles` group.
func NewCmdTiles(f *factory.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tiles <command>",
		Short: "Import and manage a flight's tiles",
	}
	cmd.AddCommand(NewCmdImport(f, nil))
	cmd.AddCommand(NewCmdVerify(f, nil))
	cmd.AddCommand(NewCmdRequeue(f, nil))
	cmd.AddCommand(NewCmdReconcile(f, nil))
	return cmd
}
