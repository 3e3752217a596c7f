#!/usr/bin/env bash
# Install, build, and run the whole test suite: the plain build, then the
# same tests under AddressSanitizer and UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 900)
./scripts/sanitize.sh
