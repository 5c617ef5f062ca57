#!/usr/bin/env bash
# Installs the Debian packages Loom's build, tests and comparisons need. Idempotent: quiet when
# everything is already installed. Run as root (or with sudo available).
#   tools/deps.sh            build + tests + comparison baselines (Gloo, OpenMPI, iperf3)
#   tools/deps.sh --torch    also PyTorch: Debian's 1.13 (python3-torch, libtorch-dev) and
#                            PyPI's 2.15 in a venv (LOOM_TORCH_VENV, default
#                            ~/.cache/loom/torch2-venv; pip keeps the wheels in its cache, so a
#                            second venv on one machine downloads nothing): the loom_torch backend
#                            is built and tested for both
set -euo pipefail

# The venv of PyTorch 2.x, and the release its tests are judged on.
torch_venv=${LOOM_TORCH_VENV:-$HOME/.cache/loom/torch2-venv}
torch2_release="torch==2.15.*"

packages=(cmake ninja-build g++ clang-format pkg-config
          libasio-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libhwy-dev
          libibverbs-dev librdmacm-dev libgloo-dev libopenmpi-dev openmpi-bin iperf3 python3 iproute2
          libopenblas-dev zlib1g-dev libssl-dev clang libclang-rt-14-dev libcli11-dev
          slurmctld slurmd slurm-client munge)
[[ " $* " == *" --torch "* ]] && packages+=(python3-torch libtorch-dev python3-dev pybind11-dev libopenblas0-pthread
                                          python3-pip python3-venv)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# PyTorch's own test suite (tests/torch/distributed_suite.py) imports expecttest, which Debian
# does not package: it comes from PyPI, for the system Python that python3-torch belongs to.
if [[ " $* " == *" --torch "* ]] && ! /usr/bin/python3 -c "import expecttest" 2>/dev/null; then
  echo "deps: installing expecttest (PyPI) for /usr/bin/python3"
  # Into the system Python's own site (/usr/local), whatever pip settings the environment has.
  "${sudo_cmd[@]}" env -u PIP_TARGET -u PIP_PREFIX -u PIP_USER -u PIP_REQUIRE_VIRTUALENV \
    /usr/bin/python3 -m pip install -q --root-user-action=ignore --break-system-packages \
    --no-user "expecttest==0.3.0" ||
    echo "deps: could not install expecttest; the torch suite uses its stand-in"
  /usr/bin/python3 -c "import expecttest" 2>/dev/null ||
    echo "deps: expecttest does not import for /usr/bin/python3; the torch suite uses its stand-in"
fi

# PyTorch 2.x from PyPI, as its users install it, in a venv of the system Python (the same Python
# as Debian's PyTorch, so one libloom serves both), with PyTorch's test helpers.
if [[ " $* " == *" --torch "* ]] && ! "$torch_venv/bin/python" -c "import torch, expecttest" 2>/dev/null; then
  echo "deps: installing PyTorch 2.x from PyPI into $torch_venv (about 5 GB; cached by pip)"
  mkdir -p "$(dirname "$torch_venv")"
  /usr/bin/python3 -m venv "$torch_venv"
  env -u PIP_TARGET -u PIP_PREFIX -u PIP_USER -u PIP_REQUIRE_VIRTUALENV \
    "$torch_venv/bin/pip" install -q --disable-pip-version-check "$torch2_release" numpy \
    "expecttest==0.3.0" || echo "deps: could not install PyTorch 2.x: its loom_torch tests are left out"
fi
