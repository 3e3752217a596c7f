#!/usr/bin/env bash
# The layering rule of docs/ARCHITECTURE.md (and its invariant index's ids,
# each used once): an include may point to the same
# layer or one below, never above; CAF only in actors/, tools/, examples/,
# tests/ and fuzz/; a concrete device (backends/cpu, backends/cuda) only in
# backends/ and its own kernels (ops/cpu, ops/cuda). Prints every violation
# and fails if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
rank() {
  case "$1" in
    common) echo 0 ;; schedules) echo 1 ;; backends) echo 2 ;; ops) echo 3 ;; runtime) echo 4 ;;
    training) echo 5 ;; actors) echo 6 ;; troupe|tools|examples) echo 7 ;; tests|fuzz) echo 8 ;; *) echo -1 ;;
  esac
}
status=0
while IFS= read -r line; do
  file=${line%%:*}
  target=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${line#*:}")
  from=${file%%/*}
  to=${target%%/*}
  rf=$(rank "$from")
  rt=$(rank "$to")
  [ "$rt" -ge 0 ] || continue
  if [ "$rt" -gt "$rf" ] || { [ "$from" = schedules ] && [ "$to" != schedules ] && [ "$to" != common ]; }; then
    echo "layering: $file includes $target (up from $from to $to)"
    status=1
  fi
done < <(grep -rn --include='*.hpp' --include='*.cpp' --include='*.cu' '^#include "' \
           common schedules backends ops runtime training actors troupe tools examples tests fuzz | sed -E 's/:[0-9]+:/:/')
if grep -rln --include='*.hpp' --include='*.cpp' '#include <caf/' common schedules backends ops runtime training; then
  echo "layering: CAF included below actors/ (files above)"
  status=1
fi
# The device seam: a concrete backend is named only inside it (the backend
# itself and its kernels; tests of those may name them too).
if grep -rn --include='*.hpp' --include='*.cpp' --include='*.cu' --include='*.cuh' -E '#include "backends/(cpu|cuda)/' \
     common schedules ops runtime training actors tools examples fuzz tests |
   grep -vE '^ops/(cpu|cuda)/|\.test\.cpp:'; then
  echo "layering: a concrete backend included outside backends/ and its kernels (lines above)"
  status=1
fi
# Invariant ids name one place each: the index's first column (ranges
# expanded) holds no id twice.
dup_ids=$(python3 - docs/ARCHITECTURE.md <<'PY'
import re, sys
ids, on = [], False
for line in open(sys.argv[1], encoding="utf-8"):
    if line.startswith("## "):
        on = line.startswith("## Invariants")
        continue
    if not on or not re.match(r"\| [A-Z]", line):
        continue
    for part in line.split("|")[1].split(","):
        part = part.strip()
        m = re.fullmatch(r"([A-Z]+)-(\d+) … \1-(\d+)", part)
        ids += ["%s-%d" % (m[1], k) for k in range(int(m[2]), int(m[3]) + 1)] if m else [part]
print(" ".join(sorted({i for i in ids if ids.count(i) > 1})))
PY
)
if [ -n "$dup_ids" ]; then
  echo "invariants: ids listed twice in docs/ARCHITECTURE.md's index: $dup_ids"
  status=1
fi
[ $status -eq 0 ] && echo "layering: clean"
exit $status
