#!/usr/bin/env bash
# The demo: install, build, prepare the fortunes corpus, train the tiny GPT.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/demo_corpus.sh data/corpus.txt
./build/tools/troupe/troupe prepare --input data/corpus.txt --output data
./build/tools/troupe/troupe train examples/configs/tiny.toml --metrics data/tiny_metrics.jsonl --save data/tiny.safetensors
