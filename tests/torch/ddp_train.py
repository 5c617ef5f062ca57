#!/usr/bin/env python3
"""An ordinary PyTorch DDP training script: the environment of its launcher (torchrun, loomrun),
env:// rendezvous, an MLP, SGD with momentum, a DistributedSampler with set_epoch. Loom shows only
in the import that registers the backend and in the backend's name.

    torchrun --standalone --nproc-per-node 2 ddp_train.py --backend loom --out params.pt
    loomrun --nproc-per-node 2 /usr/bin/python3 ddp_train.py --backend loom --out params.pt

--dtype float64 trains the same model and data in double precision (launch_test.py compares
backends that way).

Rank 0 saves the final parameters to --out and prints one line:
    trained <backend> <world size> <steps> <sum of the parameters>
"""
import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="loom")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--out", default="")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = p.parse_args()

    torch.set_num_threads(1)
    torch.set_default_dtype(getattr(torch, args.dtype))
    if args.backend == "loom":
        import loom_torch  # noqa: F401  registers the backend "loom"; gloo's runs go without it
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(1024, 32, generator=generator)
    labels = (inputs[:, :10].sum(dim=1) > 0).long() + 2 * (inputs[:, 10:20].sum(dim=1) > 0).long()
    dataset = TensorDataset(inputs, labels)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 4))
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(ddp(x), y).backward()
            optimizer.step()
            step += 1
            if step == args.steps:
                break
        epoch += 1

    if rank == 0:
        if args.out:
            torch.save(model.state_dict(), args.out)
        total = sum(float(t.double().sum()) for t in model.state_dict().values())
        print(f"trained {args.backend} {world} {step} {total:.9f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
