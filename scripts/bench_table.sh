#!/usr/bin/env bash
# The README's benchmark table in one run: the anchors (memcpy bandwidth, Open MPI shared-memory
# all-reduce with 2 ranks) and chorus-bench on the same machine, then the ratios the targets use.
# usage: scripts/bench_table.sh [BUILD_DIR]    (needs: shared/anchors/anchors.sh --install, once)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${1:-$here/build}/bin/chorus-bench
anchors=${ANCHORS:-$here/../shared/anchors/anchors.sh}

echo "## anchors"
membw=$(bash "$anchors" membw | tee /dev/stderr | awk '/^memcpy/ {print $2}')
mpi=$(bash "$anchors" -n 2 -b 67108864 -e 67108864 mpi-shm | tee /dev/stderr | awk '$1 == 67108864 {print $4}')

echo "## chorus-bench, 2 peers, all_reduce f32 sum"
# Small sizes need many iterations: the first ones pay for waking sleeping threads.
"$bench" --op all_reduce --peers 2 -b 1K -e 256K -f 4 -n 2000 -w 200
"$bench" --op all_reduce --peers 2 -b 1M -e 64M -f 4 -n 20 -w 5 | tee /tmp/chorus-table-2.txt
echo "## 1 KiB latency, 2 peers (median over 5000 iterations)"
"$bench" --op all_reduce --peers 2 -b 1K -e 1K -n 5000 -w 200 | grep -E '^ +[0-9]'
for n in 4 8; do
  echo "## $n peers"
  "$bench" --op all_reduce --peers $n -b 1K -e 64K -f 64 -n 1000 -w 100 | grep -E '^ +[0-9]'
  "$bench" --op all_reduce --peers $n -b 4M -e 64M -f 16 -n 5 -w 2 | grep -E '^ +[0-9]'
done

ours=$(awk '$1 == 67108864 {print $8}' /tmp/chorus-table-2.txt)
echo "## ratios at 64 MiB, 2 peers"
awk -v o="$ours" -v m="$mpi" -v b="$membw" 'BEGIN {
  printf "chorus busbw %.2f GB/s; / mpi-shm %.2f GB/s = %.2fx (target >= 2); / memcpy %.2f GB/s = %.2f (target >= 0.5)\n", o, m, o / m, b, o / b }'
