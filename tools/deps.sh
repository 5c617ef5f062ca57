#!/usr/bin/env bash
# Installs the Debian packages Loom's build, tests and comparisons need. Idempotent: quiet when
# everything is already installed. Run as root (or with sudo available).
#   tools/deps.sh            build + tests + comparison baselines (Gloo, OpenMPI, iperf3)
#   tools/deps.sh --torch    also PyTorch (python3-torch, libtorch-dev): the loom_torch backend,
#                            its `torch` tests and the torch.distributed comparisons
set -euo pipefail

packages=(cmake ninja-build g++ clang-format pkg-config
          libasio-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libhwy-dev
          libibverbs-dev librdmacm-dev libgloo-dev libopenmpi-dev openmpi-bin iperf3 python3 iproute2
          libopenblas-dev zlib1g-dev libssl-dev clang libclang-rt-14-dev
          slurmctld slurmd slurm-client munge)
[[ " $* " == *" --torch "* ]] && packages+=(python3-torch libtorch-dev python3-dev pybind11-dev libopenblas0-pthread)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
