#!/usr/bin/env bash
# Install, build, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cd build && ctest --output-on-failure -j"$(nproc)" --timeout 900
