#!/usr/bin/env python3
"""An ordinary FSDP2 training script (PyTorch 2.x): torchrun's environment, a CPU DeviceMesh,
fully_shard on each layer and on the model, AdamW. Loom shows only in the backend's name.

    torchrun --standalone --nproc-per-node 2 fsdp_train.py --backend loom --out params.pt
    torchrun --standalone --nproc-per-node 4 fsdp_train.py --backend loom --mesh 2x2 --out p.pt

--mesh 2x2 trains on a 2-D mesh: replicated over the first dimension and sharded over the second
(HSDP: DDP across, FSDP within). --alloc-from-pg takes the all-gather and reduce-scatter
buffers from the process group (set_allocate_memory_from_process_group_for_comm: with loom, tensors in the
group's shared window). Rank 0 saves the full parameters to --out and prints one line:
    trained <backend> <world size> <steps> <sum of the parameters>
"""
import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="loom")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--mesh", default="", help="RxS: a 2-D mesh, replicated R ways, sharded S")
    p.add_argument("--alloc-from-pg", action="store_true")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    p.add_argument("--out", default="")
    args = p.parse_args()
    if args.backend == "loom":
        import loom_torch  # noqa: F401  (an installed wheel registers the backend by itself)

    torch.set_num_threads(1)
    torch.set_default_dtype(getattr(torch, args.dtype))
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.mesh:
        replicas, shards = (int(n) for n in args.mesh.split("x"))
        mesh = init_device_mesh("cpu", (replicas, shards), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))

    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.width, args.width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(args.width, 4))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if args.alloc_from_pg:
        for module in model.modules():
            if hasattr(module, "set_allocate_memory_from_process_group_for_comm"):
                module.set_allocate_memory_from_process_group_for_comm(True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    generator = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    for _ in range(args.steps):
        x = torch.randn(args.batch_size, args.width, generator=generator)
        y = torch.randint(0, 4, (args.batch_size,), generator=generator)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    if args.alloc_from_pg and args.backend == "loom":
        window = dist.group.WORLD._get_backend(torch.device("cpu"))._pool()
        assert window is not None, "FSDP2 took no buffer from the process group"
    full = {name: t.full_tensor() for name, t in model.state_dict().items()}
    if rank == 0:
        if args.out:
            torch.save(full, args.out)
        total = sum(float(t.double().sum()) for t in full.values())
        print(f"trained {args.backend} {world} {args.steps} {total:.9f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
