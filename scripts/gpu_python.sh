#!/usr/bin/env bash
# The Python package against the torch of the machine it runs on (a lent GPU machine has torch 2.x
# and CUDA, this one Debian's 1.13 on CPU): compiles the extension module from the bundle's kit
# (scripts/gpu_bundle.sh packs python/'s sources, chorus's static libraries and the headers they
# need) as torch's own extensions are compiled, then runs the Python suites with it, the CUDA
# tensor suite included. gpu_checks.sh runs it; alone: scripts/gpu_python.sh BUNDLE [OUT [SUITE...]]
# (the suites named, else every one). Each compile, the link and each suite is bounded by
# GPU_CHECK_STEP_S; exit 3 where no python3 imports torch (nothing run).
#   Exit 0 when the module builds and every suite passes; the logs are in OUT/python_*.log.
set -uo pipefail
root=$(cd "${1:-.gpu}" && pwd)
out=$(mkdir -p "${2:-${OUT:-gpu-checks}}" && cd "${2:-${OUT:-gpu-checks}}" && pwd)
kit=$root/py
# The interpreter: GPU_PYTHON, else the first python3 (on PATH, then Debian's) that imports torch.
py=${GPU_PYTHON:-}
for c in $(command -v python3) /usr/bin/python3; do
  [ -z "$py" ] && "$c" -c "import torch" 2>/dev/null && py=$c
