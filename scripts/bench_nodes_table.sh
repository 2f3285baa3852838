#!/usr/bin/env bash
# The README's multi-node table in one run: the TCP anchors (gloo ring and halving-doubling, Open
# MPI over TCP, torch.distributed with gloo; 2 and 4 ranks), the loopback limits, and
# chorus-bench --nodes M --peers 1 on the same machine, then the ratios the targets use.
# usage: scripts/bench_nodes_table.sh [BUILD_DIR]   (needs: shared/anchors/anchors.sh --install, once)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
bench=$build/bin/chorus-bench
anchors=${ANCHORS:-$here/../shared/anchors/anchors.sh}
out=$(mktemp -d)

for n in 2 4; do
  echo "## anchors, $n ranks, all_reduce f32 sum (1 KiB: 2000 iterations; 64 MiB: 20)"
  for w in gloo-ring gloo-hd mpi-tcp torch-gloo; do
    small=$(bash "$anchors" -n $n -b 1024 -e 1024 -i 2000 $w 2>/dev/null | awk '$1 == 1024 {print $2}')
    large=$(bash "$anchors" -n $n -b 67108864 -e 67108864 -i 20 $w 2>/dev/null | awk '$1 == 67108864 {print $4}')
    printf "%-11s 1 KiB %8s us   64 MiB busbw %6s GB/s\n" "$w" "${small:-?}" "${large:-?}" | tee -a "$out/anchors-$n"
  done
  echo "## chorus-bench --nodes $n --peers 1"
  "$bench" --nodes $n --peers 1 --op all_reduce -b 1K -e 1K -n 2000 -w 200 | grep -E '^ +[0-9]' | tee "$out/small-$n"
  "$bench" --nodes $n --peers 1 --op all_reduce -b 64K -e 64M -f 4 -n 20 -w 3 | grep -E '^ +[0-9]' | tee "$out/large-$n"
  awk -v f="$out/anchors-$n" -v s="$out/small-$n" -v l="$out/large-$n" -v n=$n 'BEGIN {
    while ((getline line < f) > 0) { split(line, a, " +"); t = a[4] + 0; b = a[9] + 0;
      if (a[1] ~ /^gloo/ && (bg == 0 || t < bg)) bg = t; if (b > bb) bb = b }
    getline line < s; split(line, x, " +"); med = x[11] + 0
    while ((getline line < l) > 0) { split(line, y, " +"); if (y[2] == 67108864) ours = y[9] + 0 }
    printf "ratios, %d nodes: 64 MiB busbw %.2f / best anchor %.2f = %.2fx (target 1.5x); 1 KiB median %.1f us vs best gloo %.1f us (target <= it and <= 100)\n", n, ours, bb, ours / bb, med, bg }'
done
echo "## loopback limits"
bash "$anchors" tcp 2>/dev/null || true
"$build/bin/chorus-tcp-exchange" 2>/dev/null || true
rm -rf "$out"
