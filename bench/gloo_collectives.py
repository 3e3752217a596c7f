#!/usr/bin/env python3
"""The peer for `troupe bench collectives`: gloo through Debian's python3-torch
torch.distributed, K processes on 127.0.0.1, the same sizes; bus bandwidth with
nccl-tests' definitions. Prints one JSON object (rank 0).

  gloo_collectives.py --nodes K --sizes 1024,65536,... [--pin] [--hosts NS:ADDR:DEV,...] [--device cuda]

--pin: rank r of K runs on allowed core floor(r * C / K), as the benchmark
pins its own ranks.
--hosts: rank r runs in network namespace NS (ip netns exec), on its address
ADDR of device DEV; rank 0's address is the rendezvous (as the benchmark's
--across-hosts places its own ranks).
--device cuda: the tensors on GPU rank % GPUs (as `bench collectives --device
cuda` places its ranks), through NCCL where every rank has a GPU of its own,
else gloo (which stages CUDA tensors through the host); each timed op ends
with torch.cuda.synchronize().
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def worker(rank, world, port, sizes, iters, pin, hosts, device="cpu"):
    if pin:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, [cores[rank * len(cores) // world]])
    master, device = ("127.0.0.1", "lo") if not hosts else (hosts[0][1], hosts[rank][2])
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": master,
                       "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": device})
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    backend, where, sync = "gloo", "cpu", (lambda: None)
    if device == "cuda":
        gpus = torch.cuda.device_count()
        where = "cuda:%d" % (rank % gpus)
        torch.cuda.set_device(where)
        backend = "nccl" if gpus >= world else "gloo"
        sync = torch.cuda.synchronize
    dist.init_process_group(backend, rank=rank, world_size=world)
    ones = lambda k: torch.ones(k, device=where)
    empty = lambda k: torch.empty(k, device=where)
    rows = []
    for size in sizes:
        n = max(1, size // 4)
        x = ones(n)
        row = {"bytes": size}
        ops = {
            "all_reduce": (lambda: dist.all_reduce(x), 2.0 * (world - 1) / world),
            "all_gather": (lambda: dist.all_gather([empty(max(1, n // world)) for _ in range(world)],
                                                   ones(max(1, n // world))), (world - 1) / world),
            "reduce_scatter": (lambda: dist.reduce_scatter(empty(max(1, n // world)),
                                                           [ones(max(1, n // world)) for _ in range(world)]),
                               (world - 1) / world),
        }
        for name, (fn, factor) in ops.items():
            try:
                fn()
                sync()
                dist.barrier()
                times = []
                for _ in range(iters(size)):
                    t0 = time.perf_counter()
                    fn()
                    sync()
                    times.append(time.perf_counter() - t0)
                t = sorted(times)[len(times) // 2]
                row[name] = {"time_us": t * 1e6, "busbw_GBps": size / t * factor / 1e9}
            except Exception as e:  # gloo lacks some collectives
                row[name] = {"error": str(e).splitlines()[0]}
        rows.append(row)
    if rank == 0:
        print(json.dumps({"peer": backend, "device": where.split(":")[0], "torch": torch.__version__, "nodes": world,
                          "results": rows}))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--sizes", default="1024,65536,1048576,16777216,67108864")
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--pin", action="store_true")
    p.add_argument("--hosts", default="")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    hosts = [h.split(":") for h in a.hosts.split(",")] if a.hosts else []
    if hosts and (len(hosts) != a.nodes or any(len(h) != 3 for h in hosts)):
        sys.exit("gloo_collectives.py: --hosts wants NS:ADDR:DEV for each of the %d ranks" % a.nodes)
    iters = lambda size: max(20, min(1000, (1 << 30) // max(size, 1)))  # as bench collectives
    if a.rank >= 0:
        return worker(a.rank, a.nodes, a.port, sizes, iters, a.pin, hosts, a.device)
    port = free_port()  # on loopback; in a fresh namespace it is free too
    procs = [subprocess.Popen((["ip", "netns", "exec", hosts[r][0]] if hosts else []) +
                              [sys.executable, __file__, "--nodes", str(a.nodes), "--sizes", a.sizes,
                               "--rank", str(r), "--port", str(port), "--device", a.device] +
                              (["--pin"] if a.pin else []) +
                              (["--hosts", a.hosts] if hosts else []),
                              stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL)
             for r in range(a.nodes)]
    out = procs[0].communicate()[0]
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit("gloo_collectives.py: a rank failed")
    sys.stdout.write(out.decode())


if __name__ == "__main__":
    main()
