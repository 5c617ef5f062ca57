#!/usr/bin/env python3
"""Loom against Gloo (every algorithm), OpenMPI (vader and tcp) and PyTorch's gloo backend, all
timed alike (bench/compare/per_op.hpp), in one run; and the no-cliff check of Loom's sweeps.

  compare.py run    [options]   one table per configuration, with ratios and the machine's limits,
                                and the targets: a cell is met when its median meets the target
                                and no repetition is below 1.0x (harness/rules.py)
  compare.py cliffs [options]   Loom over 64 KiB..64 MiB: fails where its busbw over the memory
                                bound at the same size falls more than 15% from one size to the
                                next (harness/cliffs.py)
  compare.py report RESULTS.csv [--cliffs]   the tables again from a run's measurements

Every configuration (library, transport, ranks, op, size) runs in fresh processes (the cliff
check runs Loom's whole sweep in one launch per transport and rank count, unless
--launch-per-size); the whole plan is repeated --reps times (a figure needs 3). The machine's
bounds are measured in the same run: every repetition, memcpy at each working set, one and two
iperf3 streams (run), the memory bound at each size (both). Tables go to stdout; with --out DIR
also DIR/results.csv (every measurement), DIR/tables.md and DIR/runs.log (every command and its
output). Exit status: 2 where a launch failed; cliffs: 1 where there is a cliff; run: 1 with
--require-targets where a target is missed or not judged."""
import argparse
import os
import sys
import time

sys.dont_write_bytecode = True  # keeps the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import cliffs, diff, drivers, limits, measure, report, rules  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = 1 << 20


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").rstrip("I")
    mul = units.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if mul > 1 else t) * mul)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (e.g. 8, 64K, 16M)")


def busbw_size(text):
    """A size the cliff check can judge: from 64 KiB, where the tables report busbw."""
    n = size(text)
    if n < 64 << 10:
        raise argparse.ArgumentTypeError(f"'{text}' is below 64K: the check judges busbw, "
                                         f"which the tables report from 64 KiB")
    return n


def sizes(text):
    return [size(s) for s in text.replace(",", " ").split()]


def count(text):
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a count (0 or more)")
    return n


def ints(text):
    return [int(s) for s in text.replace(",", " ").split()]


def words(text):
    return text.replace(",", " ").split()


def sweep(lo, hi):
    out = [lo]
    while out[-1] * 2 <= hi:
        out.append(out[-1] * 2)
    return out


