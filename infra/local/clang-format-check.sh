#!/usr/bin/env bash
# Check that every C and C++ file under native/ is formatted as .clang-format says.
# clang-format comes from bootstrap.sh (Debian's 14). Fix with:
#   clang-format -i $(git ls-files 'native/*.c' 'native/*.h' 'native/*.cpp' 'native/*.hpp')
set -euo pipefail

cd "$(dirname "$0")/../.."
command -v clang-format >/dev/null || infra/local/bootstrap.sh

files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(
  find native \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' \) -print0 | sort -z
)
clang-format --dry-run --Werror "${files[@]}"
echo "clang-format-check: ${#files[@]} files formatted"
