"""One library's figures in two runs of the comparison (before and after a change, each tree's
own harness): per cell, the median over repetitions in each run, their ratio as speed (after
over before: busbw ratio, or time ratio inverted at 8 B), each run's repetitions, and whether
either run's median lies inside the other's repetitions. The summary says how many cells moved
less than the tolerance, which is the machine's noise between runs, not a target."""
import statistics

from . import report

TOLERANCE = 0.06


def speed(before, after, size):
    """after over before as speed: > 1 is faster after."""
    if not before or not after:
        return None
    return before / after if report.latency(size) else after / before


def inside(value, reps):
    return min(reps) <= value <= max(reps)


def diff_report(before_rows, after_rows, impl="loom", tolerance=TOLERANCE):
    before, after = report.Cells(before_rows), report.Cells(after_rows)
    keys = sorted((k for k in before.values if k[4] == impl and k in after.values),
                  key=lambda k: (k[0], k[2] != "shm", k[1], k[3]))
    lines = [f"{report.name(impl)}, after ÷ before as speed (> 1: faster after); cells: the "
             "median over repetitions (busbw in GB/s; time in us at 8 B), each repetition in "
             "parentheses.", "",
             "| op | transport | ranks | size | before | after | after ÷ before | within the "
             "other's repetitions |", "|---|---|---|---|---|---|---|---|"]
    ratios, within, overlapping = [], 0, 0
    for key in keys:
        op, ranks, transport, size, _ = key
        b_reps = [before.values[key][r] for r in sorted(before.values[key])]
        a_reps = [after.values[key][r] for r in sorted(after.values[key])]
        b, a = statistics.median(b_reps), statistics.median(a_reps)
        ratio = speed(b, a, size)
        ratios.append(ratio)
        within += abs(ratio - 1) <= tolerance
        overlap = inside(a, b_reps) or inside(b, a_reps)
        overlapping += overlap

        def cell(v, reps):
            return (f"{report.fmt(v, size)} ("
                    f"{', '.join(report.fmt(x, size).replace(' us', '') for x in reps)})")

        lines.append(f"| {op} | {transport} | {ranks} | {report.size_text(size)} | "
                     f"{cell(b, b_reps)} | {cell(a, a_reps)} | **{ratio:.2f}** | "
                     f"{'yes' if overlap else 'no'} |")
    if not ratios:
        return f"No cell of {impl} is in both runs.", None
    med = statistics.median(ratios)
    lines += ["", f"Over {len(ratios)} cells: median after ÷ before {med:.2f}; {within} within "
              f"±{tolerance:.0%}; in {overlapping} one run's median lies inside the other's "
              f"repetitions; range {min(ratios):.2f}-{max(ratios):.2f}."]
    return "\n".join(lines), med