def options():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--build", default=os.path.join(ROOT, "build"),
                        help="build directory (loomrun, loom-perf, bench/compare/*)")
    common.add_argument("--reps", type=int, default=3, help="repetitions of the whole plan")
    common.add_argument("--transports", type=words, default=["shm", "tcp"])
    common.add_argument("--kernels", choices=["native", "avx2", "both"], default="native",
                        help="Loom's reduction kernels: as dispatched, without AVX-512 "
                             "(LOOM_AVX512_DISABLE=1), or both as separate columns")
    common.add_argument("--loom-buffers", choices=["host", "shared", "both"], default="host",
                        help="Loom's buffers: plain host memory (as every other library's), "
                             "memory from Communicator::alloc that the host's ranks read in "
                             "place (column loom-shared; shm only), or both")
    common.add_argument("--iters-scale", type=float, default=1.0,
                        help="scale every iteration count (quick runs: 0.1)")
    common.add_argument("--timeout", type=int, default=300, help="seconds per launch")
    common.add_argument("--out", help="directory for results.csv, tables.md and runs.log")
    common.add_argument("--fresh-inputs", action="store_true",
                        help="every driver rewrites each cache line of its input before every "
                             "call, untimed, as a training step writes its gradients (otherwise "
                             "the input is unchanged between calls, and a peer that reads it in "
                             "place may find it in its own cache)")
    common.add_argument("--cpu-bind", choices=["none", "cores"], default="none",
                        help="cores: every library's ranks bound to CPUs in blocks of "
                             "consecutive local ranks (loomrun --cpu-bind cores; OpenMPI's "
                             "ranks the same way); none: the scheduler places them")
    common.add_argument("--far-retries", type=count, default=2,
                        help="launches again a configuration measured while two CPUs were far "
                             "apart (core-to-core round trip over twice the run's fastest and "
                             "100 ns above it), at most this many times")
    common.add_argument("--slow-retries", type=count, default=0,
                        help="launches again a configuration measured while the host was slow "
                             "(the loopback exchange around it over 1.3x the run's fastest), at "
                             "most this many times; by default such a launch is only marked: "
                             "the host's slow spells last minutes, beyond any wait")
    common.add_argument("--far-wait", type=float, default=5.0,
                        help="seconds to wait before a far or slow launch again")
    run = sub.add_parser("run", parents=[common], help="the comparison")
    run.add_argument("--ranks", type=ints, default=[2, 4])
    run.add_argument("--sizes", type=sizes, default=sizes("8 64K 256K 1M 4M 16M 64M"),
                     help="all-reduce sizes (8 B: time; from 64 KiB: busbw)")
    run.add_argument("--alltoall-sizes", type=sizes, default=sizes("1M 16M"),
                     help="all-to-all sizes, each rank's buffer ('' for none)")
    run.add_argument("--libs", type=words, default=["loom", "mpi", "gloo", "torch"])
    run.add_argument("--require-targets", action="store_true",
                     help="exit 1 unless every cell a target covers is met")
    cliff = sub.add_parser("cliffs", parents=[common], help="the no-cliff check of Loom")
    cliff.add_argument("--ranks", type=ints, default=[2, 4])
    cliff.add_argument("--min", type=busbw_size, default=64 << 10,
                       help="the smallest size (at least 64 KiB: below it the tables hold "
                            "times, not busbw)")
    cliff.add_argument("--max", type=size, default=64 * MIB)
    cliff.add_argument("--threshold", type=float, default=cliffs.THRESHOLD,
                       help="a fall of busbw over the memory bound larger than this fraction "
                            "is a cliff")
    cliff.add_argument("--launch-per-size", action="store_true",
                        help="each of Loom's sizes in fresh processes (by default one launch "
                             "sweeps every size, so that adjacent sizes share their processes "
                             "and a fall between them is not one launch's luck)")
    cliff.add_argument("--rounds", type=int, default=1,
                        help="a launch's sweep goes over its sizes this many times, each time a "
                             "share of every size's calls (loom-perf --rounds), so that a slower "
                             "spell of the host falls on every size alike; 1: each size once")
    diff = sub.add_parser("diff", help="one library in two runs' results.csv (before, after)")
    diff.add_argument("before")
    diff.add_argument("after")
    diff.add_argument("--impl", default="loom")
    again = sub.add_parser("report", help="the tables again from a results.csv")
    again.add_argument("results")
    again.add_argument("--cliffs", action="store_true")
    again.add_argument("--threshold", type=float, default=cliffs.THRESHOLD)
    return p.parse_args()


def compare_text(rows):
    """The comparison's tables and its targets; (markdown, cells missed or not judged)."""
    text = report.compare_report(rows)
    targets, missed = rules.targets_report(rows)
    return "\n".join([text, ""] + targets), missed


