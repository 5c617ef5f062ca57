#!/usr/bin/env python3
"""PyTorch 2.15's Backend API on the loom backend, one test per method: options, split_group (and
new_group's split when the default group is bound to a device), shrink_group, abort and its
hooks, shutdown, set_timeout, get_error, coalescing, the *_single collectives and their
coalesced forms, gather_single, allocate_tensor and mem_allocator. Each test runs its ranks as
forked processes joined through a FileStore, and checks exact values (integers, or floats that
are small integers).

    PYTHONPATH=build/python python3 backend_api_test.py -v [-k NAME]
"""
import datetime
import os
import signal
import sys
import tempfile
import threading
import time
import unittest
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import loom_torch  # noqa: E402
from forked_ranks import run_ranks  # noqa: E402

ErrorType = torch._C._distributed_c10d.ErrorType

CPU = torch.device("cpu")


def backend(group=None):
    group = group or dist.distributed_c10d._get_default_group()
    return group._get_backend(CPU)


# ---- the tests' rank functions (module level: the forked ranks run them) -----------------------

def options_are_loom(rank, world):
    options = backend().options
    assert isinstance(options, loom_torch.Options), type(options)
    assert options.backend == "loom"
    assert options._timeout == datetime.timedelta(seconds=60), options._timeout
    sub = dist.new_group([0, 2])
    if rank in (0, 2):
        assert list(backend(sub).options.global_ranks_in_group) == [0, 2]
    custom = dist.new_group([0, 1, 2], pg_options=loom_torch.Options(algorithm="ring"))
    assert backend(custom).options.algorithm == "ring"
    t = torch.full((5,), rank + 1)
    dist.all_reduce(t, group=custom)
    assert t.tolist() == [6] * 5, t


def split_groups(rank, world):
    assert backend().supports_splitting
    # [[2, 0], [1]]: 2 is rank 0 of its child, 0 rank 1 (the order given is kept).
    child = dist.split_group(split_ranks=[[2, 0], [1]])
    assert child is not None and child != dist.GroupMember.NON_GROUP_MEMBER
    expected_rank = {2: 0, 0: 1, 1: 0}[rank]
    assert child.rank() == expected_rank, (rank, child.rank())
    t = torch.full((3,), 10 * (rank + 1))
    dist.all_reduce(t, group=child)
    assert t.tolist() == ([40] * 3 if rank != 1 else [20] * 3), t
    assert list(backend(child).options.global_ranks_in_group) == ([2, 0] if rank != 1 else [1])
    # A split leaving rank 1 out of every group.
    other = dist.split_group(split_ranks=[[0, 2]])
    assert (other == dist.GroupMember.NON_GROUP_MEMBER) == (rank == 1)


def new_group_splits_bound_group(rank, world):
    # A default group bound to a device: new_group splits it (members join the child, the
    # others take part through perform_nocolor_split).
    dist.destroy_process_group()
    store = dist.FileStore(os.environ["LOOM_TEST_STORE2"], world)
    dist.init_process_group("loom", store=store, rank=rank, world_size=world,
                            device_id=torch.device("cpu", 0))
    group = dist.new_group([0, 1])
    if rank < 2:
        t = torch.tensor([rank + 1])
        dist.all_reduce(t, group=group)
        assert t.item() == 3
    # new_group's timeout bounds the child; pg_options are laid over the parent's options.
    given = loom_torch.Options(algorithm="ring")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        timed = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=42), pg_options=given)
    if rank < 2:
        # pg_options' own timeout (the default) is overridden: warned of, as PyTorch does NCCL's.
        assert any("pg_options' timeout" in str(w.message) for w in caught), \
            [str(w.message) for w in caught]
        options = backend(timed).options
        assert options is not given  # the group's own: PyTorch writes its name and ranks there
        assert options._timeout == datetime.timedelta(seconds=42), options._timeout
        assert options.algorithm == "ring", options.algorithm
        assert list(options.global_ranks_in_group) == [0, 1]
        t = torch.tensor([rank + 1])
        dist.all_reduce(t, group=timed)
        assert t.item() == 3
    dist.barrier()


def shrink_default_group(rank, world):
    assert backend().supports_shrinking
    t = torch.ones(2)
    dist.all_reduce(t)
    if rank == 1:  # the rank that goes: it takes no part in the shrink
        dist.destroy_process_group()
        return
    start = time.monotonic()
    # Shrink keeps the group's settings and takes pg_options' timeout alone: the options it
    # reports say so (it warns of the algorithm it does not apply).
    asked = loom_torch.Options(timeout=datetime.timedelta(seconds=33), algorithm="ring")
    group = dist.shrink_group([1], pg_options=asked)
    assert time.monotonic() - start < 20, "shrink waited for the excluded rank"
    assert group.size() == 2 and dist.get_world_size() == 2
    t = torch.full((4,), rank)
    dist.all_reduce(t)
    assert t.tolist() == [2] * 4, t  # ranks 0 and 2
    options = backend().options
    assert list(options.global_ranks_in_group) == [0, 2]
    assert options._timeout == datetime.timedelta(seconds=33), options._timeout
    assert options.algorithm is None, options.algorithm


