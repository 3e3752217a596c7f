#!/usr/bin/env python3
"""The same GPT as Troupe's, in PyTorch (Debian's python3-torch 1.13): the
reference for parity tests and the peer in `troupe bench step --pytorch`.

  torch_gpt.py bench CONFIG [--set k=v]... [--steps N] [--warmup N]   -> JSON step throughput
  torch_gpt.py bench-cuda CONFIG [--precision fp32|bf16] [--modes eager,compile,cudagraphs]
                                                                      -> JSON per mode, on the GPU
  torch_gpt.py eval  CONFIG --init W.safetensors --data FILE.bin [--windows K]  -> JSON loss
  torch_gpt.py init  CONFIG --out W.safetensors [--seed S]            -> random weights (HF layout)
  torch_gpt.py train CONFIG [--steps N]                               -> JSON losses (learning reference)
  torch_gpt.py save  CONFIG --out FILE [--steps N]                    -> JSON torch.save times of model + AdamW

Weights use Hugging Face GPT-2 names and layouts (Conv1D weights [in, out]);
the LM head is tied to wte.weight. Token files: 32-byte header, then tokens.
"""
import argparse
import json
import math
import os
import struct
import sys
import time
import tomllib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- config
DEFAULTS = {
    "model": {"layers": 4, "heads": 4, "dim": 128, "ctx": 256, "vocab": 256,
              "parallel_block": False, "window": 0},
    "train": {"steps": 300, "batch": 16, "lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 20,
              "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0,
              "seed": 1337, "threads": 0},
    "data": {"train": "data/train.bin", "val": "data/val.bin"},
}


def load_config(path, overrides):
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    cfg = {k: dict(v) for k, v in DEFAULTS.items()}
    for section, values in raw.items():
        if isinstance(values, dict):
            cfg.setdefault(section, {}).update(values)
    for item in overrides or []:
        key, value = item.split("=", 1)
        section, name = key.split(".", 1)
        try:
            parsed = tomllib.loads("v = " + value)["v"]
        except tomllib.TOMLDecodeError:
            parsed = value
        cfg.setdefault(section, {})[name] = parsed
    return cfg


# ---------------------------------------------------------------- model
class Block(nn.Module):
    def __init__(self, C, NH, parallel, window):
        super().__init__()
        self.NH, self.parallel, self.window = NH, parallel, window
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        if not parallel:
            self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attn(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if x.is_cuda:  # PyTorch's fused attention (flash or memory-efficient), as a GPU user runs it
            if self.window == 0:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask[:T, :T])
            return self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.NH))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        return self.attn_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def mlp(self, x):
        return self.mlp_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    def forward(self, x, mask):
        if self.parallel:
            h = self.ln_1(x)
            return x + self.attn(h, mask) + self.mlp(h)
        x = x + self.attn(self.ln_1(x), mask)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
        C = m["dim"]
        self.wte = nn.Embedding(m["vocab"], C)
        self.wpe = nn.Embedding(m["ctx"], C)
        self.h = nn.ModuleList(Block(C, m["heads"], m["parallel_block"], m["window"]) for _ in range(m["layers"]))
        self.ln_f = nn.LayerNorm(C)
        T = m["ctx"]
        i = torch.arange(T).view(T, 1)
        j = torch.arange(T).view(1, T)
        hidden = j > i
        if m["window"] > 0:
            hidden = hidden | (j < i - m["window"] + 1)
        self.register_buffer("mask", hidden, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * m["layers"]) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


# HF name -> (module path, transpose?)
def hf_names(m):
    names = {"wte.weight": ("wte.weight", False), "wpe.weight": ("wpe.weight", False),
             "ln_f.weight": ("ln_f.weight", False), "ln_f.bias": ("ln_f.bias", False)}
    for l in range(m["layers"]):
        h = f"h.{l}."
        pairs = [("ln_1.weight", "ln_1.weight", False), ("ln_1.bias", "ln_1.bias", False),
                 ("attn.c_attn.weight", "c_attn.weight", True), ("attn.c_attn.bias", "c_attn.bias", False),
                 ("attn.c_proj.weight", "attn_proj.weight", True), ("attn.c_proj.bias", "attn_proj.bias", False),
                 ("mlp.c_fc.weight", "c_fc.weight", True), ("mlp.c_fc.bias", "c_fc.bias", False),
                 ("mlp.c_proj.weight", "mlp_proj.weight", True), ("mlp.c_proj.bias", "mlp_proj.bias", False)]
        if not m["parallel_block"]:
            pairs += [("ln_2.weight", "ln_2.weight", False), ("ln_2.bias", "ln_2.bias", False)]
        for hf, ours, t in pairs:
            names[h + hf] = (h + ours, t)
    return names


