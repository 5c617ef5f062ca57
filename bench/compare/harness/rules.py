"""The rules for a figure of the issue table, and its targets.

A figure is the median over at least MIN_REPS repetitions of one harness run, each repetition a
fresh launch; every repetition is listed with its marks (far placement, slow host). A cell is
met when its median meets the target and no repetition is below 1.0x (against a limit of the
machine: below the target). Launches are also split into fast ones (cores near, host at its
pace) and slow ones (either disturbed), each side's median reported on its own: on a virtual
machine the host moves the vCPUs to cores that share no cache for minutes at a time, and a
figure over both hides what each placement does."""
import statistics
from dataclasses import dataclass

from .report import FAR_MARK, SLOW_MARK, Cells, best_of, latency, marks_of, name, size_text

MIN_REPS = 3
KIB, MIB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class Target:
    """Loom's advantage in (op, transport, ranks, sizes) must reach `value`: over the best other
    library (its busbw over theirs; at latency sizes their time over Loom's), or, with `limit`,
    Loom's busbw over that limit of the machine measured in the same repetition."""
    op: str
    transport: str
    ranks: tuple
    lo: int
    hi: int
    value: float
    limit: str = ""
    text: str = ""

    def covers(self, op, transport, ranks, size):
        return (op, transport) == (self.op, self.transport) and ranks in self.ranks and \
            self.lo <= size <= self.hi

    def floor(self):
        """The least any one repetition may show: 1.0x, or the target where it is lower."""
        return min(1.0, self.value)


# Issue 63's table.
TARGETS = [
    Target("allreduce", "shm", (2, 4), 64 * KIB, 64 * MIB, 1.5,
           text=">= 1.5x the best other library"),
    Target("allreduce", "tcp", (2, 4), 64 * KIB, 64 * MIB, 1.25,
           text=">= 1.25x the best of OpenMPI tcp and every Gloo algorithm"),
    Target("allreduce", "shm", (2, 4), 1, 63, 1.0, text="time <= the best other library's"),
    Target("allreduce", "tcp", (2, 4), 1, 63, 1.0, text="time <= the best other library's"),
    Target("allreduce", "tcp", (2,), 64 * MIB, 64 * MIB, 0.9, limit="iperf3",
           text=">= 0.9x one iperf3 loopback stream"),
    Target("alltoall", "shm", (4,), 1 * MIB, 16 * MIB, 1.5, text=">= 1.5x OpenMPI vader"),
    Target("alltoall", "tcp", (4,), 1 * MIB, 16 * MIB, 1.0,
           text=">= 1.0x the best of OpenMPI tcp and Gloo"),
]


def advantage(loom, other, size):
    """Loom's advantage: busbw over busbw, or at latency sizes time over time inverted (> 1:
    Loom ahead)."""
    if loom is None or not other:
        return None
    return other / loom if latency(size) else loom / other


def is_loom(impl):
    return impl.startswith("loom")


def slow_launch(row):
    """Whether a launch ran with the cores far apart or while the host was slow."""
    return row.placement == "far" or row.pace == "slow"


class Launches:
    """Every launch's value per (op, ranks, transport, size, impl), split into fast and slow
    (Cells has judged each launch's placement and pace against the whole run)."""

    def __init__(self, rows):
        self.fast, self.slow = {}, {}
        self.waits = {}  # (slow?, key) -> [(share of the time waiting for peers, sleeps a call)]
        for r in rows:
            if r.op == "limit" or r.error or r.busbw_gbps is None:
                continue
            key = (r.op, r.ranks, r.transport, r.bytes, r.impl)
            side = self.slow if slow_launch(r) else self.fast
            side.setdefault(key, []).append(r.time_us if latency(r.bytes) else r.busbw_gbps)
            if r.wait_share is not None:
                self.waits.setdefault((slow_launch(r), key), []).append((r.wait_share, r.sleeps))

    def waiting(self, slow, key):
        """'share% (sleeps)': the median share of Loom's time spent waiting for its peers over
        one side's launches, and the median sleeps a call; '—' where not logged."""
        seen = self.waits.get((slow, key))
        if not seen:
            return "—"
        sleeps = [s for _, s in seen if s is not None]
        return (f"{100 * statistics.median(w for w, _ in seen):.0f}%"
                + (f" ({statistics.median(sleeps):.1f})" if sleeps else ""))

    def median(self, side, key):
        values = side.get(key)
        return statistics.median(values) if values else None

    def count(self, side, key):
        return len(side.get(key, []))


@dataclass
class Verdict:
    impl: str
    config: tuple
    size: int
    target: Target
    median: float  # the advantage of the medians
    per_rep: list  # (rep, advantage, marks)
    met: bool
    why: str


def per_rep_advantages(cells, config, size, loom, target):
    """(rep, Loom's advantage in that repetition, marks) for every repetition Loom measured."""
    out = []
    others = [i for i in cells.impls(config) if not is_loom(i)]
    for rep, v in sorted(cells.values.get((*config, size, loom), {}).items()):
        keys = [(*config, size, loom)]
        if target.limit:
            limit = cells.limits.get(target.limit, {}).get(rep) or cells.limit(target.limit)
            a = advantage(v, limit, size)
        else:
            b, bv = best_of(cells, config, size, others, rep)
            a = advantage(v, bv, size)
            keys += [(*config, size, b)] if b else []
        out.append((rep, a, marks_of(cells, keys, rep)))
    return out


