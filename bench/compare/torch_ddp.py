#!/usr/bin/env python3
"""PyTorch DDP (backend gloo, or loom with loom_torch on PYTHONPATH), also the baseline for
loom-train: the same MLP, synthetic data, SGD with momentum, one compute thread per rank. Prints:
  <backend>,<ranks>,<samples/s over all ranks>,<mean step ms>
    python3 torch_ddp.py --layers 784,1024,1024,1024,10 --batch-size 64 --steps 200 --ranks 2
    python3 torch_ddp.py ... --backend loom
    python3 torch_ddp.py ... --no-ddp          (one process, no communication)
"""
import argparse
import os
import socket
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402


def make_mlp(widths):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def worker(rank, args, port, results):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    widths = [int(w) for w in args.layers.split(",")]
    ddp = not args.no_ddp
    if ddp:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        if args.backend == "loom":
            import loom_torch  # noqa: F401  registers the backend
        dist.init_process_group(args.backend, rank=rank, world_size=args.ranks)
    # Synthetic, teacher-labelled data, generated once (as loom-train does).
    teacher = make_mlp([widths[0], 64, widths[-1]])
    with torch.no_grad():
        x_all = torch.randn(args.samples, widths[0])
        y_all = teacher(x_all).argmax(dim=1)
    model = make_mlp(widths)
    if ddp:
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    world = args.ranks if ddp else 1
    per_rank = args.samples // world
    b = args.batch_size

    def step(i):
        start = rank * per_rank + (i * b) % max(1, per_rank - b)
        x, y = x_all[start:start + b], y_all[start:start + b]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # DDP all-reduces the buckets during backward and waits at its end
        opt.step()

    for i in range(args.warmup):
        step(i)
    if ddp:
        dist.barrier()
    t0 = time.perf_counter()
    for i in range(args.steps):
        step(args.warmup + i)
    elapsed = time.perf_counter() - t0
    if ddp:
        t = torch.tensor([elapsed], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        elapsed = t.item()
        dist.destroy_process_group()
    if rank == 0:
        results.put((elapsed, world))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", default="784,1024,1024,1024,10")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--samples", type=int, default=16384)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--no-ddp", action="store_true")
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    nprocs = 1 if args.no_ddp else args.ranks
    mp.start_processes(worker, args=(args, port, results), nprocs=nprocs, join=True,
                       start_method="spawn")
    elapsed, world = results.get()
    rate = args.steps * args.batch_size * world / elapsed
    name = "alone" if args.no_ddp else args.backend
    print(f"{name},{world},{rate:.1f},{1e3 * elapsed / args.steps:.3f}")


if __name__ == "__main__":
    main()
