"""The PyTorch backends' report (torch_speed.py): issue 60's figures as ratios against gloo (or
loom on ordinary tensors), each library's median of the repetitions' medians, and every
repetition's value beside it; the machine's memcpy bandwidth and what the probes around the
launches saw."""
import statistics
from collections import defaultdict

from .report import FAR_MARK, SLOW_MARK, is_far, is_slow, size_text

MIB = 1 << 20


class Figures:
    """Per (part, op, ranks, bytes, impl): each repetition's row (the launch that gave a value),
    with the probes judged against the whole run's fastest."""

    def __init__(self, rows):
        probed = [r for r in rows if r.part != "limit"]
        fastest_ns = min((r.core_to_core_ns for r in probed if r.core_to_core_ns), default=None)
        fastest_us = min((r.pace_us for r in probed if r.pace_us), default=None)
        for r in probed:
            if r.core_to_core_ns:
                r.placement = "far" if is_far(r.core_to_core_ns, fastest_ns) else "near"
            if r.pace_us:
                r.pace = "slow" if is_slow(r.pace_us, fastest_us) else "steady"
        self.rows = defaultdict(dict)
        self.reps = sorted({r.rep for r in rows})
        self.failed = [r for r in rows if r.error]
        self.launches = probed
        for r in rows:
            if not r.error:
                self.rows[(r.part, r.op, r.ranks, r.bytes, r.impl)][r.rep] = r

    def value(self, key, rep, time):
        r = self.rows.get(key, {}).get(rep)
        return None if r is None else (r.time_us if time else r.rate)

    def median(self, key, time):
        v = [self.value(key, rep, time) for rep in self.reps]
        v = [x for x in v if x is not None]
        return statistics.median(v) if v else None

    def mark(self, key, rep):
        r = self.rows.get(key, {}).get(rep)
        if r is None:
            return ""
        return (FAR_MARK if r.placement == "far" else "") + (SLOW_MARK if r.pace == "slow" else "")

    def keys(self, part):
        return sorted(k for k in self.rows if k[0] == part)


def per_rep(fig, key, ref, time, digits=2):
    """Each repetition's ratio key / ref (or value, without ref), with its launches' marks."""
    out = []
    for rep in fig.reps:
        v = fig.value(key, rep, time)
        r = fig.value(ref, rep, time) if ref else 1.0
        marks = "".join(dict.fromkeys(fig.mark(key, rep) + (fig.mark(ref, rep) if ref else "")))
        out.append("—" if v is None or not r else f"{v / r:.{digits}f}{marks}")
    return ", ".join(out)


def fmt(v, time):
    if v is None:
        return "—"
    if time:
        return f"{v / 1e3:.2f} ms" if v >= 1e4 else f"{v:.1f} us"
    return f"{v:.0f}" if v >= 100 else f"{v:.2f}"


def targets(settings, ranks_list):
    """(label, ranks, key, reference key or None, time?, target as (op, bound))."""
    out = []
    for n in ranks_list:
        out += [
            (f"DDP samples/s, MLP {settings.ddp_layers.replace(',', '-')}, batch "
             f"{settings.batch}/rank", n, ("ddp", "ddp", n, 0, "loom"),
             ("ddp", "ddp", n, 0, "gloo"), False, (">=", 1.3)),
            ("FSDP2 step time, loom-alloc (buffers from the process group)", n,
             ("fsdp", "fsdp", n, 0, "loom-alloc"), ("fsdp", "fsdp", n, 0, "gloo"), True,
             ("<=", 0.4)),
            ("FSDP2 step time, loom (ordinary buffers; for the record)", n,
             ("fsdp", "fsdp", n, 0, "loom"), ("fsdp", "fsdp", n, 0, "gloo"), True, ("<=", 0.4)),
            ("all_reduce 64 MiB busbw", n, ("collectives", "allreduce", n, 64 * MIB, "loom"),
             ("collectives", "allreduce", n, 64 * MIB, "gloo"), False, (">=", 2.0)),
            ("all_reduce 8 B time", n, ("collectives", "allreduce", n, 8, "loom"),
             ("collectives", "allreduce", n, 8, "gloo"), True, ("<=", 0.1)),
            ("isend/irecv pipeline step, 8 B, the next irecv posted ahead (time; no issue "
             "target: at most gloo's)", n, ("collectives", "sendrecv", n, 8, "loom"),
             ("collectives", "sendrecv", n, 8, "gloo"), True, ("<=", 1.0)),
        ]
        for op, call in (("allreduce", "all_reduce"), ("allgather", "all_gather_into_tensor")):
            for size in (MIB, 4 * MIB, 16 * MIB, 64 * MIB):
                out.append((f"{call} {size_text(size)} busbw, allocate_tensor ÷ ordinary "
                            f"(loom both)", n, ("collectives", op, n, size, "loom-alloc"),
                            ("collectives", op, n, size, "loom"), False, (">=", 1.5)))
    out.append(("binding's cost per call (us, extension)", 1,
                ("overhead", "call", 1, 4, "extension"), None, True, ("<=", 5.0)))
    return out


def met(value, target):
    op, bound = target
    if value is None:
        return "—"
    return "yes" if (value >= bound if op == ">=" else value <= bound) else "**no**"


