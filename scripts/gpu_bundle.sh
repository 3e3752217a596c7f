#!/usr/bin/env bash
# Here (no GPU needed): builds, then packs what scripts/gpu_check.sh runs on
# the GPU machine into .gpu/bundle.tar.xz (ignored by git; carry it with the
# device call): troupe, troupe-bench and the CUDA module, the CUDA test executables, the
# non-system libraries they load, UCX's modules, redis-server and a byte-level
# corpus. CUDA's own libraries (cudart, cuBLASLt, NCCL) are on the GPU machine
# and stay behind. Fails if the archive passes 40 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
[ -f build/tools/troupe/libtroupe_cuda.so ] || { echo "gpu_bundle: no CUDA module (nvcc missing at build time?)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/ucx" "$stage/data"
exes=(build/tools/troupe/troupe build/tools/troupe/troupe-bench build/tools/troupe/libtroupe_cuda.so
  build/ops/cuda/cuda_test build/tests/gpu_jobs_test
  "$(command -v redis-server)")
cp "${exes[@]}" "$stage/bin/"

# Every library they load that the GPU machine (Ubuntu 24.04) lacks: not the
# C library's, the compiler's runtime, CUDA's, nor the base system's
# compression, crypto and systemd libraries (newer there, same names; a copy
# of ours first on its library path could shadow them for other programs).
skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libdl\.so|/librt\.so|/libpthread\.so|/libstdc\+\+|/libgcc_s|libcuda|libcudart|libcublas|libnccl'
skip+='|/libssl\.|/libcrypto\.|/libz\.|/libzstd\.|/liblzma\.|/liblz4\.|/libsystemd\.|/libgcrypt\.|/libgpg-error\.|/libcap\.'
for f in "${exes[@]}" /usr/lib/x86_64-linux-gnu/ucx/*.so.*; do
  ldd "$f" | awk '/=> \// {print $3}'
done | grep -vE "$skip" | sort -u | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
# UCX's transport modules, under the names UCX looks for.
for m in /usr/lib/x86_64-linux-gnu/ucx/*.so.*; do
  base=$(basename "$m"); cp -L "$m" "$stage/ucx/${base%%.so.*}.so"
done

# A byte-level corpus for the training runs (Debian's fortunes, as the demo).
corpus="$stage/corpus.txt"
./scripts/demo_corpus.sh "$corpus"
build/tools/troupe/troupe prepare --input "$corpus" --output "$stage/data" >/dev/null
rm "$corpus"

mkdir -p .gpu
tar -C "$stage" -cJf .gpu/bundle.tar.xz .
bytes=$(stat -c %s .gpu/bundle.tar.xz)
echo "gpu_bundle: .gpu/bundle.tar.xz, $((bytes / 1024 / 1024)) MiB"
[ "$bytes" -le $((40 * 1024 * 1024)) ] || { echo "gpu_bundle: larger than 40 MiB" >&2; exit 1; }
