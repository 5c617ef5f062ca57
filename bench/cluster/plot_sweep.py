#!/usr/bin/env python3
"""Plots node_sweep.sh's CSV as an SVG: busbw against message size (log scale), one line per
node count (and ranks per node / algorithm when they vary), the link rate as a dashed line.

usage: plot_sweep.py sweep.csv sweep.svg
"""
import csv
import math
import re
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]


def rate_gbytes(rate):
    """tc rate ("1gbit", "500mbit", "100kbit") in GB/s; None when absent or unknown."""
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", (rate or "").strip().lower())
    if not m:
        return None
    scale = {"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1.0}[m.group(2)]
    return float(m.group(1)) * scale / 8


def size_label(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b / div:g} {unit}"
    return f"{b:g} B"


def nice_step(span):
    raw = span / 6
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(sys.argv[1])))
    if not rows:
        sys.exit("plot_sweep: no rows")
    keys = []
    series = {}
    style = {}  # label -> (node count's color index, algorithm's index)
    node_counts = sorted({int(r["nodes"]) for r in rows})
    algorithms = list(dict.fromkeys(r["algorithm"] for r in rows))
    vary_rpn = len({r["ranks_per_node"] for r in rows}) > 1
    vary_algo = len({r["algorithm"] for r in rows}) > 1
    for r in rows:
        label = f"{r['nodes']} node{'s' if r['nodes'] != '1' else ''}"
        if vary_rpn or r["ranks_per_node"] != "1":
            label += f" x {r['ranks_per_node']} ranks"
        if vary_algo:
            label += f" ({r['algorithm']})"
        if label not in series:
            keys.append(label)
            series[label] = []
            style[label] = (node_counts.index(int(r["nodes"])), algorithms.index(r["algorithm"]))
        series[label].append((int(r["size"]), float(r["busbw_gbps"])))
    rate = rate_gbytes(rows[0].get("rate"))
    # A single rank moves nothing (busbw 0); one host's shared memory runs far above any link:
    # say so in the legend and keep the scale for the network lines.
    notes = {}
    for label, pts in series.items():
        top_value = max(y for _, y in pts)
        if top_value == 0:
            notes[label] = " (one rank: no traffic)"
        elif rate and top_value > 4 * rate:
            notes[label] = f": off scale (max {top_value:.3g})"

    width, height = 1050, 560
    left, right, top, bottom = 90, 380, 60, 70
    pw, ph = width - left - right, height - top - bottom
    xs = [x for s in series.values() for x, _ in s]
    on_scale = [k for k in keys if "off scale" not in notes.get(k, "")]
    ys = [y for k in on_scale for _, y in series[k]] or [0.0]
    ys += [rate] if rate else []
    x0, x1 = math.log2(min(xs)), math.log2(max(xs))
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    y1 = max(ys) * 1.1 if max(ys) > 0 else 1.0
    step = nice_step(y1)
    y1 = math.ceil(y1 / step) * step

    def px(x):
        return left + (math.log2(x) - x0) / (x1 - x0) * pw

    def py(y):
        return top + ph - y / y1 * ph

    out = []
    add = out.append
    add(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">')
    add(f'<rect width="{width}" height="{height}" fill="white"/>')
    title = "Loom all-reduce bus bandwidth across node counts"
    if rows[0].get("rate"):
        title += f", links shaped to {rows[0]['rate']}"
    add(f'<text x="{left + pw / 2}" y="30" text-anchor="middle" font-size="16">{title}</text>')
    # Grid and axes.
    y = 0.0
    while y <= y1 + 1e-12:
        add(f'<line x1="{left}" y1="{py(y):.1f}" x2="{left + pw}" y2="{py(y):.1f}" stroke="#ddd"/>')
        add(f'<text x="{left - 8}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
        y += step
    e = math.ceil(x0)
    while e <= x1 + 1e-9:
        x = 2 ** e
        add(f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{top + ph}" stroke="#eee"/>')
        if (e - math.ceil(x0)) % 2 == 0 or x1 - x0 <= 8:
            add(f'<text x="{px(x):.1f}" y="{top + ph + 20}" text-anchor="middle">{size_label(x)}</text>')
        e += 1
    add(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
    add(f'<text x="{left + pw / 2}" y="{height - 20}" text-anchor="middle">'
        f'message size (bytes, log scale)</text>')
    add(f'<text x="22" y="{top + ph / 2}" text-anchor="middle" '
        f'transform="rotate(-90 22 {top + ph / 2})">busbw (GB/s)</text>')
    # The link rate.
    legend = []
    if rate:
        add(f'<line x1="{left}" y1="{py(rate):.1f}" x2="{left + pw}" y2="{py(rate):.1f}" '
            f'stroke="black" stroke-dasharray="6,4"/>')
        legend.append(("black", f"link {rows[0]['rate']} = {rate:g} GB/s", True))
    for i, label in enumerate(keys):
        color = COLORS[style[label][0] % len(COLORS)]
        dashed = style[label][1] > 0  # a second algorithm: same color, dashed
        legend.append((color, label + notes.get(label, ""), dashed))
        if label not in on_scale:
            continue
        pts = sorted(series[label])
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        dash = ' stroke-dasharray="3,3"' if dashed else ""
        add(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in pts:
            add(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
    for i, (color, label, dashed) in enumerate(legend):
        ly = top + 10 + i * 22
        dash = (' stroke-dasharray="6,4"' if color == "black" else ' stroke-dasharray="3,3"') \
            if dashed else ""
        add(f'<line x1="{left + pw + 15}" y1="{ly}" x2="{left + pw + 45}" y2="{ly}" '
            f'stroke="{color}" stroke-width="2"{dash}/>')
        add(f'<text x="{left + pw + 52}" y="{ly + 4}">{label}</text>')
    add("</svg>")
    open(sys.argv[2], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
