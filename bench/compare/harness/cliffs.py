"""The no-cliff check, judged against the machine: for each transport and rank count, Loom's busbw
over the machine's own curve at the same size, in the same repetition, must not fall by more than
the threshold (15%) from one size to the next. The curve is the memory bound (copy_footprint):
where the ranks' buffers leave a cache the bound falls with them, and so may Loom, by as much and
no more. Over TCP the bytes also cross the kernel's loopback path, which copies each into the
kernel and out again at a pace per byte that changes with the size where a plain copy's does not
(the 2-rank loopback exchange fell 33% from 2 to 4 MiB with the kernel's socket buffers and 43%
with Loom's 4 MiB, where the copy is flat: docs/results/cliffs-zen4-2026-12-06). So a tcp step is
also set against the loopback exchange (loopback_footprint, with Loom's socket buffers: every
byte a ring rank sends, nothing reduced; its median over the run), and a fall either curve shares
is the machine's: the step's change is the larger of its two fractions' changes. A fall of the
fraction is Loom's own."""
import statistics
from collections import defaultdict

from .drivers import BOUND, BOUND_TRANSPORT, LOOPBACK, LOOPBACK_TRANSPORT, SOCKBUF_NOTE
from .report import (OPS, SLOW_MARK, Cells, fmt, marks_of, name, placement_lines,
                     size_text)

THRESHOLD = 0.15


def paired_reps(cells, key, before):
    """(the repetitions a size's fall is judged over, all that measured both sizes): those whose
    two launches ran at the same pace of the host, both steady or both slow, where there are any.
    A launch in one of the host's slow spells and one out of it differ by the host, not by their
    sizes; a sweep's sizes share their launch and so their pace."""
    now, then = cells.values.get(key, {}), cells.values.get(before, {})
    both = [r for r in sorted(now) if r in then and then[r]]
    alike = [r for r in both
             if (SLOW_MARK in cells.mark(key, r)) == (SLOW_MARK in cells.mark(before, r))]
    return alike or both, both


# A reference curve: (its transport and impl in the rows, its name in the report).
MEMORY = (BOUND_TRANSPORT, BOUND, "the memory bound")
EXCHANGE = (LOOPBACK_TRANSPORT, LOOPBACK, "the loopback exchange")


def judged(cells, ref, key):
    """Whether a reference row may judge Loom's: the memory bound always, the loopback exchange
    only where it ran with Loom's socket buffers (older runs' used the kernel's sizing)."""
    return ref != EXCHANGE or SOCKBUF_NOTE in cells.choices.get(key, (0, ""))[1]


def yardsticks(cells, transport):
    """The curves a transport's Loom rows are judged against, those the run measured: the memory
    bound, and over tcp the loopback exchange besides where it ran with Loom's socket buffers
    (runs before it did, with the kernel's sizing, show it and judge against the bound alone)."""
    refs = (MEMORY, EXCHANGE) if transport == "tcp" else (MEMORY,)
    return [ref for ref in refs
            if any(k[2] == ref[0] and k[4] == ref[1] and judged(cells, ref, k)
                   for k in cells.values)]


def reference(cells, ref, op, ranks, size, rep=None):
    """A reference's busbw: the memory bound in one repetition, or the median of the run's where
    that repetition has none (or none was asked); the loopback exchange as the run's median
    always, and only where it ran with Loom's socket buffers; None where it was not measured.
    The exchange is a launch of its own at each size, whose pace moves between launches (1.5x
    between repetitions at one size): one repetition's figure would excuse, or make, a fall of
    Loom's by chance, where its median over the run is the kernel's curve."""
    key = (op, ranks, ref[0], size, ref[1])
    if ref == EXCHANGE:
        return cells.median(key) if judged(cells, ref, key) else None
    per_rep = cells.values.get(key, {})
    return (per_rep.get(rep) if rep is not None else None) or cells.median(key)


