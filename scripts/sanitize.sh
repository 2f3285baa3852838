#!/usr/bin/env bash
# The test suites under a sanitizer, as CI runs them (.ci/run):
#   asan  ASan + UBSan, every suite, node processes included (a report makes its process exit
#         non-zero, and the test that started it fails)
#   tsan  TSan, the suites of one process (below), on a CAF built with
#         TSan too (scripts/sanitizers/caf_tsan.sh: Debian's CAF is not instrumented, and every
#         message between threads would read as a race)
# Each builds into build-asan/ or build-tsan/ (CMakePresets.json). Suppressions, each explained,
# are in scripts/sanitizers/. A report ends its process with a non-zero code (a node process's
# too: the test that started it fails).
# usage: scripts/sanitize.sh asan|tsan
set -euo pipefail
kind=${1:?usage: scripts/sanitize.sh asan|tsan}
cd "$(dirname "$0")/.."
here=$(pwd)
# Both presets build every suite into one program, chorus-suites (CHORUS_ONE_TEST_PROGRAM: one
# link rather than ~90 of ~100 MB each); ctest still runs each case in a process of its own.
# TSan leaves out the suites it does not run: it sees races between threads, so the suites that
# run in one thread (codecs, kernels, the schedule simulator, the tuning rules, the orchestrator's
# pure core, Config::from_env) and the suites of several processes (left to the asan run, below)
# are not built for it.
left_out=()
if [ "$kind" = tsan ]; then
  left_out=(data_codec_test early_landing_test half_conversion_test kernel_isa_test orchestrator_codec_test
    orchestrator_core_test peer_codec_garbled_test peer_codec_test reduce_kernel_semantics_test reduce_kernels_test
    schedule_direct_test schedule_results_test schedule_shapes_test simulator_test tuning_test work_buffer_test
    config_env_test multi_node_test job_status_test fault_injection_test orchestrator_daemon_test
    orchestrator_front_door_test launch_env_test chorus_run_test cuda_device_test device_tensors_on_gpu_test)
fi
cmake --preset "$kind" -DCHORUS_SUITES_LEFT_OUT="$(IFS=';'; echo "${left_out[*]}")" >/dev/null
if [ "$kind" = tsan ]; then scripts/sanitizers/caf_tsan.sh "$here/build-tsan/caf"; fi
# Both build only what ctest runs: the suites (and what they start) and the programs ctest runs
# itself, not the other benches and examples.
targets=(--target chorus-suites)
for t in chorus-bench chorus-dp-example chorus-actor-demo chorus-demo chorus-node-example chorus-elastic-example chorus-run; do
  targets+=(--target "$t")
done
cmake --build "build-$kind" -j"${JOBS:-2}" "${targets[@]}"
echo "sanitize $kind: built after $SECONDS s"  # the stage's own clock (CAF included for tsan)
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
    export LD_LIBRARY_PATH="$here/build-tsan/caf/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # The suites of one process where threads meet (in-process nodes included: NodeLossAcrossNodes,
    # node actors, the orchestrator actor). Left to the asan run: the suites of several processes,
    # whose wall-clock bounds (a TLS join, a frozen node's survivors exiting, 100 soak ops within
    # 60 s) TSan's 5-15x slowdown breaks; the suites of one thread (not built, above). And of the
    # suites run once per strategy, TSan runs ring and auto: the others share their
    # threads' code (the lanes, the arena, the connections) and differ in arithmetic only, which
    # the asan run covers.
    exclude="$exclude|MultiNode|bench_nodes|bench_smoke|readme_quickstart|slurm_srun|elastic_soak"
    exclude="$exclude|(Large|EveryOpAcrossNodes|BitIdentical)\\..*/(tree_2|tree_3|centralized|direct|dbtree)( |\$)"  # a parameterized name goes on with "  # GetParam() = ..."
    ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan" >&2; exit 2 ;;
esac
ctest --test-dir "build-$kind" -j"${JOBS:-2}" --output-on-failure -E "$exclude"
