#!/usr/bin/env bash
# Starts the control plane with `up.sh true` N times in a row (default 20),
# each under its own limit, and checks that each run exits 0 in time and
# leaves none of its processes behind. Prints `N passed, N failed`.
#
#   teardown-test.sh [N] [LIMIT_SECONDS]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=${1:-20}
limit=${2:-90}
"$here/build.sh" > /dev/null || exit 1
passed=0 failed=0
for i in $(seq 1 "$n"); do
  t0=$SECONDS
  dir=$(mktemp -d "${TMPDIR:-/tmp}/cp-teardown.XXXXXX")
  CP_DIR=$dir timeout --kill-after=5 "$limit" "$here/up.sh" true 2> "$dir.log"
  rc=$?
  # What up.sh started names $dir in its arguments: nothing may outlive it.
  left=$(pgrep -f -- "$dir" || true)
  if [ $rc -eq 0 ] && [ -z "$left" ]; then
    passed=$((passed + 1))
    echo "run $i: up and down in $((SECONDS - t0)) s"
  else
    failed=$((failed + 1))
    echo "run $i: FAILED (exit $rc after $((SECONDS - t0)) s; left running: ${left:-none})"
    tail -5 "$dir.log"
    [ -z "$left" ] || kill -KILL $left 2>/dev/null
  fi
  rm -rf "$dir" "$dir.log"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
