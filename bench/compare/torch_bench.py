#!/usr/bin/env python3
"""torch.distributed (gloo backend) side of the comparison: one collective at one size, timed by
the method of per_op.hpp (warm-up calls, then each rank times every call, no barrier; rank 0
gathers the arrays; a call's time is its slowest rank's; the median over calls). Starts its own
ranks (fresh processes, forked after torch is imported) on loopback TCP. Prints one CSV row:
  torch-gloo,<op>,<ranks>,<bytes>,<time_us>,<busbw_gbps>
    python3 torch_bench.py --op allreduce|alltoall --ranks 2 --bytes 1048576 -n 20 -w 5
--fresh-inputs rewrites the input before every call, untimed (per_op.hpp's rewrite_lines).
"""
import argparse
import os
import socket
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def worker(rank, args, port, results):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    n = args.ranks
    unit = n if args.op == "alltoall" else 1  # alltoall's buffer is whole blocks, one per rank
    count = max(1, args.bytes // 4 // unit) * unit
    inp = torch.ones(count, dtype=torch.float32)
    out = torch.zeros(count, dtype=torch.float32)
    if args.op == "allreduce":
        def call():
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
    else:
        def call():
            dist.all_to_all_single(out, inp)
    source = out if args.op == "allreduce" else inp  # the all-reduce runs in place

    def before():
        if args.fresh_inputs:
            source.mul_(1.0)  # writes every element with the value it holds

    for _ in range(args.warmup):
        before()
        call()
    mine = torch.zeros(args.iters, dtype=torch.float64)
    for i in range(args.iters):
        before()
        t0 = time.perf_counter_ns()
        call()
        mine[i] = (time.perf_counter_ns() - t0) / 1e3
    gathered = [torch.zeros_like(mine) for _ in range(n)] if rank == 0 else None
    dist.gather(mine, gathered, dst=0)
    if rank == 0:
        slowest = torch.stack(gathered).max(dim=0).values.tolist()
        us = statistics.median(slowest)
        factor = 2.0 * (n - 1) / n if args.op == "allreduce" else (n - 1) / n
        size = count * 4
        results.put(f"torch-gloo,{args.op},{n},{size},{us:.3f},{size / (us * 1e-6) / 1e9 * factor:.4f}")
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--op", choices=["allreduce", "alltoall"], default="allreduce")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--bytes", type=int, default=8)
    p.add_argument("--fresh-inputs", action="store_true")
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    args = p.parse_args()
    # The port is free when it is picked, not held: another process (a test or launch running
    # beside this one) can take it before rank 0's store binds it. A launch that fails starts
    # again on a new port, three times in all; the last failure is raised.
    for attempt in range(1, 4):
        try:
            print(launch(args))
            return
        except Exception as e:  # a worker's exception or exit code (torch.multiprocessing)
            if attempt == 3:
                raise
            print(f"torch_bench: launch {attempt} failed ({e}); again on a new port", file=sys.stderr)


def launch(args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    results = ctx.SimpleQueue()
    mp.start_processes(worker, args=(args, port, results), nprocs=args.ranks, join=True,
                       start_method="fork")
    return results.get()


if __name__ == "__main__":
    main()
