#!/usr/bin/env bash
# Installs the Debian packages Troupe needs (only those missing) and builds it
# into build/. Safe to run again: apt-get is skipped when nothing is missing and
# the build is incremental (ccache across clean builds).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libcaf-dev libucx-dev ucx-utils libhiredis-dev redis-server libspdlog-dev catch2
  libopenblas-dev libopenblas0-pthread libtomlplusplus-dev libcli11-dev nlohmann-json3-dev zlib1g-dev libssl-dev
  fortunes python3 python3-torch python3-numpy
  libjs-dygraphs chromium fonts-liberation
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -o DPkg::Lock::Timeout=300
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -o DPkg::Lock::Timeout=300 \
    --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
