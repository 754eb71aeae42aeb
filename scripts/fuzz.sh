#!/usr/bin/env bash
# Runs every Go fuzz target in the module for FUZZTIME each (default
# 20000x: an execution count). A count, not a duration: with a duration,
# Go 1.26's fuzz coordinator can report a bare "context deadline exceeded"
# failure when a worker is starved at the deadline (go.dev/issue/75804,
# fixed in Go 1.27), which made CI fail with no crasher on a loaded machine.
# go test takes one -fuzz target per invocation, so targets are found by
# name and run one by one; any crash fails the script and leaves its input
# in the package's testdata/fuzz/<Target>/ for the regression corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20000x}
found=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	found=$((found + 1))
	echo "fuzz $pkg $name ($fuzztime)"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 500x "$pkg" >/tmp/tilectl-fuzz.$$ 2>&1 || {
		cat /tmp/tilectl-fuzz.$$; rm -f /tmp/tilectl-fuzz.$$
		echo "fuzz: $name in $pkg failed"; exit 1
	}
done < <(grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | sed 's/func //' | sort)
rm -f /tmp/tilectl-fuzz.$$
if [ "$found" -eq 0 ]; then echo "fuzz: no targets found"; exit 1; fi
echo "fuzz: $found targets ran for $fuzztime each, no failures"
