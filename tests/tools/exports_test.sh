#!/usr/bin/env bash
# libloom exports the public API only: every defined dynamic symbol is a name of include/loom/
# (loom::, loom::trace::), its typeinfo or vtable; nothing of the layers inside, no Impl.
set -euo pipefail
lib=$1
source "$(dirname "$0")/lib.sh"
symbols=$(nm -D --defined-only -C "$lib" | cut -d' ' -f3-)
[ -n "$symbols" ] || fail "no symbols read from $lib"
# The symbol's own name: what precedes its parameter list.
names=$(sed -E 's/^(typeinfo name for|typeinfo for|vtable for|VTT for) //; s/\(.*$//' <<<"$symbols")
bad=$(grep -vE '^loom::' <<<"$names" || true)
bad+=$(grep -E '^loom::(base|store|core|algorithms|kernels|transport|gpu|device|detail)::|::Impl::|::State::' <<<"$names" || true)
[ -z "$bad" ] || fail "libloom exports names outside the public API:
$(sort -u <<<"$bad" | head -40)"
echo "libloom exports $(wc -l <<<"$symbols") symbols, all of the public API"
