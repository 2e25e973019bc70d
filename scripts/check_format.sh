#!/usr/bin/env bash
# Formatting gate (part of the test command): every tracked C++/CUDA source must already be
# clang-formatted with the repository's .clang-format. Prints the offending files and fails.
# `scripts/check_format.sh --fix` formats them in place instead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v clang-format >/dev/null || { echo "[format] error: clang-format not found (scripts/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "[format] error: ${#bad[@]} file(s) not clang-formatted (run scripts/check_format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "[format] ${#files[@]} C++/CUDA files formatted"
