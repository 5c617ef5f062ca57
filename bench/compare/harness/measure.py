"""Runs the plan: every configuration in fresh processes, the whole plan repeated; keeps every
measurement as a row (the CSV the tables are made from)."""
import csv
import sys
import time
from dataclasses import asdict, dataclass

from . import drivers, limits

FIELDS = ["rep", "impl", "transport", "op", "ranks", "bytes", "iters", "warmup", "time_us",
          "busbw_gbps", "choice", "error"]


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


def iterations(size, scale=1.0, budget=512 << 20, least=5, most=400):
    """(timed calls, warm-up calls) for one size: latency sizes get many calls, bandwidth sizes
    about `budget` bytes' worth, at least `least`."""
    if size < 64 << 10:
        n, w = 1000, 100
    else:
        n = max(least, min(most, budget // size))
        w = max(2, n // 10)
    return max(1, round(n * scale)), max(1, round(w * scale))


def limits_rows(rep, drv):
    rows = [Row(rep, "memcpy", "-", "limit", 1, 64 << 20, busbw_gbps=limits.memcpy_gbps(drv.memcpy)),
            Row(rep, "iperf3", "-", "limit", 2, 0, busbw_gbps=limits.iperf3_gbps())]
    for r in rows:
        if r.busbw_gbps is None:
            r.error = "not measured (iperf3 or memcpy_bandwidth missing)"
    return rows


class Recorder:
    """Appends rows to the CSV as they come (a run cut short keeps what it measured)."""

    def __init__(self, path):
        self.rows = []
        self.file = open(path, "w", newline="") if path else None
        self.writer = csv.DictWriter(self.file, FIELDS) if self.file else None
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


def load(path):
    rows = []
    with open(path, newline="") as f:
        for d in csv.DictReader(f):
            rows.append(Row(int(d["rep"]), d["impl"], d["transport"], d["op"], int(d["ranks"]),
                            int(d["bytes"]), int(d["iters"]), int(d["warmup"]),
                            float(d["time_us"]) if d["time_us"] else None,
                            float(d["busbw_gbps"]) if d["busbw_gbps"] else None,
                            d["choice"], d["error"]))
    return rows


def execute(plan, drv, reps, recorder, log, timeout, iter_args, with_limits=True):
    """plan: (libs, op, ranks, transport, size) tuples, run in order once per repetition."""
    jobs = []
    for libs, op, ranks, transport, size in plan:
        iters, warmup = iterations(size, **iter_args)
        jobs += [(j, iters, warmup)
                 for j in drv.jobs(libs, op, ranks, transport, size, iters, warmup)]
    total, done, start = len(jobs) * reps, 0, time.monotonic()
    for rep in range(1, reps + 1):
        if with_limits:
            for row in limits_rows(rep, drv):
                recorder.add(row)
                print(f"rep {rep}: {row.impl} {row.busbw_gbps} GB/s", file=sys.stderr)
        for job, iters, warmup in jobs:
            outcome = drivers.run(job, timeout, log)
            recorder.add(Row(rep, job.impl, job.transport, job.op, job.ranks, job.size, iters,
                             warmup, outcome.time_us, outcome.busbw, outcome.choice,
                             outcome.error))
            done += 1
            left = (time.monotonic() - start) / done * (total - done)
            shown = outcome.error or f"{outcome.busbw:.3f} GB/s, {outcome.time_us:.1f} us"
            print(f"rep {rep} [{done}/{total}, ~{left / 60:.0f} min left] {job.op} {job.ranks} "
                  f"ranks {job.transport} {job.size} B {job.impl}: {shown}", file=sys.stderr)
