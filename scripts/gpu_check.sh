#!/usr/bin/env bash
# On the GPU machine, from the repository root, after scripts/gpu_bundle.sh
# here: unpacks .gpu/bundle.tar.xz, runs every CUDA test, the kernel tests
# again under compute-sanitizer (memcheck; racecheck for the cases tagged
# [racecheck]: kernels that share tiles or sums in shared memory), then
# `troupe bench collectives --device cuda` (the staged path between two
# processes on the one GPU, NCCL where there are more), `troupe bench ops
# --device cuda` and `troupe bench step --device cuda
# --pytorch` on small.toml and GPT-2 124M, and a short training run on the
# GPU. Into $OUT: steps.log, cuda_test.log, sanitizer.log, bench.jsonl (one
# line per benchmark as it finishes: {"step", "result"}), report.json (every
# step's exit status and time, the benchmarks, written at the end) and, with
# profile_gpt2, profile.txt and profile.csv.gz. The test executables run
# each test case in a process of its own (scripts/run_cases.sh): a skipped
# case ends its process. Each step is bounded; all of them together can pass
# a device call's 10 minutes: name the steps (below) to split the check over
# two calls. `scripts/gpu_check.sh STEP...` runs the named steps in the order
# named (cuda_test gpu_jobs memcheck racecheck bench_comm bench_ops
# bench_ops_bf16 bench_small bench_small_bf16 bench_gpt2 bench_gpt2_bf16
# bench_gpt2_recompute (GPT-2 bf16 with train.recompute = "gelu", ours alone)
# train_tiny profile_gpt2): the ones that matter first, where device time may
# run out. profile_gpt2 (not in the default list) times every kernel of one
# GPT-2 bf16 step under ncu, graphs off (scripts/kernel_profile.py). For a
# quick look: PEER=none leaves PyTorch out of the step benchmarks and gloo
# out of bench_comm; COMM_SIZES="67108864" sets bench_comm's sizes;
# GPU_JOBS="spec" runs only the gpu_jobs tests that Catch2 spec names, and
# CUDA_TESTS="spec" only those cuda_test cases (a failed case rerun alone).
set -uo pipefail
STEPS=${*:-cuda_test gpu_jobs memcheck racecheck bench_comm bench_ops bench_ops_bf16 bench_small bench_small_bf16 bench_gpt2 bench_gpt2_bf16 bench_gpt2_recompute train_tiny}
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
BENCH="$OUT/bench.jsonl"
: > "$LOG"
: > "$STATUS"
: > "$BENCH"

# run NAME LIMIT_S OUTFILE CMD...: the command's output to OUTFILE, its status and time noted.
run() {
  local name=$1 limit=$2 out=$3; shift 3
  local t0=$SECONDS
  echo "== $name: $*" >> "$LOG"
  timeout -k 5 "$limit" "$@" > "$out" 2>> "$LOG"
  local status=$?
  echo "$name $status $((SECONDS - t0))" >> "$STATUS"
  echo "== $name: exit $status after $((SECONDS - t0)) s" >> "$LOG"
}

