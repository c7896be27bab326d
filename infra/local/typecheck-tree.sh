#!/usr/bin/env bash
# mypy must see the code the way it is imported (sealtrace.proxy, ...), but the top-level
# folders are named proxy/, sandbox/, ...: build a tree of symlinks that maps one onto the other.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tree="$root/build/typecheck/sealtrace"
mkdir -p "$tree"
for pkg in proxy sandbox agent server; do ln -sfn "../../../$pkg" "$tree/$pkg"; done
ln -sfn ../../../native/_engine.pyi "$tree/_engine.pyi"
