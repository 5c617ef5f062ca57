#!/usr/bin/env python3
"""Futures whose callbacks wait for more of the group's collectives, as DDP's communication hooks
do (PowerSGD's waits on two all-reduces inside its callbacks), on the loom backend: they finish,
with exact values, and DDP trained with each of PyTorch's hooks, and under Join with uneven
inputs, ends with the parameters gloo's ends with. Each test's ranks are forked processes joined
through a FileStore.

    PYTHONPATH=build/python python3 comm_hooks_test.py -v [-k NAME]
"""
import contextlib
import functools
import os
import tempfile
import unittest

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook  # noqa: E402
from torch.distributed.algorithms.join import Join  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import loom_torch  # noqa: E402,F401
from forked_ranks import run_ranks  # noqa: E402


def all_reduce_future(value):
    t = torch.full((1000,), value, dtype=torch.int64)
    return dist.all_reduce(t, async_op=True).get_future()


def callbacks_wait_for_collectives(rank, world):
    total = world * (world + 1) // 2  # the sum of rank + 1 over the ranks

    # One level: the callback waits, on its future, for an all-reduce it issues.
    def inner(fut):
        first = fut.value()[0]
        second = all_reduce_future(int(first[0])).wait()[0]
        return second

    got = all_reduce_future(rank + 1).then(inner).wait()
    assert torch.equal(got, torch.full((1000,), world * total, dtype=torch.int64)), got[:4]

    # Two levels, and an operation issued before the callback runs that it then waits for.
    early = all_reduce_future(1)
    pending = {}

    def outer(fut):
        pending["late"] = all_reduce_future(int(fut.value()[0][0]))
        return pending["late"].then(lambda f: early.wait()[0] + f.wait()[0]).wait()

    got = all_reduce_future(rank + 1).then(outer).wait()
    assert torch.equal(got, torch.full((1000,), world + world * total, dtype=torch.int64)), got[:4]
    # Blocking collectives after the callbacks: the group is in step on every rank.
    t = torch.tensor([rank])
    dist.all_reduce(t)
    assert int(t) == world * (world - 1) // 2


# PyTorch 1.x registers the bf16 hook with NCCL only. (batched_powerSGD_hook fails on CPU in
# PyTorch 2.15 itself, under gloo as well: its Q is 2-dimensional where _orthogonalize asks 3.)
HOOKS = ("none", "fp16", "powersgd", "join") if torch.__version__ < "2" else (
    "none", "fp16", "bf16", "powersgd", "join")


def register(model, hook):
    if hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                            start_powerSGD_iter=2)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def train_with_hooks(rank, world, out_dir):
    params = {}
    for hook in HOOKS:
        torch.manual_seed(0)
        # One bucket: PowerSGD's callbacks issue all-reduces, and with several buckets the ranks
        # would issue them in different orders (gloo aborts on the mismatch; Loom raises it).
        module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                     torch.nn.Linear(64, 8))
        model = DistributedDataParallel(module)
        register(model, hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.Generator().manual_seed(rank)
        steps = 5 + (rank if hook == "join" else 0)  # uneven inputs under Join
        with Join([model]) if hook == "join" else contextlib.nullcontext():
            for _ in range(steps):
                opt.zero_grad()
                model(torch.randn(16, 32, generator=data)).pow(2).mean().backward()
                opt.step()
        flat = torch.cat([p.detach().flatten() for p in module.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        assert all(torch.equal(gathered[0], g) for g in gathered), f"{hook}: ranks differ"
        params[hook] = flat
    if rank == 0:
        torch.save(params, os.path.join(out_dir, "params.pt"))


class CallbacksThatWaitForTheGroup(unittest.TestCase):
    def test_callbacks_wait_for_collectives_on_their_futures(self):
        run_ranks(callbacks_wait_for_collectives)

    def test_ddp_hooks_and_join_end_as_with_gloo(self):
        with tempfile.TemporaryDirectory() as loom_dir, tempfile.TemporaryDirectory() as gloo_dir:
            run_ranks(functools.partial(train_with_hooks, out_dir=loom_dir), world=2)
            run_ranks(functools.partial(train_with_hooks, out_dir=gloo_dir), world=2,
                      backend="gloo")
            loom = torch.load(os.path.join(loom_dir, "params.pt"))
            gloo = torch.load(os.path.join(gloo_dir, "params.pt"))
        for hook in HOOKS:
            with self.subTest(hook=hook):
                torch.testing.assert_close(loom[hook], gloo[hook], rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    unittest.main()
