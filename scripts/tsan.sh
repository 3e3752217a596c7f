#!/usr/bin/env bash
# Builds the project with ThreadSanitizer into build-tsan/ and runs tests
# there; fails on any report. Not run by CI (a third sanitizer build would
# push its time past the budget).
#
# By default it runs the test executables whose threads are Troupe's own:
# the transport (progress and driving threads), the shared-memory rings and
# staging, the ring collectives, the CPU kernels, the training pieces below
# the actors, the runtime. Everything above passes messages through CAF's
# mailboxes, which the system's libcaf (built without ThreadSanitizer)
# synchronizes out of the sanitizer's sight: every message would be
# reported as a race.
#
# CAF_TSAN_LIB=DIR runs every test instead (those sanitize.sh leaves out
# aside, and the fuzz targets' replays), with DIR's libcaf_core.so.0.17.6 and
# libcaf_io.so.0.17.6 in place of the system's: CAF 0.17.6 built with
# -fsanitize=thread, from Debian's source of the installed package
# (`apt-get source actor-framework` with a deb-src line; add `#include
# <limits>` to libcaf_io/caf/io/network/receive_buffer.hpp, which Debian's
# patch does; configure with -DCMAKE_CXX_FLAGS=-fsanitize=thread
# -DCAF_NO_EXAMPLES=yes -DCAF_NO_UNIT_TESTS=yes -DCAF_NO_OPENSSL=yes
# -DCAF_NO_TOOLS=yes -DCAF_NO_PYTHON=yes and build its libcaf_core and
# libcaf_io shared libraries). The headers stay the system's: the same
# version and build options, so the same ABI.
#
# ThreadSanitizer needs address-space randomization off (setarch -R; it
# crashes at start under this kernel's 28 bits; child processes inherit it)
# and UCX's memory hooks off (libucm's madvise hook re-enters the sanitizer
# as a thread exits).
set -euo pipefail
cd "$(dirname "$0")/.."
for lib in ${CAF_TSAN_LIB:+libcaf_core.so.0.17.6 libcaf_io.so.0.17.6}; do
  [ -f "$CAF_TSAN_LIB/$lib" ] || { echo "tsan: CAF_TSAN_LIB=$CAF_TSAN_LIB has no $lib" >&2; exit 2; }
done
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_C_FLAGS=-fsanitize=thread -DCMAKE_CXX_FLAGS=-fsanitize=thread \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DTROUPE_CUDA=OFF >/dev/null
export UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"

if [ -n "${CAF_TSAN_LIB:-}" ]; then
  cmake --build build-tsan -j"$(nproc)"
  export LD_LIBRARY_PATH="$CAF_TSAN_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  . scripts/sanitizer_skips.sh
  cd build-tsan
  exec setarch -R ctest --output-on-failure -j"$(nproc)" --timeout 900 -E "$sanitizer_skips|fuzz"
fi

targets=(common_test backends_test ops_test training_test runtime_test)
cmake --build build-tsan -j"$(nproc)" --target "${targets[@]}"
status=0
for exe in build-tsan/common/common_test build-tsan/backends/backends_test build-tsan/ops/ops_test \
  build-tsan/training/training_test build-tsan/runtime/runtime_test; do
  echo "== $exe"
  setarch -R "$exe" || { echo "tsan: $exe failed (exit $?)" >&2; status=1; }
done
exit $status
