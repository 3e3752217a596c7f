#!/usr/bin/env bash
# Writes the demo corpus: Debian's fortunes text files (without .dat/.u8),
# concatenated in sorted order (~2.5 MB of English), to the path in $1.
set -euo pipefail
out=${1:?usage: demo_corpus.sh OUTPUT}
dir=/usr/share/games/fortunes
[ -d "$dir" ] || { echo "demo_corpus.sh: $dir missing (apt-get install fortunes)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
find "$dir" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -print0 | LC_ALL=C sort -z | xargs -0 cat > "$out.tmp"
mv "$out.tmp" "$out"
