#!/usr/bin/env bash
# Every check that needs a GPU, in one command. Run it on a machine with a CUDA device, either
# from a build tree (scripts/gpu_checks.sh build) or from a bundle made by scripts/gpu_bundle.sh
# (scripts/gpu_checks.sh .gpu). Logs go to $OUT (or ./gpu-checks/). It runs:
#   1. the GPU test cases (device_tensors_on_gpu_test, device_tensors_test, cuda_device_test), the
#      tests of the GPU layer's plain C++ (device_plan_test: the op plans; device_queue_test: the
#      device actors' mailbox) and the GPU example (chorus-gpu-example);
#   2. (run last, being the slowest) compute-sanitizer memcheck and racecheck over the GPU tests,
#      and its leak check over a Runtime's life and teardown;
#   3. chorus-stream-bench (ops ordered in a CUDA stream: the host's cost, 1,000 in a row);
#      chorus-bench --device cuda for every op (4 logical peers on GPU 0), the 256 MiB all_reduce
#      against the memory-bound ideal (target: at most 1.25x), and the 1 KiB all_reduce between 2
#      logical peers (target: median at most 30 us);
#   4. with 2 or more GPUs: every op over distinct GPUs through NCCL and through the on-device plan;
#   4b. the GPU layer's teardown: gpu_teardown_test, and 20 runs of the 256 MiB all_reduce that
#      must each exit cleanly;
#   5. node processes sharing GPU 0 (CUDA IPC, strategy cuda-ipc): the GPU nodes example twice on
#      cuda:0, and chorus-bench --nodes 2 (1 and 2 peers each) for every op;
#   (after step 1, the bundle's kit given and a python3 that imports torch found) the Python package
#      compiled against that torch (gpu_python.sh), and the Python suites with it, CUDA tensors too.
set -uo pipefail
root=${1:-build}
bin=$root/bin
out=${OUT:-gpu-checks}
mkdir -p "$out"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
[ -d "$root/lib" ] && export LD_LIBRARY_PATH="$root/lib:$LD_LIBRARY_PATH"
# NCCL: the system's, the CUDA toolkit's, or the one inside a Python install (PyTorch ships it).
if ! ldconfig -p 2>/dev/null | grep libnccl.so.2 >/dev/null; then
  for d in /usr/local/cuda/lib /usr/local/cuda/lib64 $(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__path__[0]+"/")+"/lib")' 2>/dev/null); do
    [ -e "$d/libnccl.so.2" ] && export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH" && break
  done
fi
export PATH="$PATH:/usr/local/cuda/bin"  # compute-sanitizer often lives only there
status=0
# Device time is lent by the minute: no step may take more than GPU_CHECK_STEP_S seconds (a hung
# step is a failure, and the steps after it still run); the Python step bounds each of its
# compiles, its link and each suite so.
step_s=${GPU_CHECK_STEP_S:-150}
run() {  # name, command...
  local name=$1; shift
  echo "== $name: $*" | tee -a "$out/summary.txt"
  local t0=$SECONDS cmd=(timeout -k 5 "$step_s")
  [ "$(type -t "$1")" = function ] && cmd=()  # a shell function cannot run under timeout
  if "${cmd[@]}" "$@" >"$out/$name.log" 2>&1; then echo "   ok ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
  else echo "   FAILED (exit $?, $((SECONDS - t0)) s; see $name.log)" | tee -a "$out/summary.txt"; status=1; fi
  grep -iE "SKIPPED|PASSED|FAILED|Out of bounds|ideal|ERROR SUMMARY|target" "$out/$name.log" | head -40 >>"$out/summary.txt" || true
}
nvidia-smi -L | tee "$out/summary.txt" || echo "no nvidia-smi" | tee "$out/summary.txt"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
gpus=${gpus:-0}

# With a GPU present, a GPU test that skipped is a failure (e.g. the CUDA runtime cannot start).
no_skips() {  # log name, grep pattern of the tests that need only one GPU
  if [ "$gpus" -ge 1 ] && grep -q "SKIPPED.*$2" "$out/$1.log"; then
    echo "   FAILED: GPU tests skipped although nvidia-smi lists $gpus GPU(s)" | tee -a "$out/summary.txt"; status=1
  fi
}
# First, alone in a fresh process: a stream-ordered op whose kernels CUDA had not loaded yet hung
# (lazy loading waits for the GPU, whose stream waits for the op); the device actors preload them.
run gpu_stream_first "$bin/device_tensors_on_gpu_test" --gtest_filter='*OpsOrdered*'
run gpu_tests "$bin/device_tensors_on_gpu_test"
no_skips gpu_tests "DeviceTensorsOnGpu\.\(CopiesRoundTrip\|EveryOp\|AllReduceEveryDtype\|ManyConsecutive\|OpsOrdered\|GradientSync\)"
run stream_order_test "$bin/stream_order_test"
run gpu_teardown_test "$bin/gpu_teardown_test"
no_skips gpu_teardown_test "GpuTeardown\."
run device_tensors_test "$bin/device_tensors_test"
run cuda_device_test "$bin/cuda_device_test"
no_skips cuda_device_test "CudaDevice\."
run device_plan_test "$bin/device_plan_test"
run device_queue_test "$bin/device_queue_test"
run gpu_example "$bin/chorus-gpu-example"
if [ "$gpus" -lt 1 ]; then
  echo "== no GPU visible (nvidia-smi): the GPU checks cannot run here" | tee -a "$out/summary.txt"
  exit 1
