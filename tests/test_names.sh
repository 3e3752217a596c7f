#!/usr/bin/env bash
# Fails if a Catch2 test name contains ';' or '[' (they break CTest's list of
# discovered tests: the broken entries match nothing and pass without running),
# or has its first ": " at column 77 or later (Catch2's console reporter
# indents a long name's next lines past it, and past its 79-column width it
# aborts on the test's first failure, losing the failure's report). A name
# written as adjacent string literals (over several lines) is checked whole.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
while IFS= read -r -d '' file; do
  perl -0777 -ne '
    while (/TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)/g) {
      my $lits = $1;
      my $name = join "", ($lits =~ /"((?:[^"\\]|\\.)*)"/g);
      if ($name =~ /[;\[]/) { print "$ARGV: a test name with a \x27;\x27 or \x27[\x27: $name\n"; $bad = 1 }
      elsif (index($name, ": ") >= 77) { print "$ARGV: a test name whose first \x27: \x27 is at column 77 or later: $name\n"; $bad = 1 }
    }
    END { exit($bad ? 1 : 0) }' "$file" || status=1
done < <(find . -name '*.test.cpp' -not -path './build*' -print0)
exit $status
