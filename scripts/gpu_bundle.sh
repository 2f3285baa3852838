#!/usr/bin/env bash
# Packs what the GPU checks need into one folder (default .gpu/, ignored by git) so that they can
# run on a machine with a GPU but without our build dependencies (the lent device machines): the
# test and bench binaries and every shared library they load
# except the C and C++ runtimes, the CUDA driver and NCCL (found on the GPU machine by gpu_checks.sh),
# and py/, what gpu_python.sh needs to compile the Python package against that machine's torch.
#   scripts/gpu_bundle.sh [build-dir] [out-dir]    (also writes out-dir.tar.xz, the same packed)
set -euo pipefail
build=${1:-build}
out=${2:-.gpu}
[ -x "$build/bin/device_tensors_test" ] || { echo "gpu_bundle: build first (scripts/setup.sh)"; exit 2; }
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
bins="device_tensors_on_gpu_test gpu_teardown_test device_tensors_test device_plan_test device_queue_test cuda_device_test stream_order_test chorus-stream-bench chorus-bench chorus-gpu-example chorus-gpu-nodes-example chorus-orchestrator chorus-run"
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
cp scripts/gpu_checks.sh scripts/gpu_python.sh "$out/"
# The Python package's kit: its sources and suites, chorus's static libraries, and the headers they
# include (chorus's, each layer's include root, and CAF's, Cap'n Proto's and kj's).
kit=$out/py
mkdir -p "$kit/lib" "$kit/sys" "$kit/layers" "$kit/src/python" "$kit/src/tests" "$kit/src/bench" "$kit/src/examples"
for a in "$build"/lib/libchorus_*.a; do
  case "$a" in *testkit*|*test_cases*) ;; *) cp "$a" "$kit/lib/" ;; esac
done
cp -r include "$kit/include"
for d in "$build"/layers/*/; do
  n=$(basename "$d")
  mkdir -p "$kit/layers/$n/$n"
  to=$(cd "$kit/layers/$n/$n" && pwd)
  (cd -P "$d/$n" && find . \( -name '*.hpp' -o -name '*.h' \) -exec cp --parents {} "$to/" \;)
done
for h in caf capnp kj; do cp -r "/usr/include/$h" "$kit/sys/"; done
cp -r python/src python/chorus "$kit/src/python/"
cp -r tests/python "$kit/src/tests/"
cp -r examples/python "$kit/src/examples/"
cp bench/torch_overhead.py bench/torch_null_backend.cpp "$kit/src/bench/"
sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt" >"$kit/version"
du -sh "$out"
# Stripped, the programs (each holding the whole library) still come to ~85 MB; they share most of
# their bytes, so the archive is ~11 MB: `tar -xJf "$out.tar.xz"` where they run.
tar -cf - "$out" | xz -6 -T2 >"$out.tar.xz"
du -sh "$out.tar.xz"