def shrink_after_abort(rank, world):
    if rank == 2:
        time.sleep(1)  # the others are in an all-reduce it never joins
        os.kill(os.getpid(), signal.SIGKILL)
    t = torch.ones(1)
    work = dist.all_reduce(t, async_op=True)
    try:
        work.wait()
        raise AssertionError("the all-reduce finished without rank 2")
    except RuntimeError:
        pass
    group = dist.shrink_group([2], shrink_flags=dist.distributed_c10d.SHRINK_ABORT)
    t = torch.full((3,), rank + 1)
    dist.all_reduce(t, group=group)
    assert t.tolist() == [3] * 3


def abort_with_hooks(rank, world):
    be = backend()
    assert be.supports_abort_hooks
    called = []
    be.register_abort_hook(7, lambda: called.append(7))
    be.register_abort_hook(8, lambda: called.append(8))
    be.unregister_abort_hook(8)
    dist.barrier()
    if rank == 0:
        be.abort()
        assert called == [7], called
        assert be.get_error() == ErrorType.COMM_ERROR, be.get_error()
        try:
            dist.all_reduce(torch.ones(1))
            raise AssertionError("a call after abort() went through")
        except loom_torch.Aborted:
            pass
        return
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1))
        raise AssertionError("the all-reduce finished without rank 0")
    except loom_torch.PeerError:
        pass
    assert time.monotonic() - start < 20, "the peers waited for their timeout, not the abort"
    assert be.get_error() == ErrorType.REMOTE_ERROR, be.get_error()
    assert called == [7], called  # a group that breaks runs its hooks too


def set_timeout_and_error(rank, world):
    be = backend()
    assert be.get_error() == ErrorType.SUCCESS
    dist.all_reduce(torch.ones(1))  # connected: what follows waits for data alone
    be.set_timeout(datetime.timedelta(seconds=1))
    assert be.options._timeout == datetime.timedelta(seconds=1)
    if rank != 0:
        time.sleep(8)
        return
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1))
        raise AssertionError("the all-reduce finished while its peers slept")
    except loom_torch.LoomTimeoutError as e:
        assert "1 s timeout" in str(e), e  # the new timeout, not the group's 60 s
    # Loom gives up after 1 s; PyTorch's own failure handling (its flight recorder's dump)
    # adds seconds on a loaded machine: well before the peers wake, all the same.
    assert time.monotonic() - start < 7, time.monotonic() - start
    assert be.get_error() == ErrorType.TIMEOUT, be.get_error()


def shutdown_ends_group(rank, world):
    be = backend()
    t = torch.ones(2)
    work = dist.all_reduce(t, async_op=True)
    be.shutdown()  # what was issued finishes first
    assert work.is_completed() and t.tolist() == [3, 3], t
    try:
        dist.all_reduce(torch.ones(1))
        raise AssertionError("a call after shutdown() went through")
    except RuntimeError:
        pass


def coalesced_point_to_point(rank, world):
    assert backend().supports_coalescing
    right, left = (rank + 1) % world, (rank - 1) % world
    got = [torch.zeros(3, dtype=torch.int64) for _ in range(2)]
    ops = [dist.P2POp(dist.irecv, got[0], left), dist.P2POp(dist.irecv, got[1], right),
           dist.P2POp(dist.isend, torch.full((3,), rank), right),
           dist.P2POp(dist.isend, torch.full((3,), 100 + rank), left)]
    works = dist.batch_isend_irecv(ops)
    assert len(works) == 1  # one Work for the batch
    works[0].wait()
    assert got[0].tolist() == [left] * 3 and got[1].tolist() == [100 + right] * 3, got


def pipelined_point_to_point(rank, world):
    """A pipeline's steps, the next irecv posted ahead of each wait (each send and receive issued
    at once by the thread that submits it), exact values; then an isend's future completes with
    nobody waiting for it, and the last receive posted ahead gets its message."""
    right, left = (rank + 1) % world, (rank - 1) % world
    got = [torch.zeros(2, dtype=torch.int64) for _ in range(2)]
    current = dist.irecv(got[0], left)
    for step in range(200):
        ahead = dist.irecv(got[(step + 1) % 2], left)
        sent = dist.isend(torch.tensor([step, 1000 * rank + step]), right)
        current.wait()
        assert got[step % 2].tolist() == [step, 1000 * left + step], (step, got[step % 2])
        sent.wait()
        current = ahead
    done = threading.Event()
    future = dist.isend(torch.tensor([-1, -2]), right).get_future()
    future.then(lambda f: done.set())
    assert done.wait(10), "an isend's future did not complete with nobody waiting for it"
    current.wait()
    assert got[0].tolist() == [-1, -2], got[0]