def fraction(cells, key, rep, ref):
    """Loom's busbw over the reference, one repetition; None without the reference."""
    op, ranks, _, size, _ = key
    b = reference(cells, ref, op, ranks, size, rep)
    v = cells.values.get(key, {}).get(rep)
    return v / b if v is not None and b else None


def step_change(cells, key, before, rep):
    """One repetition's change from the smaller size to this one: of Loom's fraction of each
    yardstick measured at both sizes, the larger (the one that explains more of a fall), else of
    the busbw itself."""
    changes = []
    for ref in yardsticks(cells, key[2]):
        now, then = fraction(cells, key, rep, ref), fraction(cells, before, rep, ref)
        if now is not None and then:
            changes.append(now / then)
    if changes:
        return max(changes)
    return cells.values[key][rep] / cells.values[before][rep]


def paired_change(cells, key, before):
    """The median over repetitions (paired_reps) of step_change, each repetition against itself:
    its sizes ran side by side (the check's sweep: in the same processes), so what a launch's
    placement or neighbours did to both cancels."""
    used, _ = paired_reps(cells, key, before)
    return statistics.median(step_change(cells, key, before, r) for r in used) if used else None


def reference_table(cells, impl, value, title, text):
    """A reference's busbw (the memory bound, the loopback exchange) per size and rank count, as
    the lines of a markdown section: `value(op, ranks, size)` is its median."""
    ranks = sorted({k[1] for k in cells.values if k[4] == impl})
    sizes = sorted({k[3] for k in cells.values if k[4] == impl})
    lines = [title, "", text, "",
             "| size | " + " | ".join(f"{n} ranks" for n in ranks) + " |",
             "|" + "---|" * (len(ranks) + 1)]
    for size in sizes:
        lines.append(f"| {size_text(size)} | " + " | ".join(
            fmt(value("allreduce", n, size), size) for n in ranks) + " |")
    return lines + [""]


def cliff_line(cells, impl, transport, c, prev_size, size, change):
    """The sentence for one cliff: the busbw and fraction at both sizes, per repetition, the
    choices."""
    key, before = (*c, size, impl), (*c, prev_size, impl)
    v, prev = cells.median(key), cells.median(before)
    used, both = paired_reps(cells, key, before)
    per_rep = [f"{100 * (step_change(cells, key, before, r) - 1):+.0f}%"
               + marks_of(cells, [key, before], r) for r in both]
    if len(used) < len(both):
        per_rep.append(f"judged over the {len(used)} whose launches ran at one pace")
    against = ""
    for ref in yardsticks(cells, transport):
        b, b_prev = (reference(cells, ref, c[0], c[1], s) for s in (size, prev_size))
        if b and b_prev:
            against += (f"; ÷ {ref[2][4:]} {prev / b_prev:.2f} → {v / b:.2f} ({ref[2][4:]} "
                        f"{b_prev:.2f} → {b:.2f} GB/s)")
    if not against:
        against = "; no yardstick measured at this step: judged on busbw"
    choices = [cells.choices.get((*c, s, impl), (0, "?"))[1] for s in (prev_size, size)]
    return (f"- {name(impl)} {transport}, {c[1]} ranks: {size_text(prev_size)} → "
            f"{size_text(size)}: {prev:.2f} → {v:.2f} GB/s{against}: −{100 * (1 - change):.0f}% "
            f"(per repetition {', '.join(per_rep)}); Loom: {choices[0]} → {choices[1]}")


def fmt_fraction(v, b):
    return "—" if v is None or not b else f"{v / b:.2f}"


