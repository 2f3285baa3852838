#!/usr/bin/env bash
# The README's one-host table in one run: node processes of one machine (chorus-bench --nodes N
# --peers 1, shared memory, and with --transport network) and threads of one process against
# Open MPI's shared memory (anchors.sh mpi-shm) and TCP (mpi-tcp), and the loopback limit
# (chorus-tcp-exchange); then the ratios the targets use. All-reduce, f32, sum.
# usage: scripts/bench_host_table.sh [BUILD_DIR]   (needs: shared/anchors/anchors.sh --install, once)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
bench=$build/bin/chorus-bench
anchors=${ANCHORS:-$here/../shared/anchors/anchors.sh}

# "size median_us busbw" rows of chorus-bench for the sizes given.
chorus() { # args...
  "$bench" --op all_reduce "$@" | awk '/^ +[0-9]/ {printf "%s %s %s\n", $1, $10, $8}'
}
mpi() { # ranks which bytes iters -> time_us busbw
  bash "$anchors" -n "$1" -b "$3" -e "$3" -i "$4" "$2" 2>/dev/null | awk -v b="$3" '$1 == b {print $2, $4}'
}

for n in 2 4; do
  echo "## $n ranks"
  read -r shm_small _ < <(mpi $n mpi-shm 1024 2000)
  read -r shm_mid _ < <(mpi $n mpi-shm 65536 500)
  read -r _ shm_bw < <(mpi $n mpi-shm 67108864 20)
  read -r tcp_small _ < <(mpi $n mpi-tcp 1024 2000)
  printf "mpi-shm: 1 KiB %s us, 64 KiB %s us, 64 MiB busbw %s GB/s; mpi-tcp: 1 KiB %s us\n" \
    "$shm_small" "$shm_mid" "$shm_bw" "$tcp_small"
  for t in auto network; do
    small=$(chorus --nodes $n --peers 1 --transport $t -b 1K -e 1K -n 2000 -w 200)
    mid=$(chorus --nodes $n --peers 1 --transport $t -b 64K -e 64K -n 500 -w 50)
    large=$(chorus --nodes $n --peers 1 --transport $t -b 64M -e 64M -n 20 -w 3)
    printf "chorus processes (%s): 1 KiB median %s us, 64 KiB median %s us, 64 MiB busbw %s GB/s\n" \
      "$t" "$(echo "$small" | cut -d' ' -f2)" "$(echo "$mid" | cut -d' ' -f2)" "$(echo "$large" | cut -d' ' -f3)"
    if [ $t = auto ]; then
      awk -v s="$(echo "$small" | cut -d' ' -f2)" -v m="$(echo "$mid" | cut -d' ' -f2)" \
          -v l="$(echo "$large" | cut -d' ' -f3)" -v ss="$shm_small" -v sm="$shm_mid" -v sl="$shm_bw" -v n=$n 'BEGIN {
        printf "ratios, %d processes vs mpi-shm: 1 KiB %.1fx its time (target <= 1), 64 KiB %.1fx (target <= 1), 64 MiB busbw %.2fx (target >= 2)\n",
          n, s / ss, m / sm, l / sl }'
    fi
  done
  threads=$(chorus --peers $n -b 1K -e 1K -n 5000 -w 200)
  printf "chorus threads: 1 KiB median %s us\n" "$(echo "$threads" | cut -d' ' -f2)"
done
echo "## loopback limit"
"$build/bin/chorus-tcp-exchange" 2>/dev/null || true
