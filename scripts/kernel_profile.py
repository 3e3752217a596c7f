#!/usr/bin/env python3
"""One training step's kernels from an ncu CSV (gpu__time_duration.sum per launch).

Usage: kernel_profile.py NCU_CSV. The step is the launches after the
second-to-last AdamW launch up to the last one (bench step runs warm-up steps
first and measures its peak GEMM after the last step). Prints each kernel's
launches, total and share of the step, largest first, then the step's sum.
ncu runs one kernel at a time, so the sum is the step's time with no overlap.
"""
import csv
import re
import sys
from collections import defaultdict


def launches(path):
    """(kernel name, grid, nanoseconds) per launch, in launch order, from
    ncu's raw page (a column per metric) or its details page (a row per
    metric: Metric Name, Metric Unit, Metric Value)."""
    lines = open(path, errors="replace").read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    scale = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9}
    for row in csv.DictReader(lines[start:]):
        if not row.get("ID", "").isdigit():
            continue  # the units row
        if "Metric Name" in row:
            if row["Metric Name"] not in ("gpu__time_duration.sum", "Duration"):
                continue
            ns = float(row["Metric Value"].replace(",", "")) * scale.get(row.get("Metric Unit", "nsecond"), 1.0)
        else:
            ns = float(row["gpu__time_duration.sum"].replace(",", ""))
        yield row["Kernel Name"], row.get("Grid Size", ""), ns


def short(name):
    name = re.sub(r"(\(anonymous namespace\)|<unnamed>)::", "", name)
    name = re.sub(r"\(.*$", "", name)            # arguments
    name = re.sub(r"<.*>", "<>", name)           # template arguments
    return name.replace("void ", "")[:70]


def main():
    rows = list(launches(sys.argv[1]))
    adam = [i for i, (n, _, _) in enumerate(rows) if "adamw" in n or "lamb" in n]
    if len(adam) >= 2:
        rows = rows[adam[-2] + 1: adam[-1] + 1]
    total = sum(t for _, _, t in rows)
    by = defaultdict(lambda: [0, 0.0])
    for n, grid, t in rows:
        key = short(n) + ("  grid " + grid if "gemm" in n.lower() or "sm90" in n or "cutlass" in n.lower() else "")
        by[key][0] += 1
        by[key][1] += t
    print(f"{'kernel':<100} {'n':>5} {'ms':>9} {'share':>6}")
    for k, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{k:<100} {c:>5} {t / 1e6:>9.3f} {t / total:>6.1%}")
    print(f"one step: {len(rows)} launches, {total / 1e6:.3f} ms of kernel time (serialised by ncu)")


if __name__ == "__main__":
    main()