# bench NAME LIMIT_S CMD...: a benchmark's JSON into $B/NAME.json and, as one line, onto bench.jsonl.
bench() {
  local name=$1 limit=$2; shift 2
  run "$name" "$limit" "$B/$name.json" "$@"
  python3 -c 'import json,sys; print(json.dumps({"step": sys.argv[1], "result": json.load(open(sys.argv[2]))}))' \
    "$name" "$B/$name.json" >> "$BENCH" 2> /dev/null || echo "== $name: no JSON" >> "$LOG"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$B/gpu.txt" 2>&1
cat "$B/gpu.txt" >> "$LOG"
: > "$OUT/cuda_test.log"
: > "$OUT/sanitizer.log"
for step in $STEPS; do
  case $step in
    cuda_test) run cuda_test 180 "$B/cuda_test.log" scripts/run_cases.sh "$B/bin/cuda_test" ${CUDA_TESTS:+"$CUDA_TESTS"}
      cat "$B/cuda_test.log" >> "$OUT/cuda_test.log" ;;
    gpu_jobs) run gpu_jobs 300 "$B/gpu_jobs.log" env TROUPE_BIN="$T" TROUPE_DEMO_DATA="$B/data" \
        scripts/run_cases.sh "$B/bin/gpu_jobs_test" ${GPU_JOBS:+"$GPU_JOBS"}
      cat "$B/gpu_jobs.log" >> "$OUT/cuda_test.log" ;;
    memcheck) run memcheck 120 "$B/memcheck.log" compute-sanitizer --tool memcheck --error-exitcode 9 "$B/bin/cuda_test" \
        "[kernels]"
      cat "$B/memcheck.log" >> "$OUT/sanitizer.log" ;;
    racecheck) run racecheck 90 "$B/racecheck.log" compute-sanitizer --tool racecheck --error-exitcode 9 \
        "$B/bin/cuda_test" "[racecheck]"
      cat "$B/racecheck.log" >> "$OUT/sanitizer.log" ;;
    bench_ops) bench bench_ops 90 "$T" bench ops --device cuda --pytorch ;;
    bench_ops_bf16) bench bench_ops_bf16 90 "$T" bench ops --device cuda --precision bf16 --pytorch ;;
    bench_small) bench bench_small 120 "$T" bench step examples/configs/small.toml --device cuda \
        $(peer eager,compile,cudagraphs) --steps 20 --warmup 3 ;;
    bench_small_bf16) bench bench_small_bf16 120 "$T" bench step examples/configs/small.toml --device cuda \
        --precision bf16 $(peer eager,compile,cudagraphs) --steps 20 --warmup 3 ;;
    bench_gpt2) bench bench_gpt2 150 "$T" bench step examples/configs/gpt2_124m.toml --device cuda \
        $(peer eager,compile) --steps 10 --warmup 3 ;;
    bench_gpt2_bf16) bench bench_gpt2_bf16 150 "$T" bench step examples/configs/gpt2_124m.toml --device cuda \
        --precision bf16 $(peer eager,compile) --steps 10 --warmup 3 ;;
    bench_gpt2_recompute) bench bench_gpt2_recompute 120 "$T" bench step examples/configs/gpt2_124m.toml \
        --device cuda --precision bf16 --set train.recompute=gelu --steps 10 --warmup 3 ;;
    bench_comm) sizes=(); for b in ${COMM_SIZES:-1048576 16777216 67108864}; do sizes+=(--sizes "$b"); done
      bench bench_comm 180 "$T" bench collectives --nodes 2 --device cuda --repetitions 3 "${sizes[@]}" \
        $([ "${PEER:-pytorch}" = none ] && echo --no-gloo) ;;
    profile_gpt2) run profile_gpt2 180 "$B/profile.out" ncu --clock-control none --target-processes all \
        --metrics gpu__time_duration.sum --csv --page raw --print-units base --log-file "$B/profile.csv" \
        "$T" bench step examples/configs/gpt2_124m.toml --device cuda --precision bf16 --steps 1 --warmup 1 \
        --set train.cuda_graphs=false
      python3 scripts/kernel_profile.py "$B/profile.csv" > "$OUT/profile.txt" 2>> "$LOG"
      gzip -c "$B/profile.csv" > "$OUT/profile.csv.gz" ;;
    train_tiny) run train_tiny 60 "$B/train.log" "$T" train examples/configs/tiny.toml --set train.device='"cuda"' \
        --set train.steps=100 --set data.train="$B/data/train.bin" --set data.val="$B/data/val.bin" \
        --metrics "$B/metrics.jsonl" ;;
    *) echo "gpu_check: unknown step $step" >&2; exit 2 ;;
  esac
done

python3 - "$OUT" "$B" <<'PY'
import json, os, sys
out, b = sys.argv[1], sys.argv[2]
report = {"gpu": open(os.path.join(b, "gpu.txt")).read().strip(), "steps": {}}
rcs = []
for line in open(os.path.join(b, "status.txt")):
    n, r, s = line.split()
    report["steps"][n] = {"exit": int(r), "seconds": int(s)}
    rcs.append(r)
for n in ("bench_comm", "bench_ops", "bench_ops_bf16", "bench_small", "bench_small_bf16", "bench_gpt2", "bench_gpt2_bf16",
          "bench_gpt2_recompute"):
    if n not in report["steps"]:
        continue
    try:
        report[n] = json.load(open(os.path.join(b, n + ".json")))
    except Exception as e:
        report[n] = {"unreadable": str(e)}
try:
    if "train_tiny" in report["steps"]:
        lines = [json.loads(l) for l in open(os.path.join(b, "metrics.jsonl")) if l.strip()]
        report["train_tiny"] = {"first": lines[0], "last": lines[-1]} if lines else {}
except Exception as e:
    report["train_tiny"] = {"unreadable": str(e)}
report["passed"] = all(int(r) == 0 for r in rcs)
json.dump(report, open(os.path.join(out, "report.json"), "w"), indent=1)
print(json.dumps({k: v for k, v in report["steps"].items()}), "passed" if report["passed"] else "FAILED")
PY
