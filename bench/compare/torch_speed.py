#!/usr/bin/env python3
"""The PyTorch backend's figures (issue 60): torch.distributed with backend loom against backend
gloo, every library timed the same way in one run.

    VENV/bin/python bench/compare/torch_speed.py --out DIR   # PyTorch 2.15 (tools/deps.sh --torch)
    VENV/bin/python bench/compare/torch_speed.py --quick --out DIR   # a short run (~10 min)
    python3 bench/compare/torch_speed.py --report DIR/results.csv   # the report again

For 2 and 4 ranks (--ranks), each repetition (--reps, 3) launches, in fresh processes, loom and
gloo side by side (their order turning from one repetition to the next):
  collectives  all_reduce at 8 B, 1, 4, 16, 64 MiB and all_gather_into_tensor at 1-64 MiB (the
               output's size), per-op timing (torch_bench.py); loom also on tensors from the
               group's allocate_tensor (loom-alloc: its shared window, Loom's direct path);
               and a pipeline's step at 8 B, 64 KiB and 1 MiB: the next irecv posted ahead,
               isend to the right, wait (torch_bench.py --op sendrecv)
  ddp          DDP steps of an MLP 784-1024-1024-1024-10, batch 64 per rank (torch_ddp.py)
  fsdp         FSDP2 steps of 9 Linear layers of 1024, batch 64 per rank; loom also with
               set_allocate_memory_from_process_group_for_comm(True) (loom-alloc)
  overhead     the binding's cost per call, a group of one process (torch_call_overhead.py)
and the machine's single-thread memcpy bandwidth at 64 MiB. Every rank timestamps each call
(step); a call's time is its slowest rank's; each launch's figure is the median over its calls;
samples/s = ranks x batch / median step. Around every launch the harness probes the cores'
placement and the host's pace (harness/measure.py: on shared vCPUs the host runs everything
1.4-4x slower for minutes at a time); a disturbed launch is marked, not run again. A launch that
fails or passes --timeout is launched once more (a new port) and the row says so.

--python is the interpreter whose PyTorch is measured (default: this one); loom_torch comes from
BUILD/python-2 for PyTorch 2.x, BUILD/python for 1.x (--pythonpath to choose). Build first:
loom_torch (loom_torch_2 for 2.x), memcpy_bandwidth, core_to_core and loopback_footprint. With
--out, DIR/results.csv holds every repetition's every row, DIR/report.md the tables (ratios
against gloo from the median of the repetitions' medians, and per repetition), DIR/runs.log every
command and its output; the report also goes to stdout.
"""
import argparse
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # keeps the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import ints, sizes, words  # noqa: E402
from harness import drivers, limits, measure, torch_report, torch_runs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTS = ["collectives", "ddp", "fsdp", "overhead"]


def options():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--python", default=sys.executable, help="the Python whose PyTorch is measured")
    p.add_argument("--pythonpath", help="where loom_torch is (default: from the build)")
    p.add_argument("--ranks", type=ints, default=[2, 4])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--parts", type=words, default=PARTS, help=", ".join(PARTS))
    p.add_argument("--impls", type=words, default=["loom", "loom-alloc", "gloo"])
    p.add_argument("--allreduce-sizes", type=sizes, default=sizes("8 1M 4M 16M 64M"))
    p.add_argument("--allgather-sizes", type=sizes, default=sizes("1M 4M 16M 64M"))
    p.add_argument("--sendrecv-sizes", type=sizes, default=sizes("8 64K 1M"),
                   help="sizes of the pipeline step's messages (isend/irecv)")
    p.add_argument("--iter-bytes", type=sizes, default=[512 << 20],
                   help="each size's timed calls: this / size, at least 3, at most --small-iters")
    p.add_argument("--small-iters", type=int, default=1000, help="timed calls of the small sizes")
    p.add_argument("--ddp-steps", type=int, default=200)
    p.add_argument("--fsdp-steps", type=int, default=100)
    p.add_argument("--calls", type=int, default=20000, help="the call overhead's calls")
    p.add_argument("--fresh-inputs", action="store_true",
                   help="the collectives rewrite their input before every call, untimed")
    p.add_argument("--quick", action="store_true",
                   help="a short run to check the harness: few calls and steps")
    p.add_argument("--timeout", type=int, default=300, help="seconds per launch")
    p.add_argument("--out", help="directory for results.csv, report.md and runs.log")
    p.add_argument("--report", metavar="RESULTS_CSV",
                   help="prints the report again from a run's results.csv, measures nothing")
    a = p.parse_args()
    if a.quick:
        a.iter_bytes, a.small_iters = [64 << 20], 200
        a.ddp_steps, a.fsdp_steps, a.calls = 30, 15, 3000
    return a


