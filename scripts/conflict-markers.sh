#!/usr/bin/env bash
# conflict-markers.sh [DIR]: fail when a file git tracks in DIR (default .)
# holds a merge-conflict marker line. make lint runs it, so CI does too.
#
# The markers are spelled with repetition counts so this file never matches
# itself. `=======` alone is not searched for: it is also a Markdown heading
# underline, and a real conflict always carries the `<` and `>` lines.
# testdata/ is skipped: fixtures may hold markers on purpose.
set -uo pipefail
cd "${1:-.}" || exit 2
hits=$(git grep -nIE '^(<{7}|>{7}|\|{7})( |$)' -- . ':(exclude,glob)**/testdata/**')
case $? in
0)
	echo "conflict-markers: tracked files hold merge-conflict markers (resolve them, then commit):" >&2
	echo "$hits" >&2
	exit 1
	;;
1) exit 0 ;; # git grep: no match
*)
	echo "conflict-markers: git grep failed in $(pwd)" >&2
	exit 2
	;;
esac
