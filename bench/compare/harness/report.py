"""Markdown tables from the measurements: per configuration each library's median of the
repetitions' medians, Loom's ratio to the best other library (and per repetition), the machine's
limits; and the no-cliff check over Loom's size sweeps."""
import statistics
from collections import defaultdict

from .drivers import BOUND, BOUND_TRANSPORT, LOOPBACK, LOOPBACK_TRANSPORT
from .limits import PACE_BYTES, PACE_RANKS

MEMCPY_WS = "memcpy-ws"  # measure.MEMCPY_WS: one thread's memcpy at a working set
LATENCY_BELOW = 64 << 10  # smaller sizes are reported as time (us), larger as busbw (GB/s)
NAMES = {"loom": "Loom", "loom-avx2": "Loom (AVX2)", "loom-shared": "Loom (alloc)",
         "loom-avx2-shared": "Loom (AVX2, alloc)", "mpi-vader": "OpenMPI vader",
         "mpi-tcp": "OpenMPI tcp", "torch-gloo": "PyTorch gloo", BOUND: "memory bound",
         MEMCPY_WS: "memcpy at the working set",
         LOOPBACK: "loopback exchange"}
OPS = {"allreduce": "f32 sum all-reduce", "alltoall": "all-to-all (size: each rank's buffer)"}
FAR_MARK = "†"  # a value measured with the cores far apart (see measure.py)
FAR_FACTOR = 2.0  # far: a round trip more than this times the run's fastest,
FAR_MARGIN_NS = 100.0  # and more than this above it (near ones here: 36, 60 or 80 ns; far: 300)


SLOW_MARK = "‡"  # a value measured while the host was slow (see measure.py)
# Slow: the loopback exchange around a launch more than this times the run's fastest. On the 2-core
# Zen 4, launches whose calls ran at their usual speed saw 1.0-1.1x, launches whose calls ran
# 1.5-2x slower 1.4-1.8x (2 ranks over TCP at 2 MiB: docs/results/host-pace-2026-11-29).
SLOW_FACTOR = 1.3


def is_far(ns, fastest):
    return ns > max(FAR_FACTOR * fastest, fastest + FAR_MARGIN_NS)


def is_slow(us, fastest):
    return us > SLOW_FACTOR * fastest


def name(impl):
    return NAMES.get(impl, impl.replace("gloo:", "Gloo ").replace("loom-", "Loom "))


