#!/usr/bin/env bash
# Runs every shell block of the README's Quickstart section, line by line, as written, from the
# repository's root; `build/bin/` and `build/python` mean those of the build under test (a
# Python line is skipped where that build has no Python package: the sanitizer builds). A line that fails
# fails the test, naming the line. Open MPI's refusals that have nothing to do with chorus are
# lifted through its own variables (running as root in CI containers; more processes than cores).
# usage: readme_quickstart_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
src=${1:?usage: readme_quickstart_test.sh SOURCE_DIR BIN_DIR}
bin=${2:?usage: readme_quickstart_test.sh SOURCE_DIR BIN_DIR}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cd "$src"
lines=$(awk '/^## /{inq = ($0 == "## Quickstart")} inq && /^```sh$/{inb=1; next} inb && /^```$/{inb=0} inq && inb' README.md)
[ -n "$lines" ] || { echo "no shell block in the README's Quickstart"; exit 1; }
ran=0
while IFS= read -r line; do
  [ -z "$line" ] && continue
  if [[ $line == mpirun* ]] && ! command -v mpirun >/dev/null; then
    echo "SKIPPED (mpirun is not installed): $line"
    continue
  fi
  if [[ $line == *build/python* ]] && [ ! -d "$bin/../python/chorus" ]; then
    echo "SKIPPED (this build has no Python package): $line"
    continue
  fi
  cmd=${line//build\/bin\//$bin/}
  cmd=${cmd//build\/python/$bin/../python}
  echo "+ $cmd"
  if ! timeout 120 bash -c "$cmd" </dev/null; then  # (mpirun would read the lines still to come)
    echo "README Quickstart line failed: $line"
    exit 1
  fi
  ran=$((ran + 1))
done <<<"$lines"
echo "ran $ran lines of the README's Quickstart"
