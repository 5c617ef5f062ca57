#!/usr/bin/env bash
# clang-format every C++ file of the project (--check: fail on any difference instead).
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files --cached --others --exclude-standard '*.cpp' '*.hpp' '*.cu' '*.cuh')
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run --Werror $files
  echo "format: clean"
else
  clang-format -i $files
fi
