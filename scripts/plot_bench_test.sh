#!/usr/bin/env bash
# Checks scripts/plot_bench.sh without gnuplot (a ctest): --table parses saved chorus-bench and
# anchors.sh outputs into exactly the rows they hold, and bad inputs and a missing gnuplot fail
# with their message, and scripts/setup.sh installs gnuplot. Where gnuplot is installed it also
# draws a PNG of the same inputs.
# The inputs below are excerpts of real runs (2-core VM), plus one failed-size row in the format
# chorus-bench prints for it (bench/report.cpp, print_failed_row).
set -uo pipefail
plot=$(cd "$(dirname "$0")" && pwd)/plot_bench.sh
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

cat >"$dir/chorus.txt" <<'EOF'
# series: chorus processes (shm), 2 ranks
# chorus-bench: op all_reduce, peers 2, dtype f32, redop sum, strategy auto, device cpu
#  minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 2 iters: 20 validation: 1 root: 0 timeout: 30000 ms
#
#       size         count      type   redop    root     time(us)    algbw    busbw  #wrong   median(us)  strategy
#        (B)    (elements)                                          (GB/s)   (GB/s)
        1024           256       f32     sum      -1        56.03    0.018    0.018       0        52.51  oneshot
        2048           512       f32     sum      -1        error        -        -   error            -
        4096          1024       f32     sum      -1        80.81    0.051    0.051       0        88.61  oneshot
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.0663946
EOF
cat >"$dir/mpi.txt" <<'EOF'
# transport: shared memory
# mpi allreduce ranks=2
#       bytes    time_us      algbw      busbw
         1024        1.7      0.612      0.612
--------------------------------------------------------------------------
         2048        0.7      2.999      2.999
EOF
cat >"$dir/thr.txt" <<'EOF'
        1024           256       f32     sum      -1        94.90    0.011    0.011     N/A        83.53  centralized
EOF

# The rows, labelled from the file's "# series:" line, from LABEL=FILE and from the file's name;
# the failed size is left out and named on stderr.
expected=$(printf '%s\n' \
  $'chorus processes (shm), 2 ranks\t1024\t56.03\t0.018' \
  $'chorus processes (shm), 2 ranks\t4096\t80.81\t0.051' \
  $'Open MPI shm, 2 ranks\t1024\t1.7\t0.612' \
  $'Open MPI shm, 2 ranks\t2048\t0.7\t2.999' \
  $'thr\t1024\t94.90\t0.011')
got=$("$plot" --table "$dir/chorus.txt" "Open MPI shm, 2 ranks=$dir/mpi.txt" "$dir/thr.txt" 2>"$dir/err") ||
  fail "--table exited non-zero: $(cat "$dir/err")"
[ "$got" = "$expected" ] || fail "--table rows:"$'\n'"$got"$'\n'"expected:"$'\n'"$expected"
grep -q "chorus.txt:8: size 2048 failed" "$dir/err" || fail "the failed size is not named: $(cat "$dir/err")"

# expect_error NAME MESSAGE ARGS...: plot_bench.sh ARGS must exit non-zero, saying MESSAGE.
expect_error() {
  local name=$1 message=$2; shift 2
  if out=$("$@" 2>&1 >/dev/null); then fail "$name: exited 0"; fi
  [[ $out == *"$message"* ]] || fail "$name: message '$out' lacks '$message'"
}
cat "$dir/chorus.txt" "$dir/mpi.txt" >"$dir/two.txt"
expect_error "two tables" "two.txt:15: size 1024 after 4096: a second table" "$plot" --table "$dir/two.txt"
echo "        1024  256  f32  0.5" >"$dir/odd.txt"
expect_error "odd row" "odd.txt:1: neither a chorus-bench row" "$plot" --table "$dir/odd.txt"
echo "# nothing measured" >"$dir/empty.txt"
expect_error "no rows" "empty.txt: no rows" "$plot" --table "$dir/thr.txt" "$dir/empty.txt"
expect_error "no file" "cannot read $dir/absent.txt" "$plot" --table "$dir/absent.txt"
expect_error "no gnuplot" "apt-get install gnuplot-nox" \
  env GNUPLOT="$dir/no-gnuplot" "$plot" -o "$dir/x.png" "$dir/thr.txt"

# A fresh machine set up by scripts/setup.sh has gnuplot: its package list names it.
list=$(awk '/^packages=\(/,/\)$/' "$(dirname "$plot")/setup.sh")
eval "$list"
[[ " ${packages[*]:-} " == *" gnuplot-nox "* ]] || fail "scripts/setup.sh does not install gnuplot-nox: ${packages[*]:-}"

if command -v gnuplot >/dev/null; then
  "$plot" -o "$dir/plot.png" "$dir/chorus.txt" "Open MPI=$dir/mpi.txt" >/dev/null 2>&1 || fail "drawing failed"
  [ "$(head -c 8 "$dir/plot.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    fail "no PNG written"
else
  echo "gnuplot not installed: drawing not checked"
fi
[ $fails -eq 0 ] && echo "plot_bench: all checks passed"
exit $((fails > 0))
