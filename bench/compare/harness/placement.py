"""What the host's placement costs each library: per configuration and size, each library's median
time over the launches that ran with the cores near and over those with them far apart, and far
over near. The targets judge Loom against the others launch by launch; this shows which library
the slow placement slows, and by how much, from the same launches (every launch of the run,
including those a repetition replaced)."""
import statistics
from collections import defaultdict

from .drivers import BOUND_TRANSPORT, LOOPBACK_TRANSPORT
from .report import name, size_text


def _times(rows):
    """(op, ranks, transport, size) -> impl -> placement -> [time_us] of every launch that ran."""
    out = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in rows:
        if r.op == "limit" or r.error or r.time_us is None or r.placement not in ("near", "far"):
            continue
        if r.transport in (BOUND_TRANSPORT, LOOPBACK_TRANSPORT):
            continue
        out[(r.op, r.ranks, r.transport, r.bytes)][r.impl][r.placement].append(r.time_us)
    return out


def _shown(impls):
    """Loom's variants, OpenMPI, and the Gloo algorithm fastest over all its launches."""
    gloo = [i for i in impls if i.startswith("gloo:")]
    best_gloo = min(gloo, key=lambda i: statistics.median(
        [t for ts in impls[i].values() for t in ts]), default=None)
    return [i for i in sorted(impls) if not i.startswith("gloo:")] + \
        ([best_gloo] if best_gloo else [])


def placement_table(rows):
    """Markdown lines: the table, for the sizes where some library ran both near and far; [] when
    no size did. Rows must carry their placement (report.Cells sets it)."""
    lines = []
    for key, impls in sorted(_times(rows).items()):
        if not any(p["near"] and p["far"] for p in impls.values()):
            continue
        op, ranks, transport, size = key
        for impl in _shown(impls):
            near, far = impls[impl]["near"], impls[impl]["far"]
            near_m = statistics.median(near) if near else None
            far_m = statistics.median(far) if far else None
            ratio = f"{far_m / near_m:.2f}" if near_m and far_m else "—"
            lines.append(
                f"| {op} {ranks} ranks {transport} {size_text(size)} | {name(impl)} | "
                + (f"{near_m:.1f} ({len(near)})" if near else "—") + " | "
                + (f"{far_m:.1f} ({len(far)})" if far else "—") + f" | {ratio} |")
    if not lines:
        return []
    return ["### Near and far launches: each library's time", "",
            "Median time a call (us) over the launches with the cores near and over those with "
            "them far apart (how many launches), and far ÷ near: what the placement costs each "
            "library in this run.", "",
            "| cell | library | near | far | far ÷ near |", "|---|---|---|---|---|"] + lines + [""]
