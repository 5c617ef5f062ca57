#!/usr/bin/env python3
"""dist.all_reduce from Python, one backend per run: small-message latency and large-message bus
bandwidth, one compute thread per rank. Prints one line per size:
  <backend>,<ranks>,<bytes>,<mean us per call>,<busbw GB/s>
    python3 torch_allreduce.py --backend loom --ranks 2 --sizes 8,67108864
The loom backend needs loom_torch on PYTHONPATH (build/python after building the package).
"""
import argparse
import os
import sys
import time

sys.dont_write_bytecode = True  # keeps the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common  # noqa: E402

torch_common.one_thread_environment()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def iterations_for(nbytes, seconds_budget):
    # About the same wall time per size: many calls for small messages, few for large ones.
    if nbytes <= 64 * 1024:
        return max(200, int(seconds_budget * 20000))
    return max(5, int(seconds_budget * 2e9 / nbytes))


def worker(rank, args, port, results):
    torch_common.init_group(args.backend, rank, args.ranks, port)
    rows = []
    for nbytes in [int(s) for s in args.sizes.split(",")]:
        t = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
        iters = iterations_for(nbytes, args.seconds)
        for _ in range(max(3, iters // 10)):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        per_call = elapsed.item() / iters
        busbw = t.numel() * 4 / per_call * 2 * (args.ranks - 1) / args.ranks / 1e9
        rows.append(f"{args.backend},{args.ranks},{t.numel() * 4},{per_call * 1e6:.2f},{busbw:.3f}")
    dist.destroy_process_group()
    if rank == 0:
        results.put(rows)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="gloo")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--sizes", default="8,67108864")
    p.add_argument("--seconds", type=float, default=2.0, help="rough time per size")
    args = p.parse_args()
    for row in torch_common.launch(worker, args, args.ranks, "spawn", 1, "torch_allreduce"):
        print(row)


if __name__ == "__main__":
    main()
