#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz/ (every decoder of bytes from outside the process), as CI
# runs them: configures the `fuzz` preset (clang, ASan + UBSan, build-fuzz/), builds the targets,
# and runs each for SECONDS (default 10) from its seeds in tests/fuzz/corpus/<target>/. What the
# fuzzer finds new goes into a scratch folder, never into the tree's corpus; a crash, leak,
# timeout or out-of-memory input is saved there and its path printed. Exits non-zero on any.
# The scratch folder is removed after a clean run unless FUZZ_SCRATCH names it (new inputs
# worth keeping, small ones that cover something new, may then be copied into the corpus).
# usage: scripts/fuzz.sh [SECONDS] [TARGET...]      (e.g. scripts/fuzz.sh 600 tcp_frames)
#        scripts/fuzz.sh build                       (builds the targets only; CI builds them early)
# Needs clang and its libFuzzer runtime (Debian 12: apt-get install clang libclang-rt-14-dev).
set -euo pipefail
seconds=${1:-10}
shift || true
cd "$(dirname "$0")/.."
here=$(pwd)

# What must be installed: clang++, and libFuzzer's runtime (libclang-rt-*-dev on Debian, which
# clang only recommends; ASan's and UBSan's runtimes come from the same package).
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found; on Debian 12: apt-get install clang libclang-rt-14-dev" >&2
  exit 2
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>"$probe/err"; then
  echo "fuzz: clang++ cannot link libFuzzer with ASan and UBSan:" >&2
  sed 's/^/  /' "$probe/err" | head -5 >&2
  echo "fuzz: on Debian 12: apt-get install libclang-rt-14-dev (the runtime of clang $(clang++ -dumpversion))" >&2
  exit 2
fi

if ! { cmake --preset fuzz && cmake --build build-fuzz -j"${JOBS:-2}" --target chorus-fuzz; } >"$probe/build" 2>&1; then
  tail -30 "$probe/build" >&2
  echo "fuzz: the fuzz build failed (cmake --preset fuzz; cmake --build build-fuzz --target chorus-fuzz)" >&2
  exit 2
fi

echo "fuzz: built after $SECONDS s"
[ "$seconds" = build ] && exit 0
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
scratch=${FUZZ_SCRATCH:-$(mktemp -d /tmp/chorus-fuzz.XXXXXX)}
# Sanitizer reports end the run (libFuzzer saves the input); the suppressions are the sanitizer
# runs' (scripts/sanitizers/), each explained there.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$here/scripts/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$here/scripts/sanitizers/ubsan.supp"
# One target's run; its verdict goes to $scratch/$t/verdict (lines to print) and its exit code.
fuzz_one() {
  local t=$1 bin=build-fuzz/bin/${1}_fuzz log rc runs took what f
  mkdir -p "$scratch/$t/new" "$scratch/$t/found"
  log=$scratch/$t/log
  # -timeout: one input over 10 s is a hang; -rss_limit_mb: 2 GiB (so is any one allocation
  # over it); -max_len: inputs up to 64 KiB (the targets bound what they take further).
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -dict=tests/fuzz/chorus.dict -artifact_prefix="$scratch/$t/found/" "$scratch/$t/new" "tests/fuzz/corpus/$t" \
    >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  took=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  {
    if [ $rc -eq 0 ]; then
      printf 'fuzz: %-14s ok     %9s runs %7s/s  %s s\n' "$t" "${runs:-?}" "${took:-?}" "$seconds"
    else
      what=$(grep -m1 -oE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer): [a-z -]+|runtime error: .*|FUZZ_CHECK failed.*' "$log" || echo "exit code $rc")
      printf 'fuzz: %-14s FAILED %s\n' "$t" "$what"
      for f in "$scratch/$t/found/"*; do [ -e "$f" ] && echo "fuzz:   input: $f"; done
      echo "fuzz:   log: $log"
    fi
  } >"$scratch/$t/verdict"
  return $rc
}
# The targets run FUZZ_JOBS at a time (default 1). Not more by default: several of them listen on
# and connect to loopback ports, and one target's connection landing on another's listener
# fails that one (front_door_fuzz: "a wrong answer reached the orchestrator", seen with 2).
jobs=${FUZZ_JOBS:-1}
failed=0
pids=()
set +e
for t in "${targets[@]}"; do
  [ -x "build-fuzz/bin/${t}_fuzz" ] || { echo "fuzz: no target $t (tests/fuzz/${t}_fuzz.cpp)" >&2; failed=1; continue; }
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  fuzz_one "$t" &
  pids+=("$!:$t")
done
for p in "${pids[@]}"; do
  wait "${p%%:*}" || failed=1
  cat "$scratch/${p#*:}/verdict"
done
set -e
if [ $failed -eq 0 ] && [ -z "${FUZZ_SCRATCH:-}" ]; then
  rm -rf "$scratch"  # nothing to look at (set FUZZ_SCRATCH=DIR to keep what the runs found)
else
  echo "fuzz: scratch (new inputs, logs): $scratch"
fi
exit $failed
