#!/usr/bin/env bash
# Correctness smoke run of chorus-bench: every op x dtype x valid redop at small sizes, checked
# against the benchmark's independent reference. Prints one line per failing combination.
# usage: bench/smoke.sh [BENCH_BINARY] [-- extra chorus-bench flags, e.g. --peers 5 --strategy ring]
# CHORUS_SMOKE_DTYPES narrows the dtypes (the sanitizer builds run "bf16 f32 i32": each run there
# costs seconds of start-up, and every dtype's arithmetic has its own suites).
set -uo pipefail
bench=${1:-build/bin/chorus-bench}
shift || true
[ "${1:-}" = -- ] && shift
extra=("$@")
peers=3
for ((i = 0; i < ${#extra[@]}; i++)); do [ "${extra[i]}" = --peers ] && peers=${extra[i + 1]}; done
fails=0 runs=0
for op in all_reduce reduce reduce_scatter broadcast all_gather all_to_all gather scatter send_recv barrier; do
  for dt in ${CHORUS_SMOKE_DTYPES:-f16 bf16 f32 f64 i8 u8 i32 i64}; do
    case $op in all_reduce | reduce | reduce_scatter) redops="sum prod min max avg band bor bxor" ;; *) redops=sum ;; esac
    for r in $redops; do
      case $dt:$r in f*:b* | bf16:b*) continue ;; esac  # bitwise ops need an integer dtype
      [ $op = barrier ] && [ $dt != f32 ] && continue   # barrier moves no data: one run is enough
      runs=$((runs + 1))
      out=$("$bench" --op $op --dtype $dt --redop $r -b 1 -e 64K -f 7 -n 3 -w 1 --peers "$peers" \
            --root $((peers - 1)) --timeout-ms 5000 "${extra[@]}" 2>&1)
      rc=$?
      if [ $rc -ne 0 ]; then
        fails=$((fails + 1))
        echo "FAIL (exit $rc): --op $op --dtype $dt --redop $r ${extra[*]}"
        echo "$out" | grep -E 'error|FAILED' | sort -u | head -5 | sed 's/^/    /'
      fi
    done
  done
done
echo "smoke: $((runs - fails))/$runs passed"
[ $fails -eq 0 ]
