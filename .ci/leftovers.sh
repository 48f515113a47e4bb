#!/usr/bin/env bash
# Fails when a process started from this checkout's build outputs (an OM,
# datanode, sidecar or `local up` under target/) is still running: what the
# test suites started must be gone when they end. Only processes whose
# executable lies under this checkout's target/ are looked at, so another
# cluster on the machine is never counted. Waits up to 20 s for processes
# that are being killed.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(realpath target)
left() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case "$exe" in
      "$target"/*) echo "${p#/proc/} $exe $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-200)" ;;
    esac
  done
}
for _ in $(seq 20); do
  [ -z "$(left)" ] && { echo "no process of the suites is left"; exit 0; }
  sleep 1
done
echo "processes the suites started are still running:" >&2
left >&2
exit 1
