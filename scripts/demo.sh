#!/usr/bin/env bash
# The demo: install, build, prepare the fortunes corpus, train the tiny GPT
# through troupe launch with pipeline and data parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/demo_corpus.sh data/corpus.txt
./build/tools/troupe/troupe prepare --input data/corpus.txt --output data
# Four stage actors on two nodes: pipeline (pp = 2, 1F1B) x data parallel (dp = 2, ZeRO-1).
./build/tools/troupe/troupe launch examples/configs/tiny_pipeline.toml --nodes 2 \
  --metrics data/tiny_metrics.jsonl --save data/tiny.safetensors --report data/tiny_report.html
