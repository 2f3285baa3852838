#!/usr/bin/env bash
# The test suites under a sanitizer, as CI runs them (.ci/run):
#   asan  ASan + UBSan, every suite, node processes included (a report makes its process exit
#         non-zero, and the test that started it fails)
#   tsan  TSan, the suites that run in one process (TSan's runtime ends a process with a report
#         with exit code 66, and the multi-process suites read their children's exit codes: those
#         run under asan instead)
# Each builds into build-asan/ or build-tsan/ (CMakePresets.json). Suppressions, each explained,
# are in scripts/sanitizers/.
# usage: scripts/sanitize.sh asan|tsan
set -euo pipefail
kind=${1:?usage: scripts/sanitize.sh asan|tsan}
cd "$(dirname "$0")/.."
here=$(pwd)
cmake --preset "$kind" >/dev/null
cmake --build "build-$kind" -j"${JOBS:-2}"
# Not under a sanitizer: install_package builds an outside program against the installed static
# libraries, which would need the sanitizer's runtime too.
exclude='install_package'
case "$kind" in
  asan)
    export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=0"
    export LSAN_OPTIONS="suppressions=$here/scripts/sanitizers/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$here/scripts/sanitizers/ubsan.supp"
    ;;
  tsan)
    export TSAN_OPTIONS="suppressions=$here/scripts/sanitizers/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
    exclude="$exclude|MultiNode|FaultInjection|OrchestratorDaemon|OrchestratorFrontDoor|bench_nodes|bench_smoke"
    ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan" >&2; exit 2 ;;
esac
ctest --test-dir "build-$kind" -j"${JOBS:-2}" --output-on-failure -E "$exclude"
