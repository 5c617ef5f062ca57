#!/usr/bin/env python3
"""PyTorch DDP or FSDP2 training steps (backend gloo, or loom with loom_torch on PYTHONPATH), also
the baseline for loom-train: an MLP, synthetic data, SGD with momentum, one compute thread per
rank. Every rank times each step on its own (no barrier between steps); a step's time is its
slowest rank's (torch_common.py, per_op.hpp's method). Prints:
  <backend>,<ranks>,<samples/s over all ranks>,<mean step ms>,<median step ms>
samples/s and the mean step from the time of all timed steps on the slowest rank; the median
over steps of each step's slowest rank.
    python3 torch_ddp.py --layers 784,1024,1024,1024,10 --batch-size 64 --steps 200 --ranks 2
    python3 torch_ddp.py ... --backend loom
    python3 torch_ddp.py ... --no-ddp          (one process, no communication)
    python3 torch_ddp.py --fsdp --layers 1024,1024,1024,1024,1024,1024,1024,1024,1024,1024 ...
--fsdp shards with FSDP2 (PyTorch 2.x: fully_shard on each Linear and on the model, a 1-D CPU
mesh) instead of DDP; --alloc-from-pg also takes FSDP2's all-gather and reduce-scatter buffers
from the process group (set_allocate_memory_from_process_group_for_comm: with loom, tensors in
the group's shared window; the row's backend reads "<backend>-alloc").
"""
import argparse
import itertools
import os
import statistics
import sys

sys.dont_write_bytecode = True  # keeps the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common  # noqa: E402

torch_common.one_thread_environment()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402


def make_mlp(widths):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def shard(model, alloc_from_pg):
    """FSDP2 over all ranks: each Linear, then the model; buffers from the process group if
    asked."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if alloc_from_pg:
        for module in model.modules():
            if hasattr(module, "set_allocate_memory_from_process_group_for_comm"):
                module.set_allocate_memory_from_process_group_for_comm(True)
    return model


def wrap(model, args):
    if args.no_ddp:
        return model
    if args.fsdp:
        return shard(model, args.alloc_from_pg)
    return nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)


def worker(rank, args, port, results):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    widths = [int(w) for w in args.layers.split(",")]
    world = 1 if args.no_ddp else args.ranks
    if not args.no_ddp:
        torch_common.init_group(args.backend, rank, world, port)
    # Synthetic, teacher-labelled data, generated once (as loom-train does).
    teacher = make_mlp([widths[0], 64, widths[-1]])
    with torch.no_grad():
        x_all = torch.randn(args.samples, widths[0])
        y_all = teacher(x_all).argmax(dim=1)
    model = wrap(make_mlp(widths), args)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    per_rank = args.samples // world
    b = args.batch_size
    steps = itertools.count()

    def step():
        i = next(steps)
        start = rank * per_rank + (i * b) % max(1, per_rank - b)
        x, y = x_all[start:start + b], y_all[start:start + b]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # DDP all-reduces the buckets during backward and waits at its end
        opt.step()

    mine = torch_common.time_each_us(step, args.steps, args.warmup)
    elapsed = torch.tensor([mine.sum().item() / 1e6], dtype=torch.float64)  # the timed steps
    slowest = mine.tolist()
    if world > 1:
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        slowest = torch_common.slowest_per_call(mine, rank, world)
        dist.destroy_process_group()
    if rank == 0:
        results.put((elapsed.item(), world, statistics.median(slowest) / 1e3))


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
    p.add_argument("--fsdp", action="store_true")
    p.add_argument("--alloc-from-pg", action="store_true")
    p.add_argument("--tries", type=int, default=1, help="launches, each on a new port")
    args = p.parse_args()
    nprocs = 1 if args.no_ddp else args.ranks
    elapsed, world, median_ms = torch_common.launch(worker, args, nprocs, "spawn", args.tries,
                                                    "torch_ddp")
    rate = args.steps * args.batch_size * world / elapsed
    name = "alone" if args.no_ddp else args.backend + ("-alloc" if args.alloc_from_pg else "")
    print(f"{name},{world},{rate:.1f},{1e3 * elapsed / args.steps:.3f},{median_ms:.3f}")


if __name__ == "__main__":
    main()