def main():
    a = options()
    if a.command == "diff":
        text, _ = diff.diff_report(measure.load(a.before), measure.load(a.after), a.impl)
        print(text)
        return 0
    if a.command == "report":
        rows = measure.load(a.results)
        if not a.cliffs:
            print(compare_text(rows)[0])
            return 0
        text, found = cliffs.cliff_report(rows, a.threshold)
        print(text)
        return 1 if found else 0
    variants = {"native": {"loom": {}}, "avx2": {"loom-avx2": {"LOOM_AVX512_DISABLE": "1"}},
                "both": {"loom": {}, "loom-avx2": {"LOOM_AVX512_DISABLE": "1"}}}[a.kernels]
    if a.loom_buffers != "host":
        shared = {f"{impl}-shared": {**env, drivers.SHARED_BUFFERS: "1"}
                  for impl, env in variants.items()}
        variants = shared if a.loom_buffers == "shared" else {**variants, **shared}
    drv = drivers.Drivers(a.build, variants, a.fresh_inputs, a.cpu_bind == "cores")
    missing = drv.missing()
    if "loom" in missing:
        sys.exit(f"compare: {missing['loom']}")
    # The references measured beside Loom at each rank count and size, in every repetition: the
    # memory bound of the all-reduce and the all-to-all (copy_footprint), the same for every
    # transport, and in the cliff check over TCP loopback's own shape (loopback_footprint).
    references = [] if drivers.BOUND in missing else [({drivers.BOUND}, drivers.BOUND_TRANSPORT)]
    notes = [f"memory bound: not measured, {missing[drivers.BOUND]}"] if not references else []
    if a.command == "cliffs" and "tcp" in a.transports:
        if drivers.LOOPBACK in missing:
            notes.append(f"loopback exchange: not measured, {missing[drivers.LOOPBACK]}")
        else:
            references.append(({drivers.LOOPBACK}, drivers.LOOPBACK_TRANSPORT))
    if a.command == "run":
        libs = [lib for lib in a.libs if lib not in missing]
        notes += [f"{lib}: skipped, {missing[lib]}" for lib in a.libs if lib in missing]
        if "loom" not in libs:
            references = []
        plan = [(set(libs_), op, n, t, s) for n in a.ranks
                for op, op_sizes in (("allreduce", a.sizes), ("alltoall", a.alltoall_sizes))
                for s in op_sizes
                for libs_, t in references + [(libs, t) for t in a.transports]]
        iter_args = {"scale": a.iters_scale}
    elif a.launch_per_size:
        plan = [(libs, "allreduce", n, t, s) for n in a.ranks for s in sweep(a.min, a.max)
                for libs, t in references + [({"loom"}, t) for t in a.transports]]
        iter_args = {"scale": a.iters_scale, "least": 3}
    else:
        # The references at each size, then Loom's whole sweep in one launch per transport.
        plan = [(libs, "allreduce", n, t, s) for n in a.ranks
                for s in sweep(a.min, a.max) for libs, t in references] + \
               [({"loom"}, "allreduce", n, t, tuple(sweep(a.min, a.max)))
                for n in a.ranks for t in a.transports]
        plan.sort(key=lambda p: p[2])  # rank count by rank count, as before
        iter_args = {"scale": a.iters_scale, "least": 3}
    for note in notes:
        print(f"compare: {note}", file=sys.stderr)
    conditions = "; fresh inputs (rewritten before every call)" if a.fresh_inputs else ""
    if a.cpu_bind == "cores":
        conditions += ("; ranks bound to CPUs in blocks of consecutive local ranks "
                       "(--cpu-bind cores)")
    header = [f"`{' '.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}`, "
              f"{time.strftime('%Y-%m-%d %H:%M %Z')}; {limits.machine()}; {a.reps} repetitions; "
              f"Loom kernels: {a.kernels}{conditions}.", ""] + [f"Note: {n}." for n in notes]
    start = time.monotonic()
    with measure.recording(a.out) as (recorder, log):
        measure.execute(plan, drv, a.reps, recorder, log, a.timeout, iter_args,
                        with_limits=a.command == "run", far_retries=a.far_retries,
                        slow_retries=a.slow_retries, far_wait=a.far_wait,
                        sweep_rounds=getattr(a, "rounds", 1))
    header.append(measure.took(start))
    if a.command == "run":
        text, missed = compare_text(recorder.rows)
        status = 1 if missed and a.require_targets else 0
    else:
        text, found = cliffs.cliff_report(recorder.rows, a.threshold)
        status = 1 if found else 0
    failed = [r for r in recorder.rows
              if r.error and r.op != "limit" and r.impl != measure.MEMCPY_WS]
    footer = [f"Failed launches: {len(failed)} (see runs.log)"] if failed else []
    out = "\n".join(header + ["", text] + footer) + "\n"
    print(out)
    if a.out:
        with open(os.path.join(a.out, "tables.md"), "w") as f:
            f.write(out)
    return 2 if failed else status


if __name__ == "__main__":
    sys.exit(main())