def size_text(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def latency(size):
    return size < LATENCY_BELOW


def better(a, b, size):
    """a beats b: a lower time at latency sizes, a higher busbw otherwise."""
    return a < b if latency(size) else a > b


RING_LIMIT = "iperf3-ring-"


def ring_limit(ranks):
    """The name of the limit row of `ranks` loopback streams at once (limits.iperf3_ring_gbps)."""
    return f"{RING_LIMIT}{ranks}"


class Cells:
    """Per (op, ranks, transport, size, impl): the value of each repetition. Where a repetition
    ran a configuration more than once (a launch with the cores far apart runs again, and one
    while the host was slow with --slow-retries: measure.execute), its value is the last
    undisturbed launch's, or the last launch's when none was; `marks` holds, per (key, rep) whose
    value is from a disturbed launch, FAR_MARK and/or SLOW_MARK."""

    def __init__(self, rows):
        self.values = defaultdict(dict)
        self.marks = {}
        self.choices = {}
        self.limits = defaultdict(dict)
        # Judged again against the whole run's fastest probes: the run judged each launch against
        # the fastest seen until then.
        measured = [r for r in rows if r.op != "limit" and r.core_to_core_ns is not None]
        fastest = min((r.core_to_core_ns for r in measured), default=None)
        for r in measured:
            r.placement = "far" if is_far(r.core_to_core_ns, fastest) else "near"
        self.placements = measured
        paced = [r for r in rows if r.op != "limit" and r.pace_us is not None]
        fastest = min((r.pace_us for r in paced), default=None)
        for r in paced:
            r.pace = "slow" if is_slow(r.pace_us, fastest) else "steady"
        self.paces = paced
        for r in rows:
            if r.op == "limit":
                if r.busbw_gbps is not None:
                    self.limits[r.impl][r.rep] = r.busbw_gbps
                continue
            key = (r.op, r.ranks, r.transport, r.bytes, r.impl)
            if r.error or r.busbw_gbps is None:
                continue
            mark = (FAR_MARK if r.placement == "far" else "") + \
                (SLOW_MARK if r.pace == "slow" else "")
            if mark and r.rep in self.values[key] and (key, r.rep) not in self.marks:
                continue  # this repetition already has an undisturbed launch
            self.values[key][r.rep] = r.time_us if latency(r.bytes) else r.busbw_gbps
            # The choice of the first repetition's kept launch (the init probe, and so the
            # choice, may differ between a disturbed launch and its undisturbed one).
            if r.choice and (key not in self.choices or r.rep <= self.choices[key][0]):
                self.choices[key] = (r.rep, r.choice)
            if mark:
                self.marks[(key, r.rep)] = mark
            else:
                self.marks.pop((key, r.rep), None)

    def mark(self, key, rep):
        """What disturbed the launch a repetition's value is from: "" when nothing did."""
        return self.marks.get((key, rep), "")

    def marked(self, symbol):
        """How many per-repetition values carry this mark."""
        return sum(symbol in m for m in self.marks.values())

    def median(self, key):
        per_rep = self.values.get(key)
        return statistics.median(per_rep.values()) if per_rep else None

    def configs(self):
        """(op, ranks, transport) of the libraries' measurements (not the references': the
        memory bound's, the loopback exchange's)."""
        return sorted({k[:3] for k in self.values
                       if k[2] not in (BOUND_TRANSPORT, LOOPBACK_TRANSPORT)},
                      key=lambda c: (c[0], c[1], c[2] != "shm"))

    def bound(self, op, ranks, size):
        """The memory bound as busbw, the median over repetitions."""
        return self.median((op, ranks, BOUND_TRANSPORT, size, BOUND))

    def memcpy_ws(self, op, ranks, size):
        """One thread's memcpy at the working set of (op, ranks, size), the median over
        repetitions (measure.MEMCPY_WS)."""
        return self.median((op, ranks, BOUND_TRANSPORT, size, MEMCPY_WS))

    def loopback(self, op, ranks, size):
        """The loopback exchange as busbw, the median over repetitions."""
        return self.median((op, ranks, LOOPBACK_TRANSPORT, size, LOOPBACK))

    def sizes(self, config):
        return sorted({k[3] for k in self.values if k[:3] == config})

    def impls(self, config):
        return sorted({k[4] for k in self.values if k[:3] == config})

    def limit(self, what):
        v = self.limits.get(what)
        return statistics.median(v.values()) if v else None


def fmt(v, size):
    if v is None:
        return "—"
    return f"{v:.1f} us" if latency(size) else f"{v:.2f}"


def best_of(cells, config, size, impls, rep=None):
    """(impl, value) of the best among impls at one size: over medians, or in one repetition."""
    best = (None, None)
    for impl in impls:
        key = (*config, size, impl)
        v = cells.median(key) if rep is None else cells.values.get(key, {}).get(rep)
        if v is not None and (best[1] is None or better(v, best[1], size)):
            best = (impl, v)
    return best


def ratio(loom, other, size):
    """Loom's advantage: busbw ratio, or the time ratio at latency sizes (lower is better)."""
    if loom is None or not other:
        return None
    return loom / other


def config_table(cells, config):
    op, ranks, transport = config
    impls = cells.impls(config)
    looms = [i for i in impls if i.startswith("loom")]
    others = [i for i in impls if not i.startswith("loom")]
    glooes = [i for i in others if i.startswith("gloo:")]
    columns = [i for i in others if not i.startswith("gloo:")]
    reps = sorted({rep for k, v in cells.values.items() if k[:3] == config for rep in v})
    head = ["size", *map(name, looms), *map(name, columns)]
    if glooes:
        head.append("best Gloo")
    head += ["best other"] + [f"{name(l)} ÷ best other" for l in looms]
    # The machine's yardsticks at the same working set: the fraction of the memory bound that Loom
    # reaches (every transport: the no-cliff rule judges each against it), and one thread's memcpy
    # of every rank's input into as many outputs.
    bounded = "loom" in looms and any(cells.bound(op, ranks, s) for s in cells.sizes(config))
    if bounded:
        head += ["memory bound", "Loom ÷ memory bound"]
    copied = any(cells.memcpy_ws(op, ranks, s) for s in cells.sizes(config))
    if copied:
        head.append("memcpy at the working set (GB/s)")
    lines = [f"### {ranks} ranks, {transport}: {OPS.get(op, op)}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in cells.sizes(config):
        cell = [size_text(size) + (" (time)" if latency(size) else "")]
        cell += [fmt(cells.median((*config, size, i)), size) for i in looms + columns]
        if glooes:
            g, v = best_of(cells, config, size, glooes)
            cell.append(f"{fmt(v, size)} ({g[5:]})" if g else "—")
        b, bv = best_of(cells, config, size, others)
        cell.append(f"{fmt(bv, size)} ({name(b)})" if b else "—")
        for loom in looms:
            r = ratio(cells.median((*config, size, loom)), bv, size)
            per_rep = []
            for rep in reps:
                b_rep, rb = best_of(cells, config, size, others, rep)
                rr = ratio(cells.values.get((*config, size, loom), {}).get(rep), rb, size)
                marks = marks_of(cells, [(*config, size, loom)] +
                                 ([(*config, size, b_rep)] if b_rep else []), rep)
                per_rep.append("—" if rr is None else f"{rr:.2f}{marks}")
            cell.append("—" if r is None else f"**{r:.2f}** ({', '.join(per_rep)})")
        if bounded:
            b = cells.bound(op, ranks, size)
            v = cells.median((*config, size, "loom"))
            cell += [fmt(b, size), "—" if b is None or v is None else f"{v / b:.2f}"]
        if copied:
            cell.append(fmt(cells.memcpy_ws(op, ranks, size), size))
        lines.append("| " + " | ".join(cell) + " |")
    lines.append("")
    if bounded:
        what = {"allreduce": "all-reduce", "alltoall": "all-to-all"}.get(op, op)
        lines += ["Memory bound: every rank reads its input and writes its output once, all ranks "
                  "at once on the machine's cores (`copy_footprint`: the faster of memcpy and "
                  f"non-temporal stores), as the busbw an {what} taking that long would report. "
                  f"No {what} moves fewer bytes through memory than these 2 x size per rank.",
                  ""]
    if copied:
        lines += ["memcpy at the working set: one thread copying every rank's input (ranks x "
                  "size bytes) into as many bytes, in the same repetitions (GB/s copied).", ""]
    largest = max(s for s in cells.sizes(config))
    limit = cells.limit("memcpy" if transport == "shm" else "iperf3")
    if limit and not latency(largest):
        for loom in looms:
            v = cells.median((*config, largest, loom))
            if v is not None:
                what = "single-thread memcpy" if transport == "shm" else "one iperf3 stream"
                text = (f"{name(loom)} at {size_text(largest)}: {v / limit:.2f} x {what} "
                        f"({limit:.2f} GB/s)")
                both = cells.limit("iperf3-opposite") if ranks == 2 else None
                ring = cells.limit(ring_limit(ranks)) if ranks > 2 else None
                if transport != "shm" and both:
                    text += (f"; {v / both:.2f} x what each of two opposite streams carried at "
                             f"once ({both:.2f} GB/s)")
                if transport != "shm" and ring:
                    text += (f"; {v / ring:.2f} x what each of {ranks} streams carried at once "
                             f"({ring:.2f} GB/s: a ring's links with no reduction, from buffers "
                             f"in the cache)")
                    b, bv = best_of(cells, config, largest, others)
                    if b:
                        text += f"; {name(b)} {bv / ring:.2f} x"
                lines.append(text + ".  ")
        lines.append("")
    return lines


def gloo_table(cells, config):
    glooes = [i for i in cells.impls(config) if i.startswith("gloo:")]
    if len(glooes) < 2:
        return []
    op, ranks, _ = config
    lines = [f"Every Gloo algorithm, {ranks} ranks, {OPS.get(op, op)}:", "",
             "| size | " + " | ".join(g[5:] for g in glooes) + " |",
             "|" + "---|" * (len(glooes) + 1)]
    for size in cells.sizes(config):
        lines.append(f"| {size_text(size)} | " +
                     " | ".join(fmt(cells.median((*config, size, g)), size) for g in glooes) +
                     " |")
    return lines + [""]


def limits_table(cells):
    reps = sorted({rep for v in cells.limits.values() for rep in v})
    if not reps:
        return []
    lines = ["| limit | " + " | ".join(f"rep {r}" for r in reps) + " | median |",
             "|" + "---|" * (len(reps) + 2)]
    for what, label in (("memcpy", "single-thread memcpy (GB/s)"),
                        ("iperf3", "iperf3 loopback, one stream (GB/s)"),
                        ("iperf3-opposite",
                         "iperf3 loopback, two opposite streams at once, each (GB/s)"),
                        *((ring_limit(n), f"iperf3 loopback, {n} streams at once, each (GB/s)")
                          for n in sorted(int(w[len(RING_LIMIT):]) for w in cells.limits
                                          if w.startswith(RING_LIMIT)))):
        v = cells.limits.get(what, {})
        med = cells.limit(what)
        lines.append(f"| {label} | " + " | ".join(f"{v[r]:.2f}" if r in v else "—" for r in reps)
                     + f" | {'—' if med is None else f'{med:.2f}'} |")
    return lines + [""]


def marks_of(cells, keys, rep):
    """The marks of the launches a per-repetition figure is made of, each mark once."""
    found = "".join(cells.mark(k, rep) for k in keys)
    return "".join(m for m in (FAR_MARK, SLOW_MARK) if m in found)


def probe_text(cells, rows, value, state, calm, disturbed, mark, head, unit, ran, marked_where):
    """One probe's sentence: the range of `value` over the launches whose `state` was `calm`, and
    how many were `disturbed` (each run judges against its own best, so its best launch is calm).
    `ran` says how the disturbed launches ran, around the range of their values ("{}")."""
    calm_v = sorted(value(r) for r in rows if state(r) == calm)
    text = f"{head} {calm_v[0]:.0f}-{calm_v[-1]:.0f} {unit} around {len(calm_v)} launches"
    hit = sorted(value(r) for r in rows if state(r) == disturbed)
    if hit:
        text += (f"; {len(hit)} of {len(rows)} launches ran "
                 f"{ran.format(f'{hit[0]:.0f}-{hit[-1]:.0f} {unit}')}. A repetition's {calm} "
                 f"launch replaces its {disturbed} one; {cells.marked(mark)} per-repetition values "
                 f"are from a {disturbed} launch (marked {mark}{marked_where}; a median may "
                 f"include one)")
    return text + "."


def placement_lines(cells):
    """What the probes around the launches saw: how many ran with the cores far apart, how many
    while the host was slow."""
    lines = []
    if cells.placements:
        lines += [probe_text(cells, cells.placements, value=lambda r: r.core_to_core_ns,
                             state=lambda r: r.placement, calm="near", disturbed="far",
                             mark=FAR_MARK, head="Placement: core-to-core round trip", unit="ns",
                             ran="with the cores far apart ({})",
                             marked_where=" among the per-repetition figures"), ""]
    else:
        lines += ["Placement: not measured.", ""]
    if cells.paces:
        lines += [probe_text(cells, cells.paces, value=lambda r: r.pace_us,
                             state=lambda r: r.pace, calm="steady", disturbed="slow",
                             mark=SLOW_MARK,
                             head=f"Host pace: the loopback exchange at {PACE_RANKS} ranks and "
                                  f"{size_text(PACE_BYTES)} (`loopback_footprint`, timed before "
                                  f"and after every launch; the slower of the two) ran",
                             unit="us",
                             ran=f"while it took more than {SLOW_FACTOR}x the run's fastest "
                                 f"({{}}): the host was slow",
                             marked_where=""), ""]
    else:
        lines += ["Host pace: not measured.", ""]
    return lines


def compare_report(rows):
    cells = Cells(rows)
    lines = ["Cells: the median over repetitions of each repetition's median (busbw in GB/s; "
             "time in us at 8 B). Ratios: Loom's busbw over the best other library's (at 8 B: "
             "Loom's time over the best other's, lower is better), from the medians, and in "
             "parentheses per repetition.", ""]
    lines += placement_lines(cells)
    lines += ["Machine limits, measured in the same run:", ""]
    lines += limits_table(cells)
    for config in cells.configs():
        lines += config_table(cells, config)
        lines += gloo_table(cells, config)
    # Imported here: placement.py takes its names from this module.
    from .placement import placement_table
    lines += placement_table(rows)
    return "\n".join(lines)