fi
# The Python package against this machine's torch (2.x on the lent machines), its suites at once.
if [ -d "$root/py" ]; then
  # Exit 3: no python3 here imports torch, so nothing ran (said, not failed).
  python_suites() {
    GPU_CHECK_STEP_S=$step_s bash "$(dirname "$0")/gpu_python.sh" "$root" "$out"
    local rc=$?
    [ $rc = 3 ] && return 0
    return $rc
  }
  run python python_suites
  grep -h "^python \|^torch \|gpu_python" "$out/python.log" >>"$out/summary.txt" || true
else
  echo "== the bundle has no py/ kit: the Python suites NOT run" | tee -a "$out/summary.txt"
fi
bench="$bin/chorus-bench --device cuda --timeout-ms 60000"
for op in all_reduce reduce broadcast all_gather reduce_scatter all_to_all gather scatter send_recv barrier; do
  run "bench_$op" $bench --op $op --peers 4 -b 1K -e 64M -f 8 -n 20 -w 5
done
run bench_allreduce_256M $bench --op all_reduce --peers 4 -b 256M -e 256M -n 20 -w 5
# The GPU layer's teardown at exit (a 256 MiB run once died at exit, 1 of 5, on an H100): 20 runs.
teardown_runs() {
  local crashed=0 i
  for i in $(seq 20); do
    $bench --op all_reduce --peers 4 -b 256M -e 256M -n 3 -w 1 >>"$out/teardown_runs.out" 2>&1 || { echo "run $i: exit $?"; crashed=$((crashed + 1)); }
  done
  echo "teardown: 20 runs of the 256 MiB all_reduce, $crashed ended badly"
  [ $crashed = 0 ]
}
run teardown_runs teardown_runs
grep -h "teardown:" "$out/teardown_runs.log" >>"$out/summary.txt" || true
run bench_allreduce_1K $bench --op all_reduce --peers 2 -b 1K -e 1K -n 2000 -w 200
# Stream-ordered ops (OpOptions::stream): the host's cost to enqueue one (target <= 5 us), and
# 1,000 in a row against the same blocking (target >= 2x faster).
run stream_bench "$bin/chorus-stream-bench" --peers 2 --ops 1000 --bytes 1024 --reps 7
for dt in f16 bf16 f64 i8 u8 i32 i64; do
  run "bench_dtype_$dt" $bench --op all_reduce --peers 4 --dtype $dt --redop max -b 1K -e 16M -f 16 -n 5 -w 1
done
if [ "$gpus" -ge 2 ]; then
  for s in nccl direct; do
    for op in all_reduce reduce broadcast all_gather reduce_scatter all_to_all gather scatter; do
      run "bench_${s}_$op" $bench --op $op --peers "$gpus" --gpus "$gpus" --strategy $s -b 1K -e 256M -f 16 -n 10 -w 2
    done
  done
fi
# Two node processes on one GPU: auto runs their ops through CUDA IPC.
ipc_pair() {
  local log=$out/orchestrator_ipc.log port
  "$bin/chorus-orchestrator" --port 0 --nodes 2 >"$log" 2>&1 &
  local orch=$!
  for _ in $(seq 50); do port=$(grep -oE 'port [0-9]+' "$log" | head -1 | cut -d' ' -f2); [ -n "$port" ] && break; sleep 0.1; done
  timeout -k 5 "$step_s" "$bin/chorus-gpu-nodes-example" "127.0.0.1:$port" 2 127.0.0.1 0 & local a=$!
  timeout -k 5 "$step_s" "$bin/chorus-gpu-nodes-example" "127.0.0.1:$port" 2 127.0.0.1 0; local rb=$?
  wait $a; local ra=$?
  kill $orch 2>/dev/null; wait $orch 2>/dev/null
  [ $ra = 0 ] && [ $rb = 0 ]
}
run gpu_nodes_sharing_gpu0 ipc_pair
grep -q "through cuda-ipc" "$out/gpu_nodes_sharing_gpu0.log" ||
  { echo "   FAILED: the pair did not run through cuda-ipc" | tee -a "$out/summary.txt"; status=1; }
for p in 1 2; do
  for op in all_reduce reduce broadcast all_gather reduce_scatter all_to_all gather scatter; do
    run "bench_ipc_${p}x2_$op" $bench --op $op --nodes 2 --peers $p -b 1K -e 256M -f 16 -n 10 -w 2
  done
done
# The sanitizers last: they are the slowest steps, and the figures above matter more if time runs out.
if command -v compute-sanitizer >/dev/null; then
  run memcheck compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/device_tensors_on_gpu_test" --gtest_filter='DeviceTensorsOnGpu.*'
  run racecheck compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/device_tensors_on_gpu_test" --gtest_filter='DeviceTensorsOnGpu.*:-*Distinct*'
  # Device memory still allocated when CUDA tears the context down (the GPU layer's teardown frees it).
  run leakcheck compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$bin/gpu_teardown_test" --gtest_filter='GpuTeardown.ATensor*'
else
  echo "== compute-sanitizer not found: memcheck and racecheck NOT run" | tee -a "$out/summary.txt"; status=1
fi
echo "== done: $( [ $status = 0 ] && echo all passed || echo some FAILED ) (logs in $out)" | tee -a "$out/summary.txt"
exit $status
