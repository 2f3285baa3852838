#!/usr/bin/env bash
# Plots benchmark sweeps with gnuplot: one PNG, latency (time, us) and bus bandwidth (busbw, GB/s)
# against message size on log axes, one line per series, chorus beside the anchors.
#
# usage: scripts/plot_bench.sh [-o OUT.png] [--title TEXT] SERIES...
#          SERIES is LABEL=FILE or FILE: the saved stdout of one chorus-bench sweep or of one
#          anchors.sh driver (nccl-tests columns, one table per file). Without a label, the file's
#          "# series: LABEL" line names it (--run writes one), else the file's name. The title
#          is TEXT, else the first file's "# title: TEXT" line (--run writes one), else none.
#        scripts/plot_bench.sh --table SERIES...   (prints "label<TAB>size<TAB>time_us<TAB>busbw"
#          for every row parsed; no gnuplot needed)
#        scripts/plot_bench.sh --run [-o OUT.png] [--build DIR] [--anchors PATH]
#          runs the standard one-host sweep (all-reduce, f32 sum, 2 ranks, 1 KiB..64 MiB: chorus as
#          2 node processes over shared memory and over the network path, as 2 threads of one
#          process, Open MPI over shared memory and TCP, Gloo's ring), keeps each raw output
#          (-o docs/x.png: docs/x/1-chorus-shm.txt, ...), then plots them. A few minutes.
# Times are each tool's mean per op (chorus: the slowest peer's), as both print them.
# Needs gnuplot (scripts/setup.sh installs it; Debian: apt-get install gnuplot-nox) except for
# --table; --run also needs chorus-bench built and the anchors installed (anchors.sh --install).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gnuplot=${GNUPLOT:-gnuplot}

die() { echo "plot_bench: $*" >&2; exit 2; }
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

# The rows of one file as "size time_us busbw", or a clear error. chorus-bench rows have 10+
# columns (time is the 6th, busbw the 8th; a failed size prints "error" there), anchors rows 4
# (bytes time_us algbw busbw). Comments (#) and lines that are not rows (mpirun's or iperf's
# chatter, memcpy figures) are skipped; a size that does not grow starts a second table.
parse() { # file
  awk -v file="$1" '
    function num(s) { return s ~ /^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ }
    /^[ \t]*#/ || $1 !~ /^[0-9]+$/ { next }
    {
      if (NF == 4 && num($2) && num($3) && num($4)) { t = $2; bw = $4 }
      else if (NF >= 10 && !num($3)) {
        if ($6 == "error") { printf "plot_bench: %s:%d: size %s failed in the run; left out\n", file, NR, $1 > "/dev/stderr"; next }
        t = $6; bw = $8
      } else { printf "plot_bench: %s:%d: neither a chorus-bench row (10 or more columns) nor an anchors row (4): %s\n", file, NR, $0 > "/dev/stderr"; bad = 1; exit }
      if (rows && $1 + 0 <= last) { printf "plot_bench: %s:%d: size %s after %s: a second table; give each sweep its own file\n", file, NR, $1, last > "/dev/stderr"; bad = 1; exit }
      last = $1 + 0
      row[++rows] = $1 " " t " " bw
    }
    END {
      if (bad) exit 1
      if (!rows) { printf "plot_bench: %s: no rows of chorus-bench or anchors.sh output\n", file > "/dev/stderr"; exit 1 }
      for (i = 1; i <= rows; i++) print row[i]
    }' "$1"
}

# The label and file of one SERIES argument.
split_series() { # arg -> sets label, file
  if [[ $1 == *=* && ! -e $1 ]]; then label=${1%=*} file=${1##*=}; else label="" file=$1; fi
  [ -r "$file" ] || die "cannot read $file"
  if [ -z "$label" ]; then
    label=$(sed -n 's/^# series: //p' "$file" | head -1)
    [ -n "$label" ] || { label=$(basename "$file"); label=${label%.*}; }
  fi
}

table() { # series...
  local label file
  for s in "$@"; do
    split_series "$s"
    parse "$file" | awk -v l="$label" '{ printf "%s\t%s\t%s\t%s\n", l, $1, $2, $3 }'
  done
}

# Tics at powers of 4 named 1, 4, ..., 1K, ..., 16G (gnuplot draws those inside the x range).
size_tics() {
  awk 'BEGIN { split(",K,M,G", unit, ",")
    for (k = 0; k <= 34; k += 2) printf "%s\"%d%s\" %.0f", k ? ", " : "", 2 ^ (k % 10), unit[int(k / 10) + 1], 2 ^ k }'
}

