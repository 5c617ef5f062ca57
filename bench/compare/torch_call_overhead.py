#!/usr/bin/env python3
"""Per-call cost of the binding: dist.all_reduce of one float on a group of one process (no
communication), through
  extension  loom_torch's C++ ProcessGroup (what the package is)
  python     a Python ProcessGroup in front of that same C++ group: the least a Python binding
             over a C API adds (its allreduce in Python, a torch Future per call for the
             comm hooks), since the C call underneath is the same
  gloo       ProcessGroupGloo, for scale
Prints one line per binding: <binding>,<mean us per call>,<median us of calls timed one by one>
    PYTHONPATH=build/python python3 torch_call_overhead.py [--calls 20000]
"""
import argparse
import os
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keeps the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common  # noqa: E402

torch_common.one_thread_environment()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import loom_torch  # noqa: E402


class PythonGroup:
    """The call path of a ProcessGroup written in Python."""

    def __init__(self, inner):
        self.inner = inner

    def rank(self):
        return self.inner.rank()

    def size(self):
        return self.inner.size()

    def allreduce(self, tensors, opts=None):
        if any(not t.is_contiguous() for t in tensors):
            raise ValueError("allreduce: non-contiguous tensor")
        work = self.inner.allreduce(tensors, opts)
        future = torch.futures.Future()
        work.wait()
        future.set_result(tensors)
        return work


def per_call_us(group, calls):
    """(mean, median) us per call: the mean over a loop of `calls`, then the median over as many
    calls timed one by one (torch_common.time_each_us, per_op.hpp's method)."""
    t = torch.ones(1)
    for _ in range(calls // 10):
        dist.all_reduce(t, group=group)
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(t, group=group)
    mean = (time.perf_counter() - start) / calls * 1e6
    each = torch_common.time_each_us(lambda: dist.all_reduce(t, group=group), calls, 0)
    return mean, each.median().item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=20000)
    args = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("loom", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        loom_group = dist.new_group([0])
        gloo_group = dist.new_group([0], backend="gloo")
        for name, group in (("extension", loom_group), ("python", PythonGroup(loom_group)),
                            ("gloo", gloo_group)):
            mean, median = per_call_us(group, args.calls)
            print(f"{name},{mean:.2f},{median:.2f}")
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
