#!/usr/bin/env bash
# Builds the project with AddressSanitizer and UndefinedBehaviorSanitizer into
# build-asan/ and runs the unit and integration tests there. Any sanitizer
# report fails the test that triggered it (UBSan halts on the first error).
# Left to the plain build: the learning benchmark (minutes of training, no
# new code paths), the 40 launches in a row of N-5 (one code path,
# repeated), the 300-step straggler statistics (the fault-free run and the
# CPU hog: timing, whose code paths the short drills cover), the transport
# benchmark, the layering check (a script over the sources, no code of ours
# runs), the report's Chromium loads and the reports of a drilled and a
# failed run rendered there (the browser's code, not ours; the report's
# writer has its unit tests here, and the runs' paths the recovery tests), and
# the installed package's test (a user's code built against it is compiled
# without the sanitizers, which a sanitized libtroupe.so cannot link with). Leak checking is off here: libFuzzer (scripts/fuzz.sh) checks
# the parsers for leaks, and the third-party libraries' process-lifetime
# allocations (UCX, OpenBLAS, CAF) would otherwise add report lines to every
# one-line-error test.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DTROUPE_SANITIZE=ON -DTROUPE_CUDA=OFF >/dev/null
cmake --build build-asan -j"$(nproc)"
cd build-asan
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
. ../scripts/sanitizer_skips.sh
# Tests that repeat one scenario over variants run some of them here, drawn
# each run (all_or_drawn in tests/test_support.hpp).
ctest --output-on-failure -j"$(nproc)" --timeout 900 -E "$sanitizer_skips"
