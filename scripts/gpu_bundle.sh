#!/usr/bin/env bash
# Packs what the GPU checks need into one folder (default .gpu/, ignored by git) so that they can
# run on a machine with a GPU but without our build dependencies (the lent device machines): the
# test and bench binaries and every shared library they load
# except the C and C++ runtimes, the CUDA driver and NCCL (found on the GPU machine by gpu_checks.sh).
#   scripts/gpu_bundle.sh [build-dir] [out-dir]    (also writes out-dir.tar.xz, the same packed)
set -euo pipefail
build=${1:-build}
out=${2:-.gpu}
[ -x "$build/bin/device_tensors_test" ] || { echo "gpu_bundle: build first (scripts/setup.sh)"; exit 2; }
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
bins="device_tensors_on_gpu_test gpu_teardown_test device_tensors_test device_plan_test device_queue_test cuda_device_test stream_order_test chorus-stream-bench chorus-bench chorus-gpu-example chorus-gpu-nodes-example chorus-orchestrator"
for b in $bins; do cp "$build/bin/$b" "$out/bin/"; done
for b in $bins; do
  ldd "$build/bin/$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    # The C and C++ runtimes stay the GPU machine's own (a copy from here would demand this
    # machine's glibc); so do the CUDA driver and NCCL.
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcuda.so*|libnccl.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
strip --strip-unneeded "$out"/bin/* "$out"/lib/* 2>/dev/null || true
cp scripts/gpu_checks.sh "$out/"
du -sh "$out"
# Stripped, the programs (each holding the whole library) still come to ~85 MB; they share most of
# their bytes, so the archive is ~11 MB: `tar -xJf "$out.tar.xz"` where they run.
tar -cf - "$out" | xz -6 -T2 >"$out.tar.xz"
du -sh "$out.tar.xz"
