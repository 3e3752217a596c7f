#!/usr/bin/env bash
# Fails if a Catch2 test name contains ';' or '[' (they break CTest's list of
# discovered tests: the broken entries match nothing and pass without running).
set -euo pipefail
cd "$(dirname "$0")/.."
bad=$(grep -rn --include='*.test.cpp' 'TEST_CASE("[^"]*[;[]' . --exclude-dir=build --exclude-dir=build-asan || true)
if [ -n "$bad" ]; then
  echo "test names with ';' or '[':"
  echo "$bad"
  exit 1
fi
