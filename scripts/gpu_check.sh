#!/usr/bin/env bash
# On the GPU machine, from the repository root, after scripts/gpu_bundle.sh
# here: unpacks .gpu/bundle.tar.xz, runs every CUDA test, the kernel tests
# again under compute-sanitizer (memcheck; racecheck for attention), then
# `troupe bench ops --device cuda` and `troupe bench step --device cuda
# --pytorch` on small.toml and GPT-2 124M, and a short training run on the
# GPU. Writes report.json (every step's exit status, time and JSON) and the
# logs into $OUT (at most 8 files). Each step is bounded; the whole check
# takes under 8 minutes. `scripts/gpu_check.sh STEP...` runs only the named
# steps (cuda_test gpu_jobs memcheck racecheck bench_ops bench_ops_bf16
# bench_small bench_small_bf16 bench_gpt2 bench_gpt2_bf16 train_tiny), for a second try within
# the budget. For a quick look: PEER=none leaves PyTorch out of the step
# benchmarks; GPU_JOBS="spec" runs only the gpu_jobs tests that Catch2 spec names.
set -uo pipefail
ONLY=" $* "
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_report}
mkdir -p "$OUT"
B=/tmp/troupe_gpu
rm -rf "$B" && mkdir -p "$B" && tar -C "$B" -xJf .gpu/bundle.tar.xz || { echo "gpu_check: no bundle" >&2; exit 1; }
cuda_lib=$(dirname "$(ls /usr/local/cuda*/targets/x86_64-linux/lib/libcublasLt.so.* 2>/dev/null | head -1)")
# PyTorch (the peer troupe runs) keeps the machine's own library path: its
# CUDA libraries are its own, not the toolkit's that troupe's module loads.
export TROUPE_PYTHON="env LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} $(command -v python3)"
export LD_LIBRARY_PATH="$B/lib:$cuda_lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export UCX_MODULE_DIR="$B/ucx" PATH="$B/bin:$PATH:/usr/local/cuda/bin" TROUPE_SOURCE_DIR="$PWD"
T="$B/bin/troupe"
# peer MODES: the step benchmarks' PyTorch arguments (none with PEER=none).
peer() { [ "${PEER:-pytorch}" = none ] || echo "--pytorch --pytorch-modes $1"; }
LOG="$OUT/steps.log"
STATUS="$B/status.txt"
: > "$LOG"
: > "$STATUS"

# run NAME LIMIT_S OUTFILE CMD...: the command's output to OUTFILE, its status and time noted.
run() {
  local name=$1 limit=$2 out=$3; shift 3
  [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $name "* ]] || return 0
  local t0=$SECONDS
  echo "== $name: $*" >> "$LOG"
  timeout -k 5 "$limit" "$@" > "$out" 2>> "$LOG"
  local status=$?
  echo "$name $status $((SECONDS - t0))" >> "$STATUS"
  echo "== $name: exit $status after $((SECONDS - t0)) s" >> "$LOG"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$B/gpu.txt" 2>&1
run cuda_test 120 "$OUT/cuda_test.log" "$B/bin/cuda_test" --durations yes
run gpu_jobs 240 "$B/gpu_jobs.log" env TROUPE_BIN="$T" TROUPE_DEMO_DATA="$B/data" "$B/bin/gpu_jobs_test" --durations yes ${GPU_JOBS:+"$GPU_JOBS"}
[ -f "$B/gpu_jobs.log" ] && cat "$B/gpu_jobs.log" >> "$OUT/cuda_test.log"
run memcheck 120 "$OUT/sanitizer.log" compute-sanitizer --tool memcheck --error-exitcode 9 "$B/bin/cuda_test" "[kernels]"
run racecheck 90 "$B/racecheck.log" compute-sanitizer --tool racecheck --error-exitcode 9 "$B/bin/cuda_test" "[attention_small]"
[ -f "$B/racecheck.log" ] && cat "$B/racecheck.log" >> "$OUT/sanitizer.log"
run bench_ops 90 "$OUT/bench_ops.json" "$T" bench ops --device cuda --pytorch
run bench_ops_bf16 90 "$B/bench_ops_bf16.json" "$T" bench ops --device cuda --precision bf16 --pytorch
run bench_small 120 "$OUT/bench_small.json" "$T" bench step examples/configs/small.toml --device cuda \
  $(peer eager,compile,cudagraphs) --steps 20 --warmup 3
run bench_small_bf16 120 "$B/bench_small_bf16.json" "$T" bench step examples/configs/small.toml --device cuda \
  --precision bf16 $(peer eager,compile,cudagraphs) --steps 20 --warmup 3
run bench_gpt2 150 "$OUT/bench_gpt2.json" "$T" bench step examples/configs/gpt2_124m.toml --device cuda \
  $(peer eager,compile) --steps 10 --warmup 3
run bench_gpt2_bf16 150 "$B/bench_gpt2_bf16.json" "$T" bench step examples/configs/gpt2_124m.toml --device cuda \
  --precision bf16 $(peer eager,compile) --steps 10 --warmup 3
run train_tiny 60 "$B/train.log" "$T" train examples/configs/tiny.toml --set train.device='"cuda"' \
  --set train.steps=100 --set data.train="$B/data/train.bin" --set data.val="$B/data/val.bin" --metrics "$B/metrics.jsonl"

python3 - "$OUT" "$B" <<'PY'
import json, os, sys
out, b = sys.argv[1], sys.argv[2]
report = {"gpu": open(os.path.join(b, "gpu.txt")).read().strip(), "steps": {}}
rcs = []
for line in open(os.path.join(b, "status.txt")):
    n, r, s = line.split()
    report["steps"][n] = {"exit": int(r), "seconds": int(s)}
    rcs.append(r)
for n in ("bench_ops", "bench_ops_bf16", "bench_small", "bench_small_bf16", "bench_gpt2", "bench_gpt2_bf16"):
    try:
        path = os.path.join(out, n + ".json")
        report[n] = json.load(open(path if os.path.exists(path) else os.path.join(b, n + ".json")))
    except Exception as e:
        report[n] = {"unreadable": str(e)}
try:
    lines = [json.loads(l) for l in open(os.path.join(b, "metrics.jsonl")) if l.strip()]
    report["train_tiny"] = {"first": lines[0], "last": lines[-1]} if lines else {}
except Exception as e:
    report["train_tiny"] = {"unreadable": str(e)}
report["passed"] = all(int(r) == 0 for r in rcs)
json.dump(report, open(os.path.join(out, "report.json"), "w"), indent=1)
print(json.dumps({k: v for k, v in report["steps"].items()}), "passed" if report["passed"] else "FAILED")
PY
