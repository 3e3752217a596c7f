#!/usr/bin/env bash
# Fails if a Catch2 test name contains ';' or '[' (they break CTest's list of
# discovered tests: the broken entries match nothing and pass without running),
# or has its first ": " at column 77 or later (Catch2's console reporter
# indents a long name's next lines past it, and past its 79-column width it
# aborts on the test's first failure, losing the failure's report).
set -euo pipefail
cd "$(dirname "$0")/.."
bad=$(grep -rn --include='*.test.cpp' 'TEST_CASE("[^"]*[;[]' . --exclude-dir=build --exclude-dir=build-asan || true)
if [ -n "$bad" ]; then
  echo "test names with ';' or '[':"
  echo "$bad"
  exit 1
fi
late=$(grep -rn --include='*.test.cpp' 'TEST_CASE("' . --exclude-dir=build --exclude-dir=build-asan |
  perl -ne 'print if /TEST_CASE\("([^"]*)"/ && index($1, ": ") >= 77' || true)
if [ -n "$late" ]; then
  echo "test names whose first ': ' is at column 77 or later:"
  echo "$late"
  exit 1
fi