def transport_tables(cells, op, transport, impl, configs, threshold):
    """The busbw table of one (op, transport, Loom variant) with its falls marked, the fraction
    table, and the cliffs' sentences."""
    sizes = sorted({s for c in configs for s in cells.sizes(c)})
    head = "| size | " + " | ".join(f"{c[1]} ranks" for c in configs) + " |"
    rule = "|" + "---|" * (len(configs) + 1)
    lines = [f"### {name(impl)}, {transport}: {OPS.get(op, op)}, busbw GB/s", "", head, rule]
    fractions, found = defaultdict(list), []
    refs = yardsticks(cells, transport)
    for i, size in enumerate(sizes):
        cell = []
        for ref in refs:
            fractions[ref].append(f"| {size_text(size)} | " + " | ".join(
                fmt_fraction(cells.median((*c, size, impl)),
                             reference(cells, ref, op, c[1], size)) for c in configs) + " |")
        for c in configs:
            key = (*c, size, impl)
            v = cells.median(key)
            text = fmt(v, size)
            before = (*c, sizes[i - 1], impl) if i else None
            change = paired_change(cells, key, before) if before and v is not None else None
            if change is not None and change < 1 - threshold:
                text = f"**{text} ▼{100 * (1 - change):.0f}% ✗**"
                found.append(cliff_line(cells, impl, transport, c, sizes[i - 1], size, change))
            cell.append(text)
        lines.append(f"| {size_text(size)} | " + " | ".join(cell) + " |")
    lines.append("")
    for ref in refs:
        if any(f.split(" | ", 1)[1].strip("| —") for f in fractions[ref]):
            judged = ("the figure the check judges" if len(refs) == 1 else
                      "one of the two figures the check judges: a step's change is the larger "
                      "of the two")
            lines += [f"{name(impl)}, {transport}: busbw ÷ {ref[2]} at the same size ({judged})",
                      "", head, rule] + fractions[ref] + [""]
    return lines, found


def cliff_report(rows, threshold=THRESHOLD):
    """Tables of Loom's busbw per transport (sizes x ranks), its fraction of each yardstick (the
    memory bound; over tcp the loopback exchange too), and the cliffs: a size where that fraction
    is more than `threshold` below the next smaller size's, as the median of the repetitions'
    changes (paired_change; over tcp the larger of the two fractions' changes). Where no
    yardstick was measured at a step, the busbw itself is judged. Returns (markdown, the number
    of cliffs)."""
    cells = Cells(rows)
    lines, found = [], []
    by_transport = defaultdict(list)
    for config in cells.configs():
        for impl in cells.impls(config):
            by_transport[(config[0], config[2], impl)].append(config)
    for (op, transport, impl), configs in sorted(by_transport.items()):
        table, cliffs = transport_tables(cells, op, transport, impl, configs, threshold)
        lines += table
        found += cliffs
    if any(k[4] == BOUND for k in cells.values):
        lines += reference_table(
            cells, BOUND, cells.bound, "### The memory bound, busbw GB/s",
            "Every rank reads its input and writes its output once, all ranks at once on the "
            "machine's cores (`copy_footprint`), as the busbw of an all-reduce that took that "
            "long. Where it falls from one size to the next, the ranks' buffers have left a "
            "cache: no collective keeps its busbw there, and the check asks Loom to keep its "
            "fraction of it (over tcp, of it or of the loopback exchange below).")
    if any(k[4] == LOOPBACK for k in cells.values):
        lines += reference_table(
            cells, LOOPBACK, cells.loopback, "### The loopback exchange, busbw GB/s",
            "Every rank sends the bytes a ring all-reduce's rank sends out of its input to the "
            "next over TCP on 127.0.0.1 and receives as many into its output, all ranks at once, "
            "nothing reduced, with Loom's socket buffers (`loopback_footprint`), as the busbw of "
            "an all-reduce that took that long. Every byte crosses the kernel's loopback path, "
            "whose pace per byte changes with the size where a plain copy's does not: a fall of "
            "Loom's tcp rows that this curve shares is the machine's.")
    lines += placement_lines(cells)
    lines += [f"Cliffs (busbw ÷ the memory bound at the same size, over tcp that fraction or "
              f"busbw ÷ the loopback exchange, whichever kept more of itself, more than "
              f"{100 * threshold:.0f}% below the next smaller size's, the median of the "
              f"repetitions' changes, over the repetitions whose launches of both sizes ran at "
              f"one pace of the host, where there are any): {len(found) or 'none'}", ""] + found
    return "\n".join(lines), len(found)
