#!/usr/bin/env python3
"""Per-call cost of the binding: dist.all_reduce of one float on a group of one process (no
communication), through
  extension  loom_torch's C++ ProcessGroup (what the package is)
  python     a Python ProcessGroup in front of that same C++ group: the least a Python binding
             over a C API adds (its allreduce in Python, a torch Future per call for the
             comm hooks), since the C call underneath is the same
  gloo       ProcessGroupGloo, for scale
Prints one line per binding: <binding>,<mean us per call>
    PYTHONPATH=build/python python3 torch_call_overhead.py [--calls 20000]
"""
import argparse
import os
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

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
    t = torch.ones(1)
    for _ in range(calls // 10):
        dist.all_reduce(t, group=group)
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - start) / calls * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=20000)
    args = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("loom", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        loom_group = dist.new_group([0])
        gloo_group = dist.new_group([0], backend="gloo")
        print(f"extension,{per_call_us(loom_group, args.calls):.2f}")
        print(f"python,{per_call_us(PythonGroup(loom_group), args.calls):.2f}")
        print(f"gloo,{per_call_us(gloo_group, args.calls):.2f}")
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
