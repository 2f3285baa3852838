#!/usr/bin/env bash
# Installs what chorus needs from Debian's archive, then configures and builds it into build/.
# Safe to run again: packages already present are skipped, the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

# libssl-dev: TLS on the data connections. openssl and iproute2: the multi-node tests make TLS
# certificates and network namespaces, and inject faults (ss -K). nftables: the fault harness stalls a
# data connection with a rule of its own (tests/fault_injection_test.cpp; skipped without).
# gnuplot-nox: scripts/plot_bench.sh draws the benchmark plots with it (no X needed).
# openmpi-bin: the README's quickstart and tests/launch_env_test.cpp launch chorus with mpirun.
# python3-dev, python3-pybind11, python3-torch, libtorch-dev: the Python package (docs/python.md);
# the build leaves it out without them.
# lld: links the executables in well under half of GNU ld's time (the build uses it when present).
packages=(cmake make g++ lld pkg-config libcaf-dev libcaf-openssl0.17 capnproto libcapnp-dev libgtest-dev libssl-dev openssl iproute2 nftables
          gnuplot-nox openmpi-bin python3-dev python3-pybind11 python3-torch libtorch-dev)
# CHORUS_EXTRA_PACKAGES: more packages to install in the same apt run (CI: Slurm, clang for the
# fuzz targets, curl for the TSan CAF), which saves each its own archive update.
read -r -a extra <<<"${CHORUS_EXTRA_PACKAGES:-}"
packages+=("${extra[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# nvcc, when present, turns the CUDA layer on (CHORUS_WITH_CUDA); it is not required.
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"${JOBS:-2}"
echo "setup: built into build/ (binaries in build/bin/)"
