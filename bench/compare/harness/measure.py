"""Runs the plan: every configuration in fresh processes, the whole plan repeated; keeps every
measurement as a row (the CSV the tables are made from).

Each launch is bracketed by two probes of the machine. A launch the first finds disturbed runs
again, up to a bound; one the second finds disturbed, only when asked (its spells outlast any
wait). Every launch stays in the CSV; the tables prefer a repetition's undisturbed launch
(report.Cells):
- the cores' placement (limits.core_to_core_ns): a launch during which two CPUs sat far apart (a
  round trip more than twice the run's fastest and 100 ns above it: report.is_far) is "far". On a
  virtual machine the host moves the vCPUs between cores that share a cache and cores that do
  not, for seconds to minutes, and a transfer between ranks then costs up to 4x more for every
  library.
- the host's pace (limits.loopback_pace_us): a launch around which a fixed loopback exchange ran
  more than 1.3x slower than the run's fastest (report.is_slow) is "slow". The same host runs
  every library's calls 1.4-4x slower for minutes at a time while a busy loop and the cores'
  round trip keep their speed; the exchange slows down with them."""
import contextlib
import csv
import os
import sys
import time
from dataclasses import asdict, dataclass

from . import drivers, limits, report

FIELDS = ["rep", "impl", "transport", "op", "ranks", "bytes", "iters", "warmup", "time_us",
          "busbw_gbps", "choice", "error", "core_to_core_ns", "placement", "pace_us", "pace",
          "wait_share", "sleeps"]


@dataclass
class Row:
    rep: int
    impl: str
    transport: str
    op: str
    ranks: int
    bytes: int
    iters: int = 0
    warmup: int = 0
    time_us: float = None
    busbw_gbps: float = None
    choice: str = ""
    error: str = ""
    core_to_core_ns: float = None  # the worse of the round trips measured before and after
    placement: str = ""  # "near", "far", or "" when not measured
    pace_us: float = None  # the slower of the loopback exchanges timed before and after
    pace: str = ""  # "steady", "slow", or "" when not measured
    wait_share: float = None  # Loom's rank 0: the share of its calls' time waiting for peers
    sleeps: float = None  # ... and its sleeps a call (drivers.anatomy)


BUDGET = 512 << 20


