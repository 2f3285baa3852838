#!/usr/bin/env bash
# CAF built with TSan, for scripts/sanitize.sh tsan.
#
# Why: Debian's libcaf is built without TSan. Its mailbox, scheduler and reference counts
# synchronise in code TSan cannot see, so every message handed from one thread to another reads
# as a race (hundreds of reports per suite, all of them CAF's hand-off, none chorus's). No
# suppression file can tell those from a real race in a chorus handler: the handler's frames sit
# under CAF's in every stack. So the same CAF release as the installed libcaf-dev is fetched from
# Debian's archive (its upstream tarball, checked against the sha256 below) and built with
# -fsanitize=thread; the suites load it through LD_LIBRARY_PATH. The headers are the same as
# Debian's (Debian adds one #include, added here too), and so is the soname: chorus's TSan
# build links as usual and runs on the instrumented CAF. It is compiled at -O1 with line tables
# only (-g1): the builds are most of CI's time, and TSan's reports still name every frame's line.
#
# usage: scripts/sanitizers/caf_tsan.sh DIR      builds DIR/lib/libcaf_{core,io,openssl}.so.*
#        (does nothing when DIR/lib already holds them)
set -euo pipefail
dir=${1:?usage: scripts/sanitizers/caf_tsan.sh DIR}
version=0.17.6
sha256=e2bf5bd243f08bb7d8adde197cfe3e6d71314ed3378fe0692f8932f4c3b3928c
url="http://deb.debian.org/debian/pool/main/a/actor-framework/actor-framework_${version}.orig.tar.gz"

installed=$(dpkg-query -W -f='${Version}' libcaf-dev 2>/dev/null || true)
case "$installed" in
  "$version"-*) ;;
  *) echo "caf_tsan: libcaf-dev is '${installed:-not installed}', this script builds CAF $version" >&2; exit 2 ;;
esac
if [ -e "$dir/lib/libcaf_core.so.$version" ] && [ -e "$dir/lib/libcaf_io.so.$version" ] &&
   [ -e "$dir/lib/libcaf_openssl.so.$version" ]; then
  exit 0
fi
command -v curl >/dev/null || {
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends curl ca-certificates >/dev/null
}

mkdir -p "$dir"
src="$dir/actor-framework-$version"
tarball="$dir/caf-$version.orig.tar.gz"
if [ ! -d "$src" ]; then
  echo "caf_tsan: fetching CAF $version from Debian's archive"
  curl -fsS --retry 3 -m 300 -o "$tarball" "$url"
  echo "$sha256  $tarball" | sha256sum -c --quiet -
  tar -xzf "$tarball" -C "$dir"
  rm -f "$tarball"
  # Debian's one change to the release's headers (GCC 12 needs it to build libcaf_io).
  grep -q '<limits>' "$src/libcaf_io/caf/io/network/receive_buffer.hpp" ||
    sed -i 's|#include <cstring>|#include <cstring>\n#include <limits>|' "$src/libcaf_io/caf/io/network/receive_buffer.hpp"
fi
echo "caf_tsan: building CAF $version with TSan into $dir/lib (core, io, openssl)"
cmake -S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCAF_LOG_LEVEL=QUIET \
  -DCAF_NO_EXAMPLES=yes -DCAF_NO_TOOLS=yes -DCAF_NO_UNIT_TESTS=yes -DCAF_NO_PYTHON=yes \
  -DCAF_NO_OPENCL=yes -DCAF_NO_SUMMARY=yes -DCMAKE_CXX_FLAGS="-fsanitize=thread -w" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DLIBRARY_OUTPUT_PATH="$dir/lib" >/dev/null
cmake --build "$dir/build" -j"${JOBS:-2}" -- --no-print-directory >/dev/null
for lib in core io openssl; do
  [ -e "$dir/lib/libcaf_$lib.so.$version" ] || { echo "caf_tsan: no libcaf_$lib.so.$version was built" >&2; exit 1; }
done
