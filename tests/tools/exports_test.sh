#!/usr/bin/env bash
# libloom exports the public API only: every defined dynamic symbol is a name of include/loom/
# (loom::, loom::trace::), its typeinfo or vtable; nothing of the layers inside, no Impl.
set -euo pipefail
lib=$1
symbols=$(nm -D --defined-only -C "$lib" | cut -d' ' -f3-)
[ -n "$symbols" ] || { echo "no symbols read from $lib"; exit 1; }
# The symbol's own name: what precedes its parameter list.
names=$(sed -E 's/^(typeinfo name for|typeinfo for|vtable for|VTT for) //; s/\(.*$//' <<<"$symbols")
bad=$(grep -vE '^loom::' <<<"$names" || true)
bad+=$(grep -E '^loom::(base|store|core|algorithms|kernels|transport|gpu|device|detail)::|::Impl::|::State::' <<<"$names" || true)
if [ -n "$bad" ]; then
  echo "libloom exports names outside the public API:"
  sort -u <<<"$bad" | head -40
  exit 1
fi
echo "libloom exports $(wc -l <<<"$symbols") symbols, all of the public API"