def torch_environment(a):
    """(the environment of the launches, PyTorch's version, whether loom_torch has the 2.15
    Backend API); exits when loom_torch cannot be imported."""
    probe = "import torch, loom_torch; print(torch.__version__, loom_torch.BACKEND_API)"
    where = a.pythonpath
    if where is None:
        major = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                               capture_output=True, text=True).stdout.strip().split(".")[0]
        where = os.path.join(a.build, "python-2" if major.isdigit() and int(major) >= 2
                             else "python")
    env = {"PYTHONPATH": os.path.abspath(where), "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    p = subprocess.run([a.python, "-c", probe], capture_output=True, text=True,
                       env=dict(os.environ, **env))
    if p.returncode != 0:
        sys.exit(f"torch_speed: {a.python} cannot import torch and loom_torch from {where}: "
                 f"{(p.stderr.strip().splitlines() or ['?'])[-1]}")
    version, api = p.stdout.split()
    return env, version, api == "True"


def chosen(a, api):
    """The parts and impls this PyTorch can run, and notes on what it cannot."""
    notes, impls, parts = [], list(a.impls), list(a.parts)
    if not api and "loom-alloc" in impls:
        impls.remove("loom-alloc")
        notes.append("loom-alloc: skipped, allocate_tensor needs PyTorch 2.15's Backend API")
    if not api and "fsdp" in parts:
        parts.remove("fsdp")
        notes.append("fsdp: skipped, FSDP2 needs PyTorch 2.x")
    return parts, impls, notes


def settings_of(a):
    return torch_runs.Settings(a.python, a.allreduce_sizes, a.allgather_sizes, a.sendrecv_sizes,
                               a.iter_bytes[0], a.small_iters, a.fresh_inputs,
                               ddp_steps=a.ddp_steps, fsdp_steps=a.fsdp_steps, calls=a.calls)


def execute(a, settings, env, parts, impls, recorder, log):
    drv = drivers.Drivers(a.build, {})
    placement, pace = measure.placement_watch(drv.core_to_core), measure.pace_watch(drv.loopback)
    for rep in range(1, a.reps + 1):
        memcpy = limits.memcpy_gbps(drv.memcpy)
        recorder.add(torch_runs.Row(rep, "limit", "memcpy", "memcpy", 1, 64 << 20, rate=memcpy,
                                    unit="GB/s",
                                    error="" if memcpy else "memcpy_bandwidth missing or failed"))
        jobs = torch_runs.plan(settings, rep, a.ranks, parts, impls)
        for i, job in enumerate(jobs, 1):
            before, pace_before = placement.probe(), pace.probe()
            rows = torch_runs.run(job, env, a.timeout, log)
            us, state = pace.judge(pace_before, pace.probe())
            ns, where = placement.judge(before, placement.probe())
            for r in rows:
                r.rep, r.core_to_core_ns, r.placement, r.pace_us, r.pace = rep, ns, where, us, state
                recorder.add(r)
            shown = rows[0].error or ", ".join(
                f"{r.rate:.2f} {r.unit}" if r.part == "collectives" and r.bytes >= 64 << 10
                else f"{r.time_us / 1e3:.2f} ms" if r.time_us >= 1e4
                else f"{r.time_us:.1f} us" for r in rows)
            print(f"rep {rep} [{i}/{len(jobs)}] {job.part} {job.op} {job.ranks} ranks {job.impl}: "
                  f"{shown}{' (host slow)' if state == 'slow' else ''}"
                  f"{' (cores far apart)' if where == 'far' else ''}", file=sys.stderr)


def main():
    a = options()
    if a.report:
        print(torch_report.report(torch_runs.load(a.report), settings_of(a)))
        return 0
    env, version, api = torch_environment(a)
    parts, impls, notes = chosen(a, api)
    settings = settings_of(a)
    command = " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    header = [f"`{command}`, {time.strftime('%Y-%m-%d %H:%M %Z')}; {limits.machine()}; "
              f"PyTorch {version} ({a.python}); {a.reps} repetitions; ranks "
              f"{', '.join(map(str, a.ranks))}"
              f"{'; fresh inputs' if a.fresh_inputs else ''}{'; --quick' if a.quick else ''}."]
    header += [f"Note: {n}." for n in notes]
    start = time.monotonic()
    with measure.recording(a.out, torch_runs.FIELDS) as (recorder, log):
        execute(a, settings, env, parts, impls, recorder, log)
    header.append(measure.took(start))
    text = "\n".join(header + ["", torch_report.report(recorder.rows, settings)]) + "\n"
    print(text)
    if a.out:
        with open(os.path.join(a.out, "report.md"), "w") as f:
            f.write(text)
    failed = [r for r in recorder.rows if r.error]
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
