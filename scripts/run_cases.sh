#!/usr/bin/env bash
# run_cases.sh EXE [SPEC...]: every test case of a Catch2 executable (those
# SPEC selects) in a process of its own, as CTest runs them: a test that
# cannot run here ends its process with 77 (Skipped), which would cut the
# rest short in one process. Prints each case's output and outcome, then a
# tally; exits 1 if any case failed or none matched, 77 if every case was
# skipped, else 0.
set -uo pipefail
exe=$1; shift
passed=0 skipped=0 failed=0
while IFS= read -r name; do
  [ -n "$name" ] || continue
  spec=${name//\\/\\\\}; spec=${spec//,/\\,}; spec=${spec//[/\\[}   # Catch2's test-spec escapes
  "$exe" --durations yes "$spec"
  rc=$?
  case $rc in
    0) passed=$((passed + 1)) ;;
    77) skipped=$((skipped + 1)); echo "(skipped) $name" ;;
    *) failed=$((failed + 1)); echo "FAILED (exit $rc): $name" ;;
  esac
done < <("$exe" --list-test-names-only "$@")
echo "run_cases: $(basename "$exe"): $passed passed, $skipped skipped, $failed failed"
if [ $((passed + skipped + failed)) -eq 0 ]; then
  echo "run_cases: $(basename "$exe"): no test case matches ${*:-(all)}" >&2
  exit 1
fi
[ "$failed" -eq 0 ] || exit 1
[ "$passed" -gt 0 ] || [ "$skipped" -eq 0 ] || exit 77
exit 0