done
[ -n "$py" ] || { echo "gpu_python: no python3 here imports torch: the Python suites NOT run"; exit 3; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
step_s=${GPU_CHECK_STEP_S:-150}
[ -d "$kit" ] || { echo "gpu_python: no kit in $root (scripts/gpu_bundle.sh packs it)"; exit 2; }
pkg=$root/pybuild/chorus
rm -rf "$root/pybuild" && mkdir -p "$pkg"
cp "$kit"/src/python/chorus/*.py "$pkg/"

# What torch says about building against it (torch.utils.cpp_extension's own answers).
facts=$("$py" - <<'EOF'
import sysconfig, torch, torch.utils.cpp_extension as e
try:
    inc = e.include_paths(device_type="cuda" if torch.version.cuda else "cpu")
except TypeError:  # torch 1.x
    inc = e.include_paths(cuda=torch.version.cuda is not None)
abi = " ".join(f'-D{k}="{getattr(torch._C, "_" + k)}"' for k in
               ("PYBIND11_COMPILER_TYPE", "PYBIND11_STDLIB", "PYBIND11_BUILD_ABI") if hasattr(torch._C, "_" + k))
print(f"TORCH_VERSION='{torch.__version__}'")
print(f"TORCH_INC='{' '.join('-isystem ' + p for p in inc)}'")
print(f"TORCH_LIB='{e.library_paths()[0]}'")
print(f"TORCH_CUDA={int(torch.version.cuda is not None)}")
print(f"TORCH_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
print(f"PYBIND_ABI='{abi}'")
print(f"PY_INC='{sysconfig.get_paths()['include']}'")
print(f"EXT='{sysconfig.get_config_var('EXT_SUFFIX')}'")
EOF
) || { echo "gpu_python: $py cannot answer what torch is"; exit 2; }
eval "$facts"
echo "torch $TORCH_VERSION (CUDA: $TORCH_CUDA), $("$py" -V), $(${CXX:-g++} --version | head -1)" | tee "$out/python_build.log"
[ -e "$PY_INC/Python.h" ] || { echo "gpu_python: no Python.h in $PY_INC" | tee -a "$out/python_build.log"; exit 2; }
# The bundle's static libraries use the C++11 ABI of std::string; a torch built with the old one cannot take them.
[ "$TORCH_ABI" = 1 ] || { echo "gpu_python: torch $TORCH_VERSION uses the pre-C++11 ABI; the bundle's libraries do not" | tee -a "$out/python_build.log"; exit 2; }

defs="-DCHORUS_VERSION=\"$(cat "$kit/version")\" -DCHORUS_TORCH_VERSION=\"$TORCH_VERSION\" -DTORCH_API_INCLUDE_EXTENSION_H -D_GLIBCXX_USE_CXX11_ABI=$TORCH_ABI $PYBIND_ABI"
libs="-L$TORCH_LIB -Wl,-rpath,$TORCH_LIB -lc10 -ltorch -ltorch_cpu -ltorch_python"
cuda_libs=""
if [ -e "$kit/lib/libchorus_cuda.a" ]; then  # chorus built with its CUDA layer: CUDA's runtime and NCCL
  cudart=$(ls /usr/local/cuda/lib64/libcudart_static.a /usr/local/cuda/lib/libcudart_static.a 2>/dev/null | head -1)
  [ -n "$cudart" ] || cudart=$(find /usr/local /opt /usr/lib -name 'libcudart_static.a' 2>/dev/null | head -1)
  nccl=$(ls /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/lib/libnccl.so.2 2>/dev/null | head -1)
  [ -n "$nccl" ] || nccl=$("$py" -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  [ -n "$cudart" ] && [ -e "$nccl" ] ||
    { echo "gpu_python: CUDA's static runtime (libcudart_static.a: '$cudart') or NCCL (libnccl.so.2: '$nccl') not found" | tee -a "$out/python_build.log"; exit 2; }
  cuda_libs="$cudart -ldl -lrt $nccl -Wl,-rpath,$(dirname "$nccl")"
  if [ "$TORCH_CUDA" = 1 ]; then  # and torch's CUDA tensors, ordered on its current stream
    defs="$defs -DCHORUS_TORCH_CUDA"
    libs="$libs -lc10_cuda"
    incs_cuda="-isystem /usr/local/cuda/include"
  fi
fi
incs="-I$kit/include $(for d in "$kit"/layers/*; do printf -- '-I%s ' "$d"; done) -isystem $kit/sys $TORCH_INC ${incs_cuda:-} -isystem $PY_INC"
flags="-std=c++20 -O2 -fPIC -fvisibility=hidden -Wno-unused-parameter -Wno-deprecated-declarations"
objs=()
pids=()
mkdir -p "$root/pybuild/obj"
for s in module errors torch_tensor work process_group join; do
  timeout -k 5 "$step_s" ${CXX:-g++} $flags $defs $incs -c "$kit/src/python/src/$s.cpp" -o "$root/pybuild/obj/$s.o" >"$root/pybuild/obj/$s.log" 2>&1 &
  pids+=($!)
  objs+=("$root/pybuild/obj/$s.o")
done
timeout -k 5 "$step_s" ${CXX:-g++} $flags $defs -isystem $kit/sys $TORCH_INC -isystem $PY_INC -shared "$kit/src/bench/torch_null_backend.cpp" \
  -o "$root/pybuild/_null_backend$EXT" $libs >"$root/pybuild/obj/null.log" 2>&1 &
pids+=($!)
built=0
for p in "${pids[@]}"; do wait "$p" || built=1; done
cat "$root"/pybuild/obj/*.log >>"$out/python_build.log"
[ $built = 0 ] || { echo "gpu_python: compiling failed (python_build.log)"; grep -m 20 "error" "$out/python_build.log"; exit 1; }
# The libraries in the order of the build's own link line; CAF, Cap'n Proto and OpenSSL from the bundle.
chorus_libs="actors core gradsync runtime actors observability mesh messages transport engine cuda strategies core"
link=""
for l in $chorus_libs; do [ -e "$kit/lib/libchorus_$l.a" ] && link="$link $kit/lib/libchorus_$l.a"; done
sys_libs="$(ls "$root"/lib/libcaf_openssl.so* "$root"/lib/libcaf_io.so* "$root"/lib/libcaf_core.so* "$root"/lib/libcapnp-*.so "$root"/lib/libkj-*.so "$root"/lib/libssl.so* "$root"/lib/libcrypto.so* 2>/dev/null | tr '\n' ' ')"
timeout -k 5 "$step_s" ${CXX:-g++} -shared -o "$pkg/_chorus$EXT" "${objs[@]}" -Wl,--exclude-libs,ALL -Wl,--undefined=chorus_cuda_layer $link \
  $sys_libs $cuda_libs $libs -Wl,-rpath,"$root/lib" >>"$out/python_build.log" 2>&1 ||
  { echo "gpu_python: linking failed (python_build.log)"; tail -20 "$out/python_build.log"; exit 1; }
echo "gpu_python: built $pkg/_chorus$EXT against torch $TORCH_VERSION" | tee -a "$out/python_build.log"
# A symbol left unresolved by the link shows at the import: say so once, not in every suite.
LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONPATH="$root/pybuild" "$py" -c \
  "import chorus; print('import chorus: ok; built for torch', chorus._chorus.torch_version, '; CUDA tensors:', chorus._chorus.cuda)" \
  2>&1 | tail -3 | tee -a "$out/python_build.log" | grep -q "import chorus: ok" || { tail -3 "$out/python_build.log"; exit 1; }

# The suites, as ctest runs them (tests/CMakeLists.txt), at once: they are processes on a many-core machine.
export PYTHONPATH="$root/pybuild:$kit/src/tests/python${PYTHONPATH:+:$PYTHONPATH}" CHORUS_SOCKET_SPIN_US=0
export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PATH="$root/bin:$PATH"
t=$kit/src/tests/python
launch="$py $t/launch_ranks.py --pythonpath $root/pybuild"
declare -A suites=(
  [import_only]="$py $t/test_import_only.py"
  [collectives_2]="$launch -n 2 $t/test_collectives.py"
  [collectives_4]="$launch -n 4 --limit $((step_s > 10 ? step_s - 5 : step_s)) $t/test_collectives.py"
  [ddp]="$launch -n 3 $t/test_ddp.py"
  [torch_api]="$launch -n 3 $t/test_torch_api.py"
  [shape_mismatch]="$launch -n 3 $t/test_errors.py mismatch"
  [killed_rank]="$launch -n 3 --expect 2=-9 $t/test_errors.py killed"
  [cuda_2]="$launch -n 2 $t/test_cuda.py"
  [cuda_4]="$launch -n 4 $t/test_cuda.py"
  [example_bagua]="$launch -n 2 $kit/src/examples/python/bagua_style.py"
  [example_ddp]="chorus-run -n 2 $py $kit/src/examples/python/ddp_train.py"
  [torch_overhead]="$py $kit/src/bench/torch_overhead.py --iters 2000 --reps 3"
  [elastic]="$py $t/elastic_job.py --chorus-run $root/bin/chorus-run"
  [example_elastic]="chorus-run -n 3 --elastic $py $kit/src/examples/python/elastic_train.py --steps 60 --kill-rank 1 --kill-step 20"
)
if [ $# -gt 2 ]; then  # only the suites named
  declare -A chosen=()
  for name in "${@:3}"; do
    [ -n "${suites[$name]:-}" ] || { echo "gpu_python: no suite $name (${!suites[*]})"; exit 2; }
    chosen[$name]=${suites[$name]}
  done
  unset suites
  declare -A suites=()
  for name in "${!chosen[@]}"; do suites[$name]=${chosen[$name]}; done
fi
declare -A spid
for name in "${!suites[@]}"; do
  (cd "$root/pybuild" && timeout -k 5 "$step_s" ${suites[$name]} >"$out/python_$name.log" 2>&1) &
  spid[$name]=$!
done
status=0
for name in $(printf '%s\n' "${!suites[@]}" | sort); do
  if wait "${spid[$name]}"; then r="ok"; else r="FAILED (exit $?)"; status=1; fi
  # With a GPU present, the CUDA suite must run, not skip.
  if [[ $name == cuda_* ]] && [ "${gpus:-0}" -ge 1 ] && grep -q "SKIPPED" "$out/python_$name.log"; then
    r="FAILED (skipped although nvidia-smi lists $gpus GPU(s))"; status=1
  fi
  echo "python $name: $r; $(grep -hE 'match|SKIPPED|chorus over|step|Error' "$out/python_$name.log" | tail -2 | tr '\n' ' ')"
done
exit $status