plot() { # out title series...
  local out=$1 title=$2; shift 2
  command -v "$gnuplot" >/dev/null ||
    die "gnuplot not found: install it (Debian/Ubuntu: apt-get install gnuplot-nox) or set GNUPLOT"
  data=$(mktemp); trap 'rm -f "$data"' EXIT
  # One data block per series; chorus series are solid lines, the anchors dashed.
  local colors=('#d62728' '#1f77b4' '#2ca02c' '#ff7f0e' '#9467bd' '#8c564b' '#e377c2' '#17becf')
  local i=0 lat="" bw="" label file style name
  for s in "$@"; do
    split_series "$s"
    parse "$file" >>"$data" || exit 1
    printf '\n\n' >>"$data"
    style="lw 2 pt 7 ps 0.6 lc rgb '${colors[i % ${#colors[@]}]}' dt $([[ $label == chorus* ]] && echo 1 || echo 2)"
    name="title '${label//\'/\'\'}'"
    lat+="${lat:+, }'$data' index $i using 1:2 $name $style"
    bw+="${bw:+, }'$data' index $i using 1:(\$3 > 0 ? \$3 : 1/0) $name $style"
    i=$((i + 1))
  done
  "$gnuplot" <<EOF
set terminal pngcairo size 1500,650 font "DejaVu Sans,11" noenhanced
set encoding utf8
set output '${out//\'/\'\'}'
set logscale xy
set xtics ($(size_tics))
set mxtics 2
set format y "%g"
set grid xtics ytics mytics lc rgb "#dddddd"
set xrange [$(awk 'NF && $1 > 0 { lo = (lo == "" || $1 < lo) ? $1 : lo; hi = $1 > hi ? $1 : hi }
                   END { printf "%g:%g", lo / 1.15, hi * 1.15 }' "$data")]
set xlabel "message size (bytes per rank)"
set key top left box opaque Left reverse samplen 4
set style data linespoints
set multiplot layout 1,2 title '${title//\'/\'\'}'
set title "latency"
set ylabel "time per op (mean)"
set ytics ("100 ns" 0.1, "1 µs" 1, "10 µs" 10, "100 µs" 100, "1 ms" 1e3, "10 ms" 1e4, "100 ms" 1e5, "1 s" 1e6, "10 s" 1e7)
plot $lat
set title "bus bandwidth (series as on the left)"
set ylabel "busbw (GB/s)"
set ytics auto
unset key
plot $bw
unset multiplot
EOF
  echo "plot_bench: wrote $out"
}

# The standard one-host sweep; each raw output keeps its label and command as comment lines.
run_sweep() { # out build anchors
  local out=$1 build=$2 anchors=$3 dir=${1%.png}
  local bench=$build/bin/chorus-bench
  [ -x "$bench" ] || die "no $bench: build it first (cmake --build build --target chorus-bench)"
  [ -r "$anchors" ] || die "no anchors script at $anchors: pass --anchors PATH or set ANCHORS"
  mkdir -p "$dir"
  local sizes=(-b 1K -e 64M) series=()
  local title
  title="all_reduce f32 sum, 2 ranks, one host ($(nproc) cores), $(date -u '+%Y-%m-%d %H:%M UTC')"
  one() { # name label command...
    local f=$dir/$1.txt label=$2; shift 2
    echo "plot_bench: $label: $*" >&2
    { echo "# series: $label"; echo "# title: $title"; echo "# command: $*"; "$@"; } >"$f" ||
      die "$label failed (exit $?); its output is in $f"
    series+=("$f")
  }
  one 1-chorus-shm "chorus processes (shm), 2 ranks" "$bench" --op all_reduce --nodes 2 --peers 1 "${sizes[@]}" -n 200 -w 20
  one 2-chorus-net "chorus processes (network), 2 ranks" "$bench" --op all_reduce --nodes 2 --peers 1 --transport network "${sizes[@]}" -n 200 -w 20
  one 3-chorus-threads "chorus threads, 2 ranks" "$bench" --op all_reduce --peers 2 "${sizes[@]}" -n 200 -w 20
  one 4-mpi-shm "Open MPI shm, 2 ranks" bash "$anchors" -n 2 -b 1024 -e 67108864 -i 200 mpi-shm
  one 5-mpi-tcp "Open MPI tcp, 2 ranks" bash "$anchors" -n 2 -b 1024 -e 67108864 -i 200 mpi-tcp
  one 6-gloo-ring "Gloo ring, 2 ranks" bash "$anchors" -n 2 -b 1024 -e 67108864 -i 200 gloo-ring
  plot "$out" "$title" "${series[@]}"
  echo "plot_bench: redraw with: scripts/plot_bench.sh -o $out $dir/*.txt"
}

mode=plot out=bench.png title="" build=$root/build anchors=${ANCHORS:-$root/../shared/anchors/anchors.sh}
args=()
while [ $# -gt 0 ]; do case $1 in
  -o) [ $# -ge 2 ] || die "$1 needs a value"; out=$2; shift 2 ;;
  --title) [ $# -ge 2 ] || die "$1 needs a value"; title=$2; shift 2 ;;
  --build) [ $# -ge 2 ] || die "$1 needs a value"; build=$2; shift 2 ;;
  --anchors) [ $# -ge 2 ] || die "$1 needs a value"; anchors=$2; shift 2 ;;
  --table) mode=table; shift ;;
  --run) mode=run; shift ;;
  -h | --help) usage; exit 0 ;;
  -*) die "unknown flag $1 (--help lists them)" ;;
  *) args+=("$1"); shift ;;
esac; done
[[ $out == *.png ]] || die "-o must name a .png file"
case $mode in
  table) [ ${#args[@]} -gt 0 ] || die "--table needs at least one series"; table "${args[@]}" ;;
  run) [ ${#args[@]} -eq 0 ] || die "--run takes no series"; run_sweep "$out" "$build" "$anchors" ;;
  plot) [ ${#args[@]} -gt 0 ] || { usage >&2; exit 2; }
        if [ -z "$title" ]; then split_series "${args[0]}"; title=$(sed -n 's/^# title: //p' "$file" | head -1); fi
        plot "$out" "$title" "${args[@]}" ;;
esac
