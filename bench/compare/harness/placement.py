"""What the host's placement costs each library: per configuration and size, each library's median
time over the launches that ran with the cores near and over those with them far apart, and far
over near, from every launch of the run (retried ones included). The targets judge Loom against
the others launch by launch; this shows which library the slow placement slows, and by how much.
A launch may also have run while the host was slow (report.SLOW_MARK): each side says how many of
its launches did, since a slow host slows every library whatever the placement."""
import statistics
from collections import defaultdict

from .drivers import BOUND_TRANSPORT, LOOPBACK_TRANSPORT
from .report import SLOW_MARK, name, size_text


def _launches(rows):
    """(op, ranks, transport, size) -> impl -> placement -> [row] of every launch that ran."""
    out = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in rows:
        if r.op == "limit" or r.error or r.time_us is None or r.placement not in ("near", "far"):
            continue
        if r.transport in (BOUND_TRANSPORT, LOOPBACK_TRANSPORT):
            continue
        out[(r.op, r.ranks, r.transport, r.bytes)][r.impl][r.placement].append(r)
    return out


def _median_us(launches):
    return statistics.median(r.time_us for r in launches)


def _shown(impls):
    """Every library but Gloo's algorithms, and of those the fastest: by its near launches' median
    (the placement the table sets the far ones against), by all its launches' where it had no
    near one."""
    gloo = [i for i in impls if i.startswith("gloo:")]

    def speed(i):
        near = impls[i]["near"]
        return (0, _median_us(near)) if near else (1, _median_us(impls[i]["far"]))

    best_gloo = min(gloo, key=speed, default=None)
    return [i for i in sorted(impls) if not i.startswith("gloo:")] + \
        ([best_gloo] if best_gloo else [])


def _side(launches):
    """A side's median time and its launches: "12.3 (2)", "12.3 (2, 1‡)" where some ran while the
    host was slow, "—" where none ran."""
    if not launches:
        return "—"
    us = _median_us(launches)
    slow = sum(r.pace == "slow" for r in launches)
    count = f"{len(launches)}, {slow}{SLOW_MARK}" if slow else f"{len(launches)}"
    return f"{us:.{2 if us < 10 else 1}f} ({count})"


def placement_table(rows):
    """Markdown lines: the table, for the sizes where some library it shows ran both near and far;
    [] when none did. Rows must carry their placement and pace (report.Cells sets them)."""
    lines = []
    for key, impls in sorted(_launches(rows).items()):
        shown = _shown(impls)
        if not any(impls[i]["near"] and impls[i]["far"] for i in shown):
            continue
        op, ranks, transport, size = key
        for impl in shown:
            near, far = impls[impl]["near"], impls[impl]["far"]
            ratio = f"{_median_us(far) / _median_us(near):.2f}" if near and far else "—"
            lines.append(f"| {op} {ranks} ranks {transport} {size_text(size)} | {name(impl)} | "
                         f"{_side(near)} | {_side(far)} | {ratio} |")
    if not lines:
        return []
    return ["### Near and far launches: each library's time", "",
            "Median time a call (us) over the launches with the cores near and over those with "
            "them far apart (how many launches; how many of them ran while the host was slow, "
            f"{SLOW_MARK}), and far ÷ near, from every launch of the run: what the placement costs "
            "each library (of Gloo's algorithms the fastest near). A slow host slows every "
            "library in either placement.", "",
            "| cell | library | near | far | far ÷ near |", "|---|---|---|---|---|"] + lines + [""]