def iterations(size, scale=1.0, budget=BUDGET, least=5, most=400):
    """(timed calls, warm-up calls) for one size: latency sizes get many calls, bandwidth sizes
    about `budget` bytes' worth, at least `least`."""
    if size < 64 << 10:
        n, w = 1000, 100
    else:
        n = max(least, min(most, budget // size))
        w = max(2, n // 10)
    return max(1, round(n * scale)), max(1, round(w * scale))


# The single-thread memcpy at a configuration's working set: impl and transport of its rows.
MEMCPY_WS, MEMCPY_WS_TRANSPORT = report.MEMCPY_WS, drivers.BOUND_TRANSPORT


def limits_rows(rep, drv, ring_ranks=(), working_sets=()):
    """The machine's limits; ring_ranks: the rank counts (above 2) whose TCP ring bound to
    measure; working_sets: (op, ranks, size) whose working set (every rank's input and output:
    one thread copies ranks x size bytes into as many) to copy with memcpy, as rows of op at that
    rank count and size."""
    rows = [Row(rep, "memcpy", "-", "limit", 1, 64 << 20, busbw_gbps=limits.memcpy_gbps(drv.memcpy)),
            Row(rep, "iperf3", "-", "limit", 2, 0, busbw_gbps=limits.iperf3_gbps()),
            Row(rep, "iperf3-opposite", "-", "limit", 2, 0,
                busbw_gbps=limits.iperf3_opposite_gbps())]
    rows += [Row(rep, report.ring_limit(n), "-", "limit", n, 0,
                 busbw_gbps=limits.iperf3_ring_gbps(n)) for n in sorted(ring_ranks)]
    for op, n, size in sorted(working_sets):
        gbps = limits.memcpy_gbps(drv.memcpy, n * size)
        rows.append(Row(rep, MEMCPY_WS, MEMCPY_WS_TRANSPORT, op, n, size, busbw_gbps=gbps,
                        time_us=n * size / (gbps * 1e3) if gbps else None))
    for r in rows:
        if r.busbw_gbps is None:
            r.error = "not measured (iperf3 or memcpy_bandwidth missing)"
    return rows


class Recorder:
    """Appends rows to the CSV as they come (a run cut short keeps what it measured)."""

    def __init__(self, path, fields=FIELDS):
        self.rows = []
        self.file = open(path, "w", newline="") if path else None
        self.writer = csv.DictWriter(self.file, fields) if self.file else None
        if self.writer:
            self.writer.writeheader()

    def add(self, row):
        self.rows.append(row)
        if self.writer:
            self.writer.writerow(asdict(row))
            self.file.flush()

    def close(self):
        if self.file:
            self.file.close()


@contextlib.contextmanager
def recording(out, fields=FIELDS):
    """(a Recorder of out/results.csv, out/runs.log) for a run, both closed when it ends, even cut
    short; without `out`, a Recorder that only keeps its rows and no log."""
    if out:
        os.makedirs(out, exist_ok=True)
    recorder = Recorder(os.path.join(out, "results.csv") if out else None, fields)
    log = open(os.path.join(out, "runs.log"), "w") if out else None
    try:
        yield recorder, log
    finally:
        recorder.close()
        if log:
            log.close()


def took(start):
    """The run's length since `start` (time.monotonic) and the load it ended under."""
    return (f"Took {(time.monotonic() - start) / 60:.1f} min; load average "
            f"{os.getloadavg()[0]:.2f} at the end (other processes share the machine).")


def load(path):
    rows = []
    with open(path, newline="") as f:
        for d in csv.DictReader(f):
            rows.append(Row(int(d["rep"]), d["impl"], d["transport"], d["op"], int(d["ranks"]),
                            int(d["bytes"]), int(d["iters"]), int(d["warmup"]),
                            float(d["time_us"]) if d["time_us"] else None,
                            float(d["busbw_gbps"]) if d["busbw_gbps"] else None,
                            d["choice"], d["error"],
                            float(d["core_to_core_ns"]) if d.get("core_to_core_ns") else None,
                            d.get("placement") or "",
                            float(d["pace_us"]) if d.get("pace_us") else None,
                            d.get("pace") or "",
                            float(d["wait_share"]) if d.get("wait_share") else None,
                            float(d["sleeps"]) if d.get("sleeps") else None))
    return rows


class Watch:
    """A probe of the machine run before and after each launch: the run's best value so far, and
    whether the worse of a launch's two was disturbed against it (`disturbed(value, best)`)."""

    def __init__(self, measure, disturbed, labels, probes=5):
        self.measure, self.disturbed, self.labels = measure, disturbed, labels
        seen = [v for v in (measure() for _ in range(probes)) if v is not None]
        self.best = min(seen) if seen else None

    def probe(self):
        if self.best is None:
            return None
        v = self.measure()
        if v is not None:
            self.best = min(self.best, v)
        return v

    def judge(self, before, after):
        """(the worse value, its label: labels[1] when disturbed, "" when not measured)."""
        seen = [v for v in (before, after) if v is not None]
        if not seen:
            return None, ""
        worst = max(seen)
        return worst, self.labels[1] if self.disturbed(worst, self.best) else self.labels[0]


def placement_watch(core_to_core):
    return Watch(lambda: limits.core_to_core_ns(core_to_core), report.is_far, ("near", "far"))


def pace_watch(loopback):
    return Watch(lambda: limits.loopback_pace_us(loopback), report.is_slow, ("steady", "slow"))


def execute(plan, drv, reps, recorder, log, timeout, iter_args, with_limits=True, far_retries=2,
            slow_retries=0, far_wait=5.0, sweep_rounds=1):
    """plan: (libs, op, ranks, transport, size) tuples, run in order once per repetition. A launch
    measured with the cores far apart runs again after far_wait seconds, at most far_retries times;
    one measured while the host was slow, at most slow_retries times (the two counted apart).
    Loom's sweeps go over their sizes in sweep_rounds turns (loom-perf --rounds)."""
    placement, pace = placement_watch(drv.core_to_core), pace_watch(drv.loopback)
    if placement.best is None:
        print("placement: not measured (core_to_core missing or failed)", file=sys.stderr)
    else:
        print(f"placement: fastest core-to-core round trip {placement.best:.0f} ns",
              file=sys.stderr)
    if pace.best is None:
        print("pace: not measured (loopback_footprint missing or failed)", file=sys.stderr)
    else:
        print(f"pace: fastest loopback exchange {pace.best:.0f} us", file=sys.stderr)
    jobs = []
    for libs, op, ranks, transport, size in plan:
        if isinstance(size, tuple):  # Loom's sweep over these sizes in one launch per variant
            most, warmup = iterations(min(size), **iter_args)
            budget = round(iter_args.get("budget", BUDGET) * iter_args.get("scale", 1.0))
            jobs += [(j, most, warmup)
                     for j in drv.loom_jobs(op, ranks, transport, size, most, warmup, budget,
                                            sweep_rounds)]
            continue
        iters, warmup = iterations(size, **iter_args)
        jobs += [(j, iters, warmup)
                 for j in drv.jobs(libs, op, ranks, transport, size, iters, warmup)]
    ring_ranks = {ranks for _, _, ranks, transport, _ in plan if transport == "tcp" and ranks > 2}
    working_sets = {(op, ranks, s) for libs, op, ranks, _, size in plan if "loom" in libs
                    for s in (size if isinstance(size, tuple) else (size,)) if s >= 64 << 10}
    total, done, start = len(jobs) * reps, 0, time.monotonic()
    for rep in range(1, reps + 1):
        if with_limits:
            for row in limits_rows(rep, drv, ring_ranks, working_sets):
                recorder.add(row)
                print(f"rep {rep}: {row.impl} {row.op} {row.ranks} ranks {row.bytes} B "
                      f"{row.busbw_gbps} GB/s", file=sys.stderr)
        for job, iters, warmup in jobs:
            far_left, slow_left = far_retries, slow_retries
            while True:
                before, pace_before = placement.probe(), pace.probe()
                outcome = drivers.run(job, timeout, log)
                us, state = pace.judge(pace_before, pace.probe())
                ns, where = placement.judge(before, placement.probe())
                if job.sizes:
                    for size in job.sizes:
                        t, bw, choice = outcome.per_size.get(size, (None, None, ""))
                        timed, warm = drivers.sweep_iterations(size, iters, warmup,
                                                               job.iter_bytes, job.rounds)
                        recorder.add(Row(rep, job.impl, job.transport, job.op, job.ranks, size,
                                         timed, warm, t, bw, choice,
                                         "" if t is not None else outcome.error, ns, where, us,
                                         state))
                    shown = outcome.error or " ".join(
                        f"{bw:.2f}" for _, bw, _ in outcome.per_size.values()) + " GB/s"
                else:
                    recorder.add(Row(rep, job.impl, job.transport, job.op, job.ranks, job.size,
                                     iters, warmup, outcome.time_us, outcome.busbw,
                                     outcome.choice, outcome.error, ns, where, us, state,
                                     outcome.wait_share, outcome.sleeps))
                    shown = outcome.error or f"{outcome.busbw:.3f} GB/s, {outcome.time_us:.1f} us"
                if where == "far":
                    shown += f" (cores far apart: {ns:.0f} ns)"
                if state == "slow":
                    shown += f" (host slow: loopback exchange {us:.0f} us)"
                again = (where == "far" and far_left > 0) or (state == "slow" and slow_left > 0)
                if outcome.error or not again:
                    break
                far_left -= where == "far" and far_left > 0
                slow_left -= state == "slow" and slow_left > 0
                print(f"rep {rep} {job.op} {job.ranks} ranks {job.transport} {job.size} B "
                      f"{job.impl}: {shown}; again in {far_wait:.0f} s", file=sys.stderr)
                time.sleep(far_wait)
            done += 1
            left = (time.monotonic() - start) / done * (total - done)
            print(f"rep {rep} [{done}/{total}, ~{left / 60:.0f} min left] {job.op} {job.ranks} "
                  f"ranks {job.transport} {job.size} B {job.impl}: {shown}", file=sys.stderr)
