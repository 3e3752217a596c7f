#!/usr/bin/env bash
# Builds the test executables whose threads are Troupe's own (the transport,
# its progress and driving threads, the shared-memory rings and staging, the
# ring collectives, the CPU kernels' pools, the training pieces below the
# actors, the runtime) with ThreadSanitizer into build-tsan/ and runs them;
# fails on any report. Not run by CI (it adds minutes to a clean build).
#
# Left out: the actors' tests and everything above them. Their messages pass
# through CAF's mailboxes, which the system's libcaf (built without
# ThreadSanitizer) synchronizes out of its sight, so every message would be
# reported as a race. ThreadSanitizer needs address-space randomization off
# (setarch -R; it crashes at start under this kernel's 28 bits), and UCX's
# memory hooks off (libucm's madvise hook re-enters the sanitizer as a
# thread exits).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(common_test backends_test ops_test training_test runtime_test)
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_C_FLAGS=-fsanitize=thread -DCMAKE_CXX_FLAGS=-fsanitize=thread \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DTROUPE_CUDA=OFF >/dev/null
cmake --build build-tsan -j"$(nproc)" --target "${targets[@]}"
export UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
status=0
for exe in build-tsan/common/common_test build-tsan/backends/backends_test build-tsan/ops/ops_test \
  build-tsan/training/training_test build-tsan/runtime/runtime_test; do
  echo "== $exe"
  setarch -R "$exe" || { echo "tsan: $exe failed (exit $?)" >&2; status=1; }
done
exit $status
