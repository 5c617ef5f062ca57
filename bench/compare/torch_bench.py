#!/usr/bin/env python3
"""torch.distributed's side of the comparison: one collective at one or more sizes, timed by the
method of per_op.hpp (torch_common.py: warm-up calls, then each rank times every call, no
barrier; rank 0 gathers the arrays; a call's time is its slowest rank's; the median over calls).
Starts its own ranks (fresh processes, forked after torch is imported) on loopback TCP. Prints one
CSV row per size:
  torch-<backend>,<op>,<ranks>,<bytes>,<time_us>,<busbw_gbps>,<timed calls>
    python3 torch_bench.py --op allreduce|allgather|alltoall|sendrecv --ranks 2 --bytes 1M -n 20
    python3 torch_bench.py --backend loom --alloc --op allgather --bytes 1M,64M ...
Sizes are the whole buffer, as loom-perf's: for allgather (all_gather_into_tensor) the output, for
alltoall each rank's buffer, for sendrecv each message. sendrecv is a pipeline's step around the
ring of ranks: each rank posts the irecv of the next step's message from its left before it
isends this step's to its right and waits for both (a prefetch that keeps a receive always
posted); busbw is the message's size over the step's time. --backend loom needs loom_torch on
PYTHONPATH; --alloc takes the tensors from the group's allocate_tensor (PyTorch 2.15; loom's
shared window: the row's backend reads "loom-alloc"). -n and -w are every size's timed and
warm-up calls; with --iter-bytes B a size runs B / size timed calls instead, at least 3 and at
most -n (a tenth of them to warm up, at least 2, at most -w). --fresh-inputs rewrites the input
before every call, untimed (per_op.hpp's rewrite_lines). With --describe, rank 0 prints the
backend's description on stderr. A launch that fails starts again on a new port, --tries times in
all (3).
"""
import argparse
import os
import sys

sys.dont_write_bytecode = True  # keeps the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common  # noqa: E402

torch_common.one_thread_environment()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

FACTOR = {"allreduce": lambda n: 2.0 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
          "alltoall": lambda n: (n - 1) / n, "sendrecv": lambda n: 1.0}


def buffers(op, size, n, make):
    """(input, output, elements of the whole buffer) for one call of `op` on `size` bytes."""
    unit = 1 if op in ("allreduce", "sendrecv") else n  # the others': blocks, one per rank
    count = max(1, size // 4 // unit) * unit
    if op == "allreduce":  # in place
        out = make(count)
        return out, out, count
    if op == "allgather":
        return make(count // n), make(count), count
    if op == "sendrecv":  # out: the two receive buffers, one for this step, one for the next
        return make(count), [make(count), make(count)], count
    return make(count), make(count), count


def pipeline_step(inp, out):
    """sendrecv's call, and what matches its last irecv once the timed calls are done."""
    rank, n = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % n, (rank - 1) % n
    state = {"step": 0, "recv": dist.irecv(out[0], left)}

    def call():
        step = state["step"]
        ahead = dist.irecv(out[(step + 1) % 2], left)
        sent = dist.isend(inp, right)
        state["recv"].wait()
        sent.wait()
        state["recv"], state["step"] = ahead, step + 1

    def finish():
        dist.isend(inp, right).wait()
        state["recv"].wait()
    return call, finish


def maker(args):
    if not args.alloc:
        return lambda count: torch.ones(count, dtype=torch.float32)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))

    def make(count):
        t = backend.allocate_tensor(count, dtype=torch.float32, device=torch.device("cpu"))
        return t.fill_(1.0)
    return make


def measure(op, size, n, args, make):
    inp, out, count = buffers(op, size, n, make)
    finish = None
    if op == "sendrecv":
        call, finish = pipeline_step(inp, out)
    elif op == "allreduce":
        def call():
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
    elif op == "allgather":
        def call():
            dist.all_gather_into_tensor(out, inp)
    else:
        def call():
            dist.all_to_all_single(out, inp)

    def before():
        inp.mul_(1.0)  # writes every element with the value it holds

    iters, warmup = args.iters, args.warmup
    if args.iter_bytes:  # about iter_bytes' worth of calls, at least 3 and at most -n
        iters = max(3, min(args.iters, args.iter_bytes // size))
        warmup = min(args.warmup, max(2, iters // 10))
    mine = torch_common.time_each_us(call, iters, warmup, before if args.fresh_inputs else None)
    if finish is not None:
        finish()
    return count * 4, mine


def worker(rank, args, port, results):
    n = args.ranks
    torch_common.init_group(args.backend, rank, n, port)
    if args.describe and rank == 0 and args.backend == "loom":
        import loom_torch
        print(f"torch_bench: {loom_torch.describe()}", file=sys.stderr)
    make = maker(args)
    rows = []
    for size in args.bytes:
        nbytes, mine = measure(args.op, size, n, args, make)
        us = torch_common.median_of_slowest(mine, rank, n)
        if rank == 0:
            busbw = nbytes / (us * 1e-6) / 1e9 * FACTOR[args.op](n)
            name = args.backend + ("-alloc" if args.alloc else "")
            rows.append(f"torch-{name},{args.op},{n},{nbytes},{us:.3f},{busbw:.4f},{mine.numel()}")
    if rank == 0:
        results.put(rows)
    dist.destroy_process_group()


def size_list(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    out = []
    for s in text.replace(",", " ").split():
        s = s.upper().rstrip("B").rstrip("I")
        mul = units.get(s[-1:], 1)
        out.append(int(float(s[:-1] if mul > 1 else s) * mul))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="gloo")
    p.add_argument("--op", choices=sorted(FACTOR), default="allreduce")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--bytes", type=size_list, default=[8], help="sizes: 8,1M,64M")
    p.add_argument("--alloc", action="store_true")
    p.add_argument("--fresh-inputs", action="store_true")
    p.add_argument("--describe", action="store_true")
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("--iter-bytes", type=int, default=0,
                   help="each size runs iter_bytes / size timed calls, at least 3 and at most -n "
                        "(a tenth of them to warm up, at least 2 and at most -w); 0: -n and -w")
    p.add_argument("--tries", type=int, default=3, help="launches, each on a new port")
    args = p.parse_args()
    for row in torch_common.launch(worker, args, args.ranks, "fork", args.tries, "torch_bench"):
        print(row)


if __name__ == "__main__":
    main()