def beyond_bound(cells, config, size, others, target):
    """Where the target asks for more than the machine's memory bound at the cell's working set
    (copy_footprint, in the same run): how many times the bound it asks for; else nothing."""
    op, ranks, _ = config
    bound = cells.bound(op, ranks, size)
    best = best_of(cells, config, size, others)[1]
    if target.limit or latency(size) or not bound or not best or target.value * best <= bound:
        return ""
    return (f"; the target ({target.value * best:.2f} GB/s) is {target.value * best / bound:.2f}x "
            f"the memory bound")


def judge(cells, config, size, loom, target):
    """The verdict on one cell: its median against the target, each repetition against the
    floor, and at least MIN_REPS repetitions."""
    others = [i for i in cells.impls(config) if not is_loom(i)]
    v = cells.median((*config, size, loom))
    if target.limit:
        median = advantage(v, cells.limit(target.limit), size)
    else:
        median = advantage(v, best_of(cells, config, size, others)[1], size)
    per_rep = per_rep_advantages(cells, config, size, loom, target)
    counted = [a for _, a, _ in per_rep if a is not None]
    if median is None or not counted:
        why = "not measured (no " + ("limit" if target.limit else "other library") + ")"
        return Verdict(loom, config, size, target, median, per_rep, False, why)
    if len(counted) < MIN_REPS:
        why = f"not judged: {len(counted)} repetition(s), a figure needs {MIN_REPS}"
        return Verdict(loom, config, size, target, median, per_rep, False, why)
    low = [a for a in counted if a < target.floor()]
    if median < target.value:
        why = f"missed: median {median:.2f} < {target.value:.2f}" + \
            beyond_bound(cells, config, size, others, target)
    elif low:
        why = f"missed: {len(low)} repetition(s) below {target.floor():.2f}x"
    else:
        why = "met"
    return Verdict(loom, config, size, target, median, per_rep, why == "met", why)


def verdicts(cells):
    """Every (Loom variant, cell) a target covers, judged."""
    out = []
    for config in cells.configs():
        op, ranks, transport = config
        for size in cells.sizes(config):
            for target in (t for t in TARGETS if t.covers(op, transport, ranks, size)):
                for loom in (i for i in cells.impls(config) if is_loom(i)):
                    out.append(judge(cells, config, size, loom, target))
    return out


def side_text(cells, launches, side, config, size, loom, target):
    """The median advantage over one side's launches (fast or slow), against the other
    libraries' launches of the same side where they have any, else against all of theirs."""
    key = (*config, size, loom)
    v = launches.median(side, key)
    if v is None:
        return "—"
    n = launches.count(side, key)
    if target.limit:
        return f"{advantage(v, cells.limit(target.limit), size):.2f} ({n})"
    others = [i for i in cells.impls(config) if not is_loom(i)]
    best, best_v, theirs = None, None, side
    for impl in others:
        o = launches.median(side, (*config, size, impl))
        if o is not None and (best_v is None or (o < best_v if latency(size) else o > best_v)):
            best, best_v = impl, o
    if best is None:  # no other library ran a launch of this side: all of theirs
        theirs = None
        _, best_v = best_of(cells, config, size, others)
    a = advantage(v, best_v, size)
    if a is None:
        return "—"
    return f"{a:.2f} ({n}{'' if theirs is not None else ', theirs: all'})"


def targets_report(rows):
    """The markdown section of the targets: one line per judged cell; returns (lines, the cells
    missed or not judged)."""
    cells = Cells(rows)  # judges every launch's placement and pace against the whole run
    found = verdicts(cells)
    if not found:
        return [], 0
    launches = Launches(rows)
    lines = ["## Targets", "",
             f"A cell is met when its median meets the target and no repetition is below 1.0x "
             f"(against a limit of the machine: below the target); a figure needs at least "
             f"{MIN_REPS} repetitions, each a fresh launch. Advantage: Loom's busbw over the "
             f"best other library's (at 8 B their time over Loom's; against a limit, Loom's "
             f"busbw over it), above 1 where Loom is ahead. Fast launches ran with the cores "
             f"near and the host at its pace, slow ones with the cores far apart ({FAR_MARK}) "
             f"or the host slow ({SLOW_MARK}); each side's median advantage over its launches "
             f"(how many), against the other libraries' launches of the same side (or all of "
             f"theirs where they had none). Loom waiting: the share of its rank 0's time spent "
             f"waiting for its peers (and its sleeps a call), median over the fast and over the "
             f"slow launches (LOOM_DEBUG=DEBUG's timing of the call class).", "",
             "| cell | target | median advantage | per repetition | fast launches | "
             "slow launches | Loom waiting, fast / slow | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    missed = 0
    for v in found:
        op, ranks, transport = v.config
        reps = ", ".join("—" if a is None else f"{a:.2f}{m}" for _, a, m in v.per_rep)
        cell = f"{name(v.impl)}, {op} {ranks} ranks {transport} {size_text(v.size)}"
        median = "—" if v.median is None else f"{v.median:.2f}"
        fast = side_text(cells, launches, launches.fast, v.config, v.size, v.impl, v.target)
        slow = side_text(cells, launches, launches.slow, v.config, v.size, v.impl, v.target)
        verdict = "**met**" if v.met else v.why
        key = (*v.config, v.size, v.impl)
        waiting = f"{launches.waiting(False, key)} / {launches.waiting(True, key)}"
        lines.append(f"| {cell} | {v.target.text} | {median} | {reps} | {fast} | {slow} | "
                     f"{waiting} | {verdict} |")
        missed += not v.met
    lines += ["", f"Met: {len(found) - missed} of {len(found)} cells.", ""]
    return lines, missed
