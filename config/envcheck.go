package config

import (
	"slices"
	"strings"
)

// harnessEnv are TILECTL_ variables read outside the configuration: by the
// test harness, the Makefile and scripts (scripts/pg.sh), and the CPU
// profiler of upload-pending. Names under harnessPrefixes are the tests'
// and benchmarks' own knobs.
var (
	harnessEnv = []string{
		"TILECTL_TEST_DATABASE_URL", // tests and make demo: the Postgres to use
		"TILECTL_PG_THROWAWAY",      // scripts/pg.sh: a throwaway cluster to stop
		"TILECTL_BIN",               // tests: a prebuilt tilectl binary
		"TILECTL_UPLOADER_CHILD",    // tests: a child process's role
		"TILECTL_TILES_LAUNCH",      // tests: a child process's role
		"TILECTL_MASS_FULL",         // make stress: the full mass give-up test
		"TILECTL_CPUPROFILE",        // upload-pending: write a CPU profile
	}
	harnessPrefixes = []string{"TILECTL_TEST_", "TILECTL_BENCH_"}
)

// UnknownEnvVar is a TILECTL_ environment variable tilectl does not read:
// most often a misspelt configuration variable, silently ignored.
type UnknownEnvVar struct {
	Name string
	// Closest is the known variable nearest in spelling, "" when none is
	// near.
	Closest string
}

// String is the warning about the variable.
func (u UnknownEnvVar) String() string {
	msg := "unknown environment variable " + u.Name + " is ignored"
	if u.Closest != "" {
		msg += " (did you mean " + u.Closest + "?)"
	}
	return msg
}

// KnownEnv lists every TILECTL_ variable tilectl reads: the configuration's
// (EnvVars), TILECTL_CONFIG, and the harness's.
func KnownEnv() []string {
	known := []string{ConfigFileEnv}
	for _, f := range Default(func(string) string { return "" }).Fields() {
		known = append(known, f.Env)
	}
	return append(known, harnessEnv...)
}

// UnknownEnv returns the TILECTL_ variables in environ (KEY=VALUE entries,
// as os.Environ gives them) that tilectl does not read, sorted by name.
func UnknownEnv(environ []string) []UnknownEnvVar {
	known := KnownEnv()
	var out []UnknownEnvVar
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || slices.Contains(known, name) || slices.ContainsFunc(harnessPrefixes, func(p string) bool {
			return strings.HasPrefix(name, p)
		}) {
			continue
		}
		out = append(out, UnknownEnvVar{Name: name, Closest: closest(name, known)})
	}
	slices.SortFunc(out, func(a, b UnknownEnvVar) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b UnknownEnvVar) bool { return a.Name == b.Name })
}

// closest is the name in known with the smallest edit distance to name,
// when that distance is small for the name's length (a typo, not another
// word): at most 3, and at most a third of the part after the prefix.
func closest(name string, known []string) string {
	best, bestD := "", 0
	for _, k := range known {
		d := editDistance(name, k)
		if best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	limit := min(3, max(1, (len(name)-len(EnvPrefix))/3))
	if best == "" || bestD > limit {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes: the
// names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
