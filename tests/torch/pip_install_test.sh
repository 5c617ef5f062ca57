#!/usr/bin/env bash
# As a user installs it: a fresh venv, PyTorch 2.15 from PyPI (pip's cache keeps the wheels),
# `pip install .` of this tree, then PyTorch's DDP tutorial and an FSDP2 script under
# `torchrun --standalone --nproc-per-node 2` with backend loom end with gloo's parameters
# (the tutorial imports nothing of Loom's: the wheel's entry point registers the backend), and
# loomrun is on the venv's PATH. Slow (about 15 minutes on 2 cores: most of it building libloom).
#   tests/torch/pip_install_test.sh [VENV_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../tools/lib.sh"
root=$(cd "$here/../.." && pwd)
venv=${1:-$dir/venv}
work=$dir

/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "torch==2.15.*" numpy
"$venv/bin/pip" install -q --disable-pip-version-check "$root"
[ -x "$venv/bin/loomrun" ] || fail "pip install did not put loomrun on the venv's PATH"

cd "$work"  # nothing of the tree on sys.path: the installed package alone
torchrun=("$venv/bin/python" -m torch.distributed.run --standalone --nproc-per-node 2)
for backend in gloo loom; do
  "${torchrun[@]}" "$here/tutorial_ddp.py" "$backend" "ddp-$backend.pt" >"ddp-$backend.log" 2>&1 ||
    { cat "ddp-$backend.log"; fail "the DDP tutorial with backend $backend failed"; }
  "${torchrun[@]}" "$here/fsdp_train.py" --backend "$backend" --out "fsdp-$backend.pt" \
    >"fsdp-$backend.log" 2>&1 || { cat "fsdp-$backend.log"; fail "FSDP2 with backend $backend failed"; }
done
"$venv/bin/python" - <<'EOF' || fail "loom's parameters differ from gloo's"
import torch
for name, tolerance in (("ddp", 1e-6), ("fsdp", 1e-9)):
    gloo, loom = torch.load(f"{name}-gloo.pt"), torch.load(f"{name}-loom.pt")
    for key in gloo:
        difference = float((gloo[key].double() - loom[key].double()).abs().max())
        assert difference <= tolerance * max(1.0, float(gloo[key].abs().max())), (name, key, difference)
    print(f"{name}: loom's parameters are gloo's")
EOF
echo "pip install: PASS"
