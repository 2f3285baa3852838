#!/usr/bin/env bash
# The planner says what runs: for each set of options, chorus-bench --explain's decision at every
# size is held against the strategy the sweep's ops report (the bench's last column). An op that
# meets in the arena first reports `arena` unless a peer came late, when it reports the path the
# planner names after "else"; either is what the planner said.
# usage: bench/explain_check.sh [BENCH_BINARY]
set -uo pipefail
bench=${1:-build/bin/chorus-bench}
fails=0 checked=0
check() {  # check ARGS...: one set of options
  local plan ran
  plan=$("$bench" "$@" -b 1K -e 4M -f 16 --explain 1 | grep -v '^#') || { echo "explain failed: $*"; fails=$((fails + 1)); return; }
  ran=$("$bench" "$@" -b 1K -e 4M -f 16 -n 2 -w 1 | grep -v '^#') || { echo "sweep failed: $*"; fails=$((fails + 1)); return; }
  while read -r size _ decision; do
    # "arena, else tree:2 (5 rounds, ...): why" -> first "arena", then "tree:2"
    local head=${decision%%: *} first="" then
    head=${head%% (*}
    if [[ $head == *", else "* ]]; then first=${head%%, else *}; then=${head#*, else }; else then=$head; fi
    local actual
    actual=$(awk -v s="$size" '$1 == s { print $NF }' <<<"$ran")
    checked=$((checked + 1))
    if [ -z "$actual" ] || { [ "$actual" != "$then" ] && [ "$actual" != "$first" ]; }; then
      echo "mismatch: $* at $size B: the planner said '$head', the op reported '${actual:-nothing}'"
      fails=$((fails + 1))
    fi
  done <<<"$plan"
}
check --peers 4
check --peers 3 --op broadcast --root 2
check --peers 4 --op all_gather --strategy ring
check --peers 2 --op reduce_scatter --group 1,0
check --nodes 1 --peers 2
check --nodes 2 --peers 2
check --nodes 3 --peers 1 --transport network
check --nodes 2 --peers 1 --op broadcast
check --nodes 3 --peers 1 --transport network --op reduce_scatter --strategy tree:3
check --nodes 2 --peers 2 --op all_to_all --transport network
# --explain alone, last or before another flag, is --explain 1.
one=$("$bench" --peers 3 --op broadcast -b 1K -e 64K --explain 1)
for args in "--peers 3 --op broadcast -b 1K -e 64K --explain" "--explain --peers 3 --op broadcast -b 1K -e 64K"; do
  # shellcheck disable=SC2086
  if [ "$("$bench" $args)" != "$one" ]; then echo "'chorus-bench $args' did not print --explain 1's plan"; fails=$((fails + 1)); fi
done
# Send/recv between node processes: a pair on one node process is copied as its local server
# pairs it (the words of threads of one process); a pair across nodes goes through the network.
words() { "$bench" --op send_recv "$@" -b 1K -e 1K --explain 1 | grep -v '^# [a-z]\|^#  *size'; }
for spec in "--nodes 2 --peers 2|^ .*copied by the second of the pair" "--nodes 2 --peers 1|^ .*receiving node's window" \
            "--nodes 2 --peers 3|^ .*copied by the second of the pair" "--nodes 2 --peers 3|^#.*receiving node's window"; do
  # shellcheck disable=SC2086
  if ! words ${spec%%|*} | grep -q "${spec#*|}"; then
    echo "send/recv --explain ${spec%%|*}: no line matching '${spec#*|}'"; fails=$((fails + 1))
  fi
done
echo "explain_check: $checked sizes, $fails mismatches"
[ "$checked" -gt 30 ] && [ "$fails" -eq 0 ]
