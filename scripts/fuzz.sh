#!/usr/bin/env bash
# Runs every libFuzzer target (fuzz/*_fuzz.cpp) for SECONDS each (default 60),
# built with clang, AddressSanitizer and UndefinedBehaviorSanitizer into
# build-fuzz/. New inputs go to build-fuzz/corpus/<target> (the committed seeds
# in fuzz/corpus/<target> are read, never written); crashes, leaks and
# timeouts are written to build-fuzz/artifacts/ and make the script fail.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors token_file config endpoint rendezvous_reply)

need=()
command -v clang++-14 >/dev/null || need+=(clang-14)
dpkg-query -W -f='${Status}' libclang-rt-14-dev 2>/dev/null | grep -q "install ok installed" || need+=(libclang-rt-14-dev)
if [ ${#need[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -o DPkg::Lock::Timeout=300 --no-install-recommends "${need[@]}"
fi

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DTROUPE_FUZZ=ON -DTROUPE_TESTS=OFF -DTROUPE_CUDA=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target $(printf '%s_fuzz ' "${targets[@]}")

mkdir -p build-fuzz/artifacts
status=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  echo "fuzz: $t for ${seconds} s" >&2
  if ! ./build-fuzz/fuzz/"${t}"_fuzz "build-fuzz/corpus/$t" "fuzz/corpus/$t" -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/${t}-" \
      2> "build-fuzz/${t}.log"; then
    echo "fuzz: $t FAILED (see build-fuzz/${t}.log and build-fuzz/artifacts/)" >&2
    status=1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "build-fuzz/${t}.log" | sed "s/^/fuzz: $t: /" >&2 || true
done
exit $status
