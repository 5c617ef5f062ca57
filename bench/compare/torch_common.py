"""What the PyTorch drivers of the comparison share: starting their ranks (fresh processes on
loopback, a new port for each try), the backend's registration, and the timing method of
per_op.hpp (warm-up calls, then each rank times every call on its own with no barrier in the loop;
rank 0 gathers the per-call arrays; a call's time is its slowest rank's; the median over calls).
"""
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# A rank's BLAS and OpenMP use one thread, as the drivers set before importing torch.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def one_thread_environment():
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_group(backend, rank, world, port):
    """The default group of `world` ranks on 127.0.0.1:port (loom_torch imported for loom)."""
    torch.set_num_threads(1)
    if backend == "loom":
        import loom_torch  # noqa: F401  registers the backend
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=world)


def launch(worker, args, nprocs, start_method="spawn", tries=3, name="torch"):
    """Runs worker(rank, args, port, results) in `nprocs` fresh processes and returns what rank 0
    put on `results`. The port is free when it is picked, not held: another process can take it
    before rank 0's store binds it. A launch that fails starts again on a new port, `tries` times
    in all, each failure said on stderr; the last one is raised."""
    for attempt in range(1, tries + 1):
        try:
            ctx = mp.get_context(start_method)
            results = ctx.SimpleQueue()
            mp.start_processes(worker, args=(args, free_port(), results), nprocs=nprocs,
                               join=True, start_method=start_method)
            return results.get()
        except Exception as e:  # a worker's exception or exit code (torch.multiprocessing)
            if attempt == tries:
                raise
            print(f"{name}: launch {attempt} failed ({e}); again on a new port", file=sys.stderr)
    return None


def time_each_us(call, iters, warmup, before=None):
    """call() `warmup` times untimed, then `iters` times: each timed call's duration (us), as a
    float64 tensor. before() runs ahead of every call, untimed."""
    for _ in range(warmup):
        if before:
            before()
        call()
    mine = torch.zeros(max(1, iters), dtype=torch.float64)
    for i in range(mine.numel()):
        if before:
            before()
        t0 = time.perf_counter_ns()
        call()
        mine[i] = (time.perf_counter_ns() - t0) / 1e3
    return mine


def slowest_per_call(mine, rank, world):
    """Every rank's per-call times gathered on rank 0: each call's slowest rank (a list), on
    rank 0; None on the others."""
    gathered = [torch.zeros_like(mine) for _ in range(world)] if rank == 0 else None
    dist.gather(mine, gathered, dst=0)
    if rank != 0:
        return None
    return torch.stack(gathered).max(dim=0).values.tolist()


def median_of_slowest(mine, rank, world):
    """The median over calls of each call's slowest rank (us), on rank 0; None on the others."""
    slowest = slowest_per_call(mine, rank, world)
    return None if slowest is None else statistics.median(slowest)
