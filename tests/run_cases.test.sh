#!/usr/bin/env bash
# scripts/run_cases.sh (the GPU check's test runner) on a fixture of one
# passing, one skipped and one failing case: each case in its own process,
# so a skip cuts nothing short; exit 0 when some passed and none failed, 77
# when all were skipped, 1 when one failed or none matched.
set -uo pipefail
runner=$1 fixture=$2
status=0
expect() {  # expect WANTED_EXIT PATTERN SPEC...
  local want=$1 pattern=$2; shift 2
  local out rc
  out=$("$runner" "$fixture" "$@" 2>&1); rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "run_cases $*: exit $rc (want $want), output without \"$pattern\":"; echo "$out"; status=1
  fi
}
expect 0 "1 passed, 1 skipped, 0 failed" "[ok]"
expect 77 "0 passed, 1 skipped, 0 failed" "[skip]"
expect 1 "FAILED (exit 1): a case that fails" "[all]"
expect 1 "1 passed, 1 skipped, 1 failed" "[all]"
expect 1 "no test case matches" "[nothing]"
exit $status
