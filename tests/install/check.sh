#!/usr/bin/env bash
# The installed package, used from outside the tree: installs the build into WORK/prefix, then
# builds consumer/main.cpp (copied out of the tree) twice against it, with find_package(chorus)
# and with `pkg-config --cflags --libs chorus`, and runs both; also runs the installed daemon.
# Fails on the first thing that is missing or wrong.
#   usage: check.sh BUILD_DIR WORK_DIR CMAKE CXX
set -euo pipefail
build=$1 work=$2 cmake=$3 cxx=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"
for f in include/chorus/chorus.hpp bin/chorus-orchestrator bin/chorus-run lib/pkgconfig/chorus.pc \
         lib/cmake/chorus/chorusConfig.cmake lib/cmake/chorus/chorusConfigVersion.cmake \
         lib/cmake/chorus/FindCAF.cmake; do
  [ -e "$prefix/$f" ] || { echo "install: $f is missing" >&2; exit 1; }
done
for layer in core strategies messages transport cuda engine observability mesh actors runtime gradsync peer_actor; do
  [ -e "$prefix/lib/libchorus_$layer.a" ] || { echo "install: libchorus_$layer.a is missing" >&2; exit 1; }
done
# Only public headers: include/ holds chorus/ and nothing else.
if [ "$(ls "$prefix/include")" != "chorus" ]; then echo "install: include/ holds $(ls "$prefix/include")" >&2; exit 1; fi
help=$("$prefix/bin/chorus-orchestrator" --help)
grep -q -- "--nodes" <<<"$help" || { echo "install: chorus-orchestrator --help does not list --nodes" >&2; exit 1; }
# The Python package, where the build made it: installed with its subpackages, importable from
# outside the tree.
pkg=$(find "$prefix/lib" -path "*-packages/chorus/__init__.py" 2>/dev/null | head -1)
if [ -e "$build/python/chorus/__init__.py" ]; then
  [ -n "$pkg" ] || { echo "install: the Python package chorus is missing" >&2; exit 1; }
  py=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
  (cd "$work" && PYTHONPATH=$(dirname "$(dirname "$pkg")") "${py:-/usr/bin/python3}" -c \
    "import chorus.torch_api.algorithms.bytegrad, torch; assert hasattr(torch.nn.Module, 'with_bagua')") ||
    { echo "install: the installed chorus.torch_api does not import" >&2; exit 1; }
fi
# The installed launcher runs an installed-style program: a shell line, 2 processes.
out=$("$prefix/bin/chorus-run" -n 2 /bin/sh -c 'echo "rank $CHORUS_RANK of $CHORUS_WORLD_SIZE"' | sort)
[ "$out" = $'rank 0 of 2\nrank 1 of 2' ] || { echo "install: chorus-run printed: $out" >&2; exit 1; }

cp -r "$here/consumer" "$work/src"
echo "== find_package(chorus)"
"$cmake" -S "$work/src" -B "$work/cmake-build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
"$cmake" --build "$work/cmake-build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/cmake-build/chorus-consumer"

echo "== pkg-config chorus"
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs chorus)
"$cxx" -std=c++20 -O2 "$work/src/main.cpp" -o "$work/pc-consumer" $flags
"$work/pc-consumer"