def coalesced_collectives(rank, world):
    a, b = torch.full((4,), rank), torch.full((2,), 10 * rank)
    with dist._coalescing_manager(device=CPU, async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
        dist.broadcast(c := torch.full((3,), rank), src=1)
    cm.wait()
    assert a.tolist() == [3] * 4 and b.tolist() == [30] * 2 and c.tolist() == [1] * 3
    # The fast path: PyTorch hands the backend one *_coalesced call.
    outs = [torch.zeros(world * 2, dtype=torch.int64), torch.zeros(world, dtype=torch.int64)]
    with dist._coalescing_manager():
        dist.all_gather_into_tensor(outs[0], torch.full((2,), rank))
        dist.all_gather_into_tensor(outs[1], torch.full((1,), 5 + rank))
    assert outs[0].tolist() == [0, 0, 1, 1, 2, 2] and outs[1].tolist() == [5, 6, 7], outs
    parts = [torch.zeros(2, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)]
    with dist._coalescing_manager():
        dist.reduce_scatter_tensor(parts[0], torch.arange(2 * world) + rank)
        dist.reduce_scatter_tensor(parts[1], torch.arange(world))
    assert parts[0].tolist() == [6 * rank + 3, 6 * rank + 6], parts  # sum over r of x + r
    assert parts[1].tolist() == [3 * rank], parts


def single_collectives(rank, world):
    out = torch.zeros(world * 2, dtype=torch.int64)
    dist.all_gather_single(out, torch.full((2,), rank))
    assert out.tolist() == [0, 0, 1, 1, 2, 2]
    part = torch.zeros(2, dtype=torch.int64)
    dist.reduce_scatter_single(part, torch.arange(2 * world))
    assert part.tolist() == [3 * 2 * rank, 3 * (2 * rank + 1)], part
    gathered = torch.zeros(world * 3, dtype=torch.int64) if rank == 2 else None
    dist.gather_single(torch.full((3,), rank + 1), gathered, dst=2)
    if rank == 2:
        assert gathered.tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3], gathered
    alltoall = torch.zeros(world, dtype=torch.int64)
    dist.all_to_all_single(alltoall, torch.arange(world) + 10 * rank)
    assert alltoall.tolist() == [rank, 10 + rank, 20 + rank], alltoall


def tensors_in_windows(rank, world):
    be = backend()
    assert be.supports_tensor_alloc(CPU)
    assert not be.supports_tensor_alloc(torch.device("cuda", 0))
    a = be.allocate_tensor(1 << 16, dtype=torch.float32, device=CPU)
    b = be.allocate_tensor(3, dtype=torch.int64, device=CPU)
    assert a.shape == (1 << 16,) and b.dtype == torch.int64
    assert be._in_window(a) and be._in_window(b)
    a.fill_(rank + 1)
    dist.all_reduce(a)
    assert bool((a == 6).all())
    out = be.allocate_tensor(world * 3, dtype=torch.int64, device=CPU)
    b.fill_(rank)
    dist.all_gather_into_tensor(out, b)
    assert out.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2], out
    capacity, used = be._pool()
    assert used >= a.numel() * 4 and capacity >= used
    del a, b, out
    assert be._pool()[1] == 0  # blocks go back to the window with their tensors
    raw = be.mem_allocator.bytes(4096)
    assert raw.numel() == 4096 and be._in_window(raw)


class BackendApi(unittest.TestCase):
    def test_options(self):
        run_ranks(options_are_loom)

    def test_split_group(self):
        run_ranks(split_groups)

    def test_new_group_splits_a_bound_group(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["LOOM_TEST_STORE2"] = os.path.join(tmp, "store2")
            run_ranks(new_group_splits_bound_group)

    def test_shrink_group(self):
        run_ranks(shrink_default_group)

    def test_shrink_group_after_abort(self):
        run_ranks(shrink_after_abort, timeout_s=30, killed=(2,))

    def test_abort_and_hooks(self):
        run_ranks(abort_with_hooks)

    def test_set_timeout_and_get_error(self):
        run_ranks(set_timeout_and_error)

    def test_shutdown(self):
        run_ranks(shutdown_ends_group)

    def test_coalesced_point_to_point(self):
        run_ranks(coalesced_point_to_point)

    def test_pipelined_point_to_point(self):
        run_ranks(pipelined_point_to_point)

    def test_coalesced_collectives(self):
        run_ranks(coalesced_collectives)

    def test_single_collectives(self):
        run_ranks(single_collectives)

    def test_allocate_tensor(self):
        run_ranks(tensors_in_windows)


if __name__ == "__main__":
    if not loom_torch.BACKEND_API:
        print("PyTorch", torch.__version__, "has not the 2.15 Backend API: nothing to test")
        sys.exit(77)
    unittest.main()
