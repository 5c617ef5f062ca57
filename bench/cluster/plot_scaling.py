#!/usr/bin/env python3
"""Plots train_scaling.sh's CSV as an SVG: samples/s against node count with the ideal (linear
from one node) dashed, and each node count's step time split into exposed communication and the
rest, as bars.

usage: plot_scaling.py scaling.csv scaling.svg
"""
import csv
import sys


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    nodes = [int(r["nodes"]) for r in rows]
    rate = [float(r["samples_per_s"]) for r in rows]
    step = [float(r["step_ms"]) for r in rows]
    exposed = [float(r["exposed_comm_ms"]) for r in rows]
    ideal = [rate[0] * n / nodes[0] for n in nodes]
    W, H, pad, gap = 900, 380, 60, 60
    pw = (W - 3 * pad - gap) / 2
    ph = H - 2 * pad
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>']

    def axes(x0, title, ylabel, ymax):
        svg.append(f'<text x="{x0 + pw / 2}" y="{pad - 25}" text-anchor="middle" '
                   f'font-size="14">{title}</text>')
        svg.append(f'<line x1="{x0}" y1="{pad + ph}" x2="{x0 + pw}" y2="{pad + ph}" stroke="black"/>')
        svg.append(f'<line x1="{x0}" y1="{pad}" x2="{x0}" y2="{pad + ph}" stroke="black"/>')
        for k in range(5):
            v = ymax * k / 4
            y = pad + ph - ph * k / 4
            svg.append(f'<line x1="{x0}" y1="{y}" x2="{x0 + pw}" y2="{y}" stroke="#ddd"/>')
            svg.append(f'<text x="{x0 - 6}" y="{y + 4}" text-anchor="end">{v:.0f}</text>')
        svg.append(f'<text x="{x0 - 45}" y="{pad + ph / 2}" text-anchor="middle" '
                   f'transform="rotate(-90 {x0 - 45} {pad + ph / 2})">{ylabel}</text>')
        svg.append(f'<text x="{x0 + pw / 2}" y="{H - 15}" text-anchor="middle">nodes</text>')

    # Left: throughput.
    x0 = 2 * pad
    ymax = max(ideal + rate) * 1.1
    axes(x0, "samples/s (ideal dashed)", "samples/s", ymax)
    xs = [x0 + pw * (i + 0.5) / len(nodes) for i in range(len(nodes))]
    y = lambda v: pad + ph - ph * v / ymax
    svg.append('<polyline fill="none" stroke="#999" stroke-dasharray="5,4" points="' +
               " ".join(f"{xs[i]},{y(ideal[i])}" for i in range(len(nodes))) + '"/>')
    svg.append('<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="' +
               " ".join(f"{xs[i]},{y(rate[i])}" for i in range(len(nodes))) + '"/>')
    for i, n in enumerate(nodes):
        svg.append(f'<circle cx="{xs[i]}" cy="{y(rate[i])}" r="4" fill="#1f77b4"/>')
        svg.append(f'<text x="{xs[i]}" y="{y(rate[i]) - 8}" text-anchor="middle">{rate[i]:.0f}</text>')
        svg.append(f'<text x="{xs[i]}" y="{pad + ph + 16}" text-anchor="middle">{n}</text>')

    # Right: step time, exposed communication on top of the rest.
    x0 = 2 * pad + pw + gap + pad
    ymax = max(step) * 1.15
    axes(x0, "step time (ms): compute and rest / exposed communication", "ms", ymax)
    bw = pw / len(nodes) * 0.5
    for i, n in enumerate(nodes):
        cx = x0 + pw * (i + 0.5) / len(nodes)
        rest = step[i] - exposed[i]
        h_rest, h_exp = ph * rest / ymax, ph * exposed[i] / ymax
        svg.append(f'<rect x="{cx - bw / 2}" y="{pad + ph - h_rest}" width="{bw}" height="{h_rest}" fill="#2ca02c"/>')
        svg.append(f'<rect x="{cx - bw / 2}" y="{pad + ph - h_rest - h_exp}" width="{bw}" height="{h_exp}" fill="#d62728"/>')
        svg.append(f'<text x="{cx}" y="{pad + ph - h_rest - h_exp - 6}" text-anchor="middle">{step[i]:.0f}</text>')
        svg.append(f'<text x="{cx}" y="{pad + ph + 16}" text-anchor="middle">{n}</text>')
    svg.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
