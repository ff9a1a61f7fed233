#!/usr/bin/env bash
# gen-docs.sh — rewrites the generated block of docs/configuration.md (between the
# "keys:begin" and "keys:end" markers) from `ctrain train --help-markdown`, the key table
# in src/config/config_keys.h. Usage: scripts/gen-docs.sh [path/to/ctrain]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ctrain=${1:-$root/build/ctrain}
doc=$root/docs/configuration.md
tmp=$(mktemp)
"$ctrain" train --help-markdown >"$tmp.keys"
awk -v keys="$tmp.keys" '
    /<!-- keys:begin -->/ { print; while ((getline line < keys) > 0) print line; skip = 1; next }
    /<!-- keys:end -->/ { skip = 0 }
    !skip { print }
' "$doc" >"$tmp"
mv "$tmp" "$doc"
rm -f "$tmp.keys"
echo "updated $doc"