# ---------------------------------------------------------------- safetensors
def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", f"{path}: {name} is {e['dtype']}"
        b, end = e["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data, dtype="<f4", count=(end - b) // 4,
                                                   offset=8 + n + b).copy()).view(e["shape"])
    return out


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(path + ".tmp", path)


def load_weights(model, path):
    tensors = read_safetensors(path)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for hf, (ours, t) in hf_names(model.m).items():
            src = tensors[hf]
            params[ours].copy_(src.t() if t else src)


def save_weights(model, path):
    params = dict(model.named_parameters())
    write_safetensors(path, {hf: (params[ours].t() if t else params[ours]) for hf, (ours, t) in hf_names(model.m).items()})


# ---------------------------------------------------------------- data
def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"TROUPETK", f"{path}: not a token file"
    _, width, count = struct.unpack("<IIQ", data[8:24])
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[width]
    return np.frombuffer(data, dtype=dtype, count=count, offset=32).astype(np.int64)


def window_loss(model, tokens, ctx, windows, batch):
    """Mean nats/token over the first `windows` windows of ctx+1 tokens, stride ctx."""
    available = (len(tokens) - 1) // ctx
    windows = available if windows is None or windows < 0 else windows
    total = 0.0
    with torch.no_grad():
        for w0 in range(0, windows, batch):
            ws = range(w0, min(windows, w0 + batch))
            x = torch.from_numpy(np.stack([tokens[w * ctx: w * ctx + ctx] for w in ws]))
            y = torch.from_numpy(np.stack([tokens[w * ctx + 1: w * ctx + ctx + 1] for w in ws]))
            logits_loss = model(x, y).double()
            total += logits_loss.item() * len(ws) * ctx
    return total / (windows * ctx), windows


# ---------------------------------------------------------------- commands
def setup_threads(cfg):
    threads = cfg["train"].get("threads", 0) or os.cpu_count()
    # PyTorch's best setting on these machines: one torch thread, BLAS threads = cores.
    torch.set_num_threads(1)
    return threads


def make_optimizer(model, t):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=t["eps"])


def model_and_batch(cfg):
    """The model, its AdamW and one random batch (seed 0), for the benchmarks."""
    m, t = cfg["model"], cfg["train"]
    torch.manual_seed(0)
    model = GPT(m)
    opt = make_optimizer(model, t)
    B, T = t["batch"], m["ctx"]
    return model, opt, torch.randint(0, m["vocab"], (B, T)), torch.randint(0, m["vocab"], (B, T))


def cmd_bench(args, cfg):
    threads = setup_threads(cfg)
    t = cfg["train"]
    model, opt, x, y = model_and_batch(cfg)
    B, T = x.shape
    times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"])
        opt.step()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    step = sorted(times)[len(times) // 2]
    blas = torch.__config__.show()
    print(json.dumps({"peer": "pytorch", "torch_version": torch.__version__, "torch_threads": torch.get_num_threads(),
                      "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"), "threads": threads,
                      "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
                      "step_ms": step * 1e3, "tokens_per_s": B * T / step,
                      "blas_info": "openblas" if "openblas" in blas.lower() else "system libblas.so.3"}))


