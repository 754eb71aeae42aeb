package upload

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// cpuProfileEnv names the file of a CPU profile when --cpuprofile is not
// given, so a run started by a scheduler can be profiled without changing
// its command line.
const cpuProfileEnv = "TILECTL_CPUPROFILE"

// startCPUProfile writes a pprof CPU profile of the run to path (the hidden
// --cpuprofile flag, else $TILECTL_CPUPROFILE); "" profiles nothing. The
// returned stop flushes and closes the file.
func startCPUProfile(flagPath string, getenv func(string) string) (stop func() error, err error) {
	path, from := flagPath, "--cpuprofile"
	if path == "" {
		path, from = getenv(cpuProfileEnv), cpuProfileEnv
	}
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create the CPU profile file %s (from %s): %w", path, from, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("start the CPU profile into %s (from %s): %w", path, from, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("write the CPU profile %s: %w", path, err)
		}
		return nil
	}, nil
}
