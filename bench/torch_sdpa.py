#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention (causal) on the GPU, beside
`troupe bench ops --device cuda --pytorch`: the median forward and backward
time of each shape, in fp32 without TF32 or in bf16 (the precision Troupe
computes in). Shapes as "B,T,C,NH" (several separated by spaces). One JSON
object on stdout."""
import json
import sys
import time

import torch
import torch.nn.functional as F


def median_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    if len(sys.argv) < 4:
        raise SystemExit("usage: torch_sdpa.py REPS fp32|bf16 B,T,C,NH [B,T,C,NH ...]")
    if not torch.cuda.is_available():
        print(json.dumps({"peer": "pytorch", "error": "no GPU visible to PyTorch"}))
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    reps = int(sys.argv[1])
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[2]]
    out = {"peer": "pytorch", "torch_version": torch.__version__, "op": "scaled_dot_product_attention (causal)",
           "precision": sys.argv[2], "shapes": {}}
    for shape in sys.argv[3:]:
        B, T, C, NH = (int(x) for x in shape.split(","))
        q, k, v = (torch.randn(B, NH, T, C // NH, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
        dy = torch.randn(B, NH, T, C // NH, device="cuda", dtype=dtype)
        fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        bwd = median_ms(lambda: torch.autograd.grad(y, (q, k, v), dy, retain_graph=True), reps)
        out["shapes"][shape] = {"forward_ms": fwd, "backward_ms": bwd}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
