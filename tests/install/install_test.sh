#!/usr/bin/env bash
# Installs Loom into a scratch prefix, checks that the public headers include no implementation
# library, and builds and runs a project that uses find_package(loom).
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
if grep -rlE '#include *[<"](asio|spdlog|fmt|hwy)' "$tmp/prefix/include/loom"; then
  echo "FAIL: a public header includes an implementation library"; exit 1
fi
cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/consumer"
"$tmp/consumer/consumer_static"
echo "install: find_package(loom) works"
