#!/usr/bin/env bash
# Writes the tables of every CHORUS_* variable into README.md and docs/settings.md, from the one
# table in core/settings_table.cpp (through chorus-ctl settings --markdown). Each table sits
# between "<!-- settings:WHICH -->" and "<!-- /settings:WHICH -->"; settings_test fails when they
# differ from the table, and says to run this.
#
# usage: scripts/settings_doc.sh [BUILD_DIR]   (default build; chorus-ctl must be built)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ctl=${1:-$root/build}/bin/chorus-ctl
[ -x "$ctl" ] || { echo "settings_doc.sh: $ctl is not built" >&2; exit 1; }

fill() {  # fill FILE WHICH: the block's lines become chorus-ctl's table
  local file=$1 which=$2 table
  table=$("$ctl" settings --markdown "$which")
  grep -q "^<!-- settings:$which -->$" "$file" || { echo "settings_doc.sh: no <!-- settings:$which --> in $file" >&2; exit 1; }
  TABLE=$table awk -v which="$which" '
    $0 == "<!-- settings:" which " -->" { print; print ENVIRON["TABLE"]; skip = 1; next }
    $0 == "<!-- /settings:" which " -->" { skip = 0 }
    !skip { print }' "$file" > "$file.tmp"
  mv "$file.tmp" "$file"
}

fill "$root/README.md" readme
for which in library from_env programs tests; do fill "$root/docs/settings.md" "$which"; done
echo "settings_doc.sh: README.md and docs/settings.md are the table's"