def figures_table(fig, settings, ranks_list):
    lines = ["## Issue 60's figures", "",
             "Ratio: the first library's median of the repetitions' medians over the "
             "reference's (a time ratio where the figure is a time: lower is better); per "
             "repetition, each repetition's two launches against each other.", "",
             "| figure | ranks | value | reference | ratio | per repetition | target | met |",
             "|---|---|---|---|---|---|---|---|"]
    for label, n, key, ref, time, target in targets(settings, ranks_list):
        if key not in fig.rows:
            continue
        v = fig.median(key, time)
        if ref is None:
            lines.append(f"| {label} | {n} | {fmt(v, time)} | — | — | "
                         f"{per_rep(fig, key, None, time)} | {target[0]} {target[1]} | "
                         f"{met(v, target)} |")
            continue
        r = fig.median(ref, time)
        ratio = v / r if v is not None and r else None
        lines.append(f"| {label} | {n} | {fmt(v, time)} ({key[4]}) | {fmt(r, time)} ({ref[4]}) | "
                     f"{'—' if ratio is None else f'**{ratio:.2f}**'} | "
                     f"{per_rep(fig, key, ref, time)} | {target[0]} {target[1]} | "
                     f"{met(ratio, target)} |")
    return lines + [""]


WHAT = {"allreduce": "all_reduce", "allgather": "all_gather_into_tensor",
        "sendrecv": "isend/irecv pipeline step", "ddp": "DDP step",
        "fsdp": "FSDP2 step", "call": "one call"}


def what(key):
    """A row's label, and whether its figure is a time: a collective below 64 KiB, a step, a
    call; busbw (GB/s) otherwise."""
    part, op, _, size, _ = key
    if part != "collectives":
        return f"{WHAT[op]} (time)", True
    time = size < 64 << 10
    return f"{WHAT[op]} {size_text(size)} ({'time' if time else 'busbw GB/s'})", time


def every_rep_table(fig):
    """Every repetition's value per (part, op, ranks, size, library), and their median."""
    order = {"collectives": 0, "ddp": 1, "fsdp": 2, "overhead": 3}
    ops = list(WHAT)
    keys = sorted((k for k in fig.rows if k[0] in order),
                  key=lambda k: (order[k[0]], k[2], ops.index(k[1]), k[3], k[4]))
    lines = ["## Every repetition", "",
             "Each launch's median over its calls (steps) of the slowest rank's time; the "
             "collectives' busbw from it (nccl-tests' factors; all-gather's size is its "
             "output's). A step's samples/s: ranks x batch / its time.", "",
             "| figure | ranks | library | " + " | ".join(f"rep {r}" for r in fig.reps) +
             " | median |", "|" + "---|" * (len(fig.reps) + 4)]
    for key in keys:
        label, time = what(key)
        cells = []
        for rep in fig.reps:
            v = fig.value(key, rep, time)
            cells.append(fmt(v, time) + fig.mark(key, rep) if v is not None else "—")
        lines.append(f"| {label} | {key[2]} | {key[4]} | " + " | ".join(cells) +
                     f" | {fmt(fig.median(key, time), time)} |")
    return lines + [""]


def machine_lines(rows, fig):
    memcpy = {r.rep: r.rate for r in rows if r.part == "limit" and r.rate}
    lines = ["## The machine", ""]
    if memcpy:
        lines.append("Single-thread memcpy at 64 MiB (GB/s): " +
                     ", ".join(f"rep {rep} {v:.2f}" for rep, v in sorted(memcpy.items())) +
                     f"; median {statistics.median(memcpy.values()):.2f}.  ")
    launches = {(r.rep, r.part, r.op, r.ranks, r.impl if r.part != "overhead" else ""): r
                for r in fig.launches}.values()
    paced = [r.pace_us for r in launches if r.pace_us]
    slow = sum(1 for r in launches if r.pace == "slow")
    far = sum(1 for r in launches if r.placement == "far")
    if paced:
        lines.append(f"Host pace: the loopback exchange around each launch took "
                     f"{min(paced):.0f}-{max(paced):.0f} us; {slow} of {len(paced)} launches ran "
                     f"while it took over 1.3x the run's fastest (the host's slow mode, marked "
                     f"{SLOW_MARK}).  ")
    else:
        lines.append("Host pace: not measured (loopback_footprint not built).  ")
    placed = [r for r in launches if r.core_to_core_ns]
    if placed:
        lines.append(f"Placement: {far} of {len(placed)} launches ran with the cores far apart "
                     f"(marked {FAR_MARK}).")
    described = next((r.note for r in fig.launches if r.impl.startswith("loom") and
                      r.part == "collectives" and "rank 0/" in r.note), "")
    lines += ["", "gloo runs over loopback TCP (its only transport on the CPU); loom over what it "
              "picks on one host" + (f" (rank 0/{described.split('rank 0/', 1)[1]})."
                                     if described else "."), ""]
    if fig.failed:
        lines += ["Failed launches (after a second try):", ""]
        lines += [f"- rep {r.rep} {r.part} {r.op} {r.ranks} ranks {r.impl}: {r.error}"
                  for r in fig.failed if r.part != "limit"]
        lines.append("")
    retried = [r for r in fig.launches if r.tries > 1 and not r.error]
    if retried:
        lines += [f"Retried: {len(retried)} rows came from a second launch (see results.csv, "
                  f"column note).", ""]
    return lines


def report(rows, settings):
    fig = Figures(rows)
    ranks_list = sorted({r.ranks for r in rows if r.part in ("collectives", "ddp", "fsdp")})
    lines = figures_table(fig, settings, ranks_list)
    lines += every_rep_table(fig)
    lines += machine_lines(rows, fig)
    return "\n".join(lines)