def cmd_bench_cuda(args, cfg):
    """Step time on the GPU in each mode asked for: eager, torch.compile, and
    torch.compile with CUDA graphs (mode="reduce-overhead"); fused AdamW,
    SDPA attention; fp32 without TF32, or bf16 autocast."""
    if not torch.cuda.is_available():
        print(json.dumps({"peer": "pytorch", "error": "no GPU visible to PyTorch"}))
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    t = cfg["train"]
    B, T = t["batch"], cfg["model"]["ctx"]
    out = {"peer": "pytorch", "torch_version": torch.__version__, "device": torch.cuda.get_device_name(0),
           "precision": args.precision, "modes": {}}
    for mode in args.modes.split(","):
        torch.manual_seed(0)
        model = GPT(cfg["model"]).cuda()
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]},
                                 {"params": rest, "weight_decay": 0.0}], lr=t["lr"],
                                betas=(t["beta1"], t["beta2"]), eps=t["eps"], fused=True)
        x = torch.randint(0, cfg["model"]["vocab"], (B, T), device="cuda")
        y = torch.randint(0, cfg["model"]["vocab"], (B, T), device="cuda")

        def loss_of(x, y):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                return model(x, y)

        step_fn = loss_of
        if mode == "compile":
            step_fn = torch.compile(loss_of)
        elif mode == "cudagraphs":
            step_fn = torch.compile(loss_of, mode="reduce-overhead")
        elif mode != "eager":
            raise SystemExit(f"--modes: unknown mode {mode}")
        torch.cuda.reset_peak_memory_stats()
        times = []
        t_start = time.perf_counter()
        for i in range(args.warmup + args.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = step_fn(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"], foreach=True)
            opt.step()
            torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        times.sort()
        step = times[len(times) // 2]
        out["modes"][mode] = {"step_ms": {"min": times[0] * 1e3, "median": step * 1e3, "max": times[-1] * 1e3},
                              "tokens_per_s": B * T / step, "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20,
                              "wall_s_with_compile": time.perf_counter() - t_start}
        del model, opt
        torch.cuda.empty_cache()
    print(json.dumps(out))


def cmd_eval(args, cfg):
    setup_threads(cfg)
    model = GPT(cfg["model"])
    load_weights(model, args.init)
    loss, windows = window_loss(model, read_tokens(args.data), cfg["model"]["ctx"], args.windows, cfg["train"]["batch"])
    print(json.dumps({"loss": loss, "windows": windows}))


def cmd_init(args, cfg):
    torch.manual_seed(args.seed)
    model = GPT(cfg["model"])
    with torch.no_grad():  # non-trivial norms and biases, so the test covers them
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.empty_like(p).uniform_(-0.2, 0.2))
    save_weights(model, args.out)


def cmd_train(args, cfg):
    setup_threads(cfg)
    m, t = cfg["model"], cfg["train"]
    torch.manual_seed(t["seed"])
    model = GPT(m)
    opt = make_optimizer(model, t)
    tokens = read_tokens(cfg["data"]["train"])
    val = read_tokens(cfg["data"]["val"])
    steps = args.steps or t["steps"]
    rng = np.random.default_rng(t["seed"])
    B, T = t["batch"], m["ctx"]
    losses = []
    for step in range(steps):
        if step < t["warmup_steps"]:
            lr = t["lr"] * (step + 1) / t["warmup_steps"]
        else:
            p = min(1.0, (step - t["warmup_steps"]) / max(1, steps - t["warmup_steps"] - 1))
            lr = t["min_lr"] + 0.5 * (t["lr"] - t["min_lr"]) * (1 + math.cos(math.pi * p))
        for g in opt.param_groups:
            g["lr"] = lr
        offs = rng.integers(0, len(tokens) - T - 1, B)
        x = torch.from_numpy(np.stack([tokens[o:o + T] for o in offs]))
        y = torch.from_numpy(np.stack([tokens[o + 1:o + T + 1] for o in offs]))
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"])
        opt.step()
        losses.append(loss.item())
    model.eval()
    val_loss, _ = window_loss(model, val, T, t.get("eval_windows", 64), B)
    print(json.dumps({"peer": "pytorch", "steps": steps, "final_loss": losses[-1],
                      "mean_last_20": sum(losses[-20:]) / len(losses[-20:]), "val_loss": val_loss}))


def cmd_save(args, cfg):
    """The peer of `troupe bench checkpoint`: a synchronous torch.save of the
    model and its AdamW state (after one step, so the moments exist), written
    and fsynced N times; training would stall for each."""
    setup_threads(cfg)
    model, opt, x, y = model_and_batch(cfg)
    model(x, y).backward()
    opt.step()
    state_bytes = sum(p.numel() * 4 * 3 for p in model.parameters())
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with open(args.out, "wb") as f:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, f)
            f.flush()
            os.fsync(f.fileno())
        times.append(time.perf_counter() - t0)
    size = os.path.getsize(args.out)
    os.remove(args.out)
    print(json.dumps({"peer": "torch.save", "torch_version": torch.__version__, "state_bytes": state_bytes,
                      "file_bytes": size, "stall_s": sorted(times)}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["bench", "bench-cuda", "eval", "init", "train", "save"])
    p.add_argument("config")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--init")
    p.add_argument("--data")
    p.add_argument("--windows", type=int, default=-1)
    p.add_argument("--out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--modes", default="eager,compile")
    args = p.parse_args()
    cfg = load_config(args.config, args.set)
    if args.command == "train" and "--steps" not in sys.argv:
        args.steps = None
    {"bench": cmd_bench, "bench-cuda": cmd_bench_cuda, "eval": cmd_eval, "init": cmd_init, "train": cmd_train,
     "save": cmd_save}[args.command](args, cfg)


if __name__ == "__main__":
    main()
