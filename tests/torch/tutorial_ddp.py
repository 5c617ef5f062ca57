#!/usr/bin/env python3
"""PyTorch's "Getting Started with Distributed Data Parallel" example as torchrun runs it (the
tutorial's elastic form): a toy model, DDP, SGD, torchrun's environment. Only the backend's name
is taken from the command line; nothing imports loom_torch (an installed wheel registers the
backend through its entry point).

    torchrun --standalone --nproc-per-node 2 tutorial_ddp.py loom OUT.pt
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(backend, out):
    dist.init_process_group(backend)
    rank = dist.get_rank()
    print(f"Start running basic DDP example on rank {rank}.")
    torch.manual_seed(0)
    model = ToyModel()
    ddp_model = DDP(model)

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)

    torch.manual_seed(1 + rank)
    for _ in range(20):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        labels = torch.randn(20, 5)
        loss_fn(outputs, labels).backward()
        optimizer.step()
    if rank == 0:
        torch.save(model.state_dict(), out)
    dist.destroy_process_group()
    print(f"Finished running basic DDP example on rank {rank}.")


if __name__ == "__main__":
    demo_basic(sys.argv[1], sys.argv[2])
