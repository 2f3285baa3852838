#!/usr/bin/env bash
# Fault injection beyond ctest's 20 seeds: runs fault_injection_test over seeds BASE .. BASE+N-1
# (in windows of 20) and sums up: faults injected (each kind counted: kill, freeze, orchestrator
# kill, closed and stalled data connection), hangs (a survivor still running past the bound),
# misnamed (an error naming another node or not the broken link, or not node_lost), skipped (link
# faults where ss -K or nft cannot run), other failures.
# KIND (kill, freeze, orchestrator, closed, stalled) makes every seed inject that kind.
# usage: scripts/fault_soak.sh [N=200] [BASE=20] [KIND=as drawn] [BUILD_DIR=build]
set -uo pipefail
n=${1:-200}
base=${2:-20}
here=$(cd "$(dirname "$0")/.." && pwd)
kind=${3:-}
bin=${4:-$here/build}/bin/fault_injection_test
[ -x "$bin" ] || bin=$(dirname "$bin")/chorus-suites  # a sanitizer build's one program of every suite
[ -x "$bin" ] || { echo "no fault_injection_test or chorus-suites in $(dirname "$bin"): build the tests first" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((b = base; b < base + n; b += 20)); do
  count=$((base + n - b < 20 ? base + n - b : 20))
  filter=$(seq -f 'FaultInjection/Seeded.Fault/%g' -s : 0 $((count - 1)))
  CHORUS_FAULT_SEED_BASE=$b CHORUS_FAULT_KIND=$kind "$bin" --gtest_filter="$filter" >> "$log" 2>&1
done
faults=$(grep -c '^seed ' "$log")
hangs=$(grep -c 'survivors still running' "$log")
misnamed=$(grep -c 'names the wrong node\|does not name the link\|ERR node_lost ", 0)\|NEXT node_lost ", 0)\|completed ops it could not have\|did not report its next op' "$log")
failed=$(grep -c '^\[  FAILED  \] FaultInjection' "$log")
skipped=$(grep -c '^\[  SKIPPED \] FaultInjection' "$log")
grep '^seed \|(stall of seed' "$log" | awk '{print "  " $0}'
kinds=$(grep '^seed ' "$log" | sed -E 's/^seed [0-9]+: (.*) of .* after .*/\1/' | sort | uniq -c | awk '{c=$1; $1=""; printf "%s%s%s", sep, c, $0; sep=", "}')
echo "$faults faults injected (seeds $base..$((base + n - 1)): $kinds): $hangs hangs, $misnamed misnamed, $skipped skipped, $failed failed in all"
grep -B2 -A12 'Failure' "$log" | head -200
[ "$failed" -eq 0 ]
