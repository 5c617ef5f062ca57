#!/usr/bin/env python3
"""The table of bench/cluster/nodes_table.sh's run: nodes_report.py DIR (DIR/runs.csv, DIR/links.csv).

For each link rate and node count: every library's median over repetitions (each repetition one
launch, its figure the median over calls of the slowest rank), every repetition listed; Loom's
(the cost model's choice; loom:ALGO columns force one algorithm) ratio to the best other (their
time / Loom's, overall and per repetition); and Loom's share of the links' bound. An all-reduce
of S bytes over N nodes must send 2(N-1)/N x S bytes out of every node (reduce-scatter and
all-gather between nodes, whatever happens inside them), so its time is at least that over the
rate each node's link carries while every node sends at once. The bound named is the lowest of:
the shaped rate, one iperf3 stream between two nodes, and the slowest of N streams at once (node
i to node i+1) - where the streams at once fall short of the rate, the shared cores, not the
link, limit the streams. iperf3 reduces nothing and its buffers stay in the cache: the cores'
reference is a flat ring's transfers alone, every rank over loopback TCP at once, nothing reduced
(DIR/cores.csv, loopback_footprint). Where it takes longer than the bytes take over the link, the
cores are the bound named, and Loom's share is that reference time over Loom's (a reference, not
a floor: an algorithm that sends fewer bytes over TCP may beat it). A failed launch counts in no
median; the table shows it as nan."""
import csv
import math
import os
import re
import statistics
import sys
from collections import defaultdict


def rate_gbits(rate):
    num = float(rate.rstrip("gbitmk"))
    return num if rate.endswith("gbit") else num / 1000 if rate.endswith("mbit") else math.nan


def number(text):
    try:
        return float(text)
    except ValueError:
        return math.nan


def summarize(folder):
    """One dict a bed (rate, node count), in order of rate, then nodes."""
    runs = defaultdict(lambda: defaultdict(list))  # (rate, nodes) -> impl -> [(rep, us, choice)]
    per_node, size = {}, {}
    with open(f"{folder}/runs.csv") as f:
        for row in csv.DictReader(f):
            key = (row["rate"], int(row["nodes"]))
            runs[key][row["impl"]].append((int(row["rep"]), number(row["time_us"]), row["choice"]))
            per_node[key], size[key] = int(row["ranks_per_node"]), int(row["bytes"])
    links = defaultdict(list)  # (rate, nodes) -> [(streams, [gbit/s each])]
    with open(f"{folder}/links.csv") as f:
        for row in csv.DictReader(f):
            links[(row["rate"], int(row["nodes"]))].append(
                (int(row["streams"]), [number(x) for x in row["gbits_each"].split(";")]))
    cores = defaultdict(list)  # (rate, nodes) -> [pass_us]
    if os.path.exists(f"{folder}/cores.csv"):
        with open(f"{folder}/cores.csv") as f:
            for row in csv.DictReader(f):
                cores[(row["rate"], int(row["nodes"]))].append(number(row["pass_us"]))
    beds = []
    for key in sorted(runs, key=lambda k: (rate_gbits(k[0]), k[1])):
        rate, nodes = key
        libs = runs[key]
        med = {impl: statistics.median([t for _, t, _ in reps if not math.isnan(t)] or [math.nan])
               for impl, reps in libs.items()}
        one = [e for s, each in links[key] if s == 1 for e in each]
        at_once = [min(each) for s, each in links[key] if s == nodes]
        bounds = {"the shaped rate": rate_gbits(rate)}
        if one:
            bounds["one iperf3 stream"] = min(one)
        if at_once:
            bounds[f"{nodes} iperf3 streams at once"] = min(at_once)
        which = min(bounds, key=bounds.get)
        link_bytes = 2 * (nodes - 1) / nodes * size[key]
        link_us = link_bytes * 8 / bounds[which] / 1e3
        passes = [p for p in cores[key] if not math.isnan(p)]
        cores_us = min(passes) if passes else math.nan
        bed = {"rate": rate, "nodes": nodes, "per_node": per_node[key], "size": size[key],
               "libs": libs, "median": med, "one": one, "at_once": at_once, "bound_name": which,
               "bound_gbits": bounds[which], "link_us": link_us, "cores": cores[key],
               "cores_bound": cores_us > link_us, "best": None}
        others = {i: m for i, m in med.items() if not i.startswith("loom") and not math.isnan(m)}
        if not math.isnan(med.get("loom", math.nan)) and others:
            best = min(others, key=others.get)
            loom_reps = {r: t for r, t, _ in libs["loom"]}
            best_reps = {r: t for r, t, _ in libs[best]}
            bed["best"] = best
            bed["ratio"] = others[best] / med["loom"]
            bed["per_rep"] = [best_reps[r] / loom_reps[r] for r in sorted(loom_reps)
                              if r in best_reps]
            bed["share"] = (cores_us if bed["cores_bound"] else link_us) / med["loom"]
            bed["forced"] = {i: others[best] / m for i, m in med.items()
                             if i.startswith("loom:") and not math.isnan(m)}
        beds.append(bed)
    return beds


def what_ran(reps):
    """What ran Loom's timed calls in each repetition, counted: the algorithm a trial kept
    ("ring (kept by a trial: ...)", or in older runs "... ; ring kept after a trial (...)"), else
    the one chosen or forced (the choice's first word), e.g. "hierarchical 2 of 3, ring 1 of 3
    (after a trial in 3)"."""
    kept, trials = defaultdict(int), 0
    for _, _, choice in reps:
        match = (re.match(r"([a-z_]+) \(kept by a trial", choice)
                 or re.search(r"([a-z_]+) kept after a trial", choice))
        trials += match is not None
        name = match.group(1) if match else (choice.split() or ["?"])[0]
        kept[name] += 1
    counts = ", ".join(f"{name} {n} of {len(reps)}" for name, n in sorted(kept.items()))
    return counts + (f" (after a trial in {trials})" if trials else "")


def main(folder):
    print("# Nodes x ranks on the test bed: f32 sum all-reduce\n")
    print("Times in ms: the median of the repetitions (each a fresh launch; its figure the median "
          "over calls of the slowest rank), every repetition listed. Ratio: the best other "
          "library's median time / Loom's, and per repetition. Share of the bound: the bound's "
          "time over Loom's (the link's: 2(N-1)/N x S bytes out of each node at the rate named; "
          "the cores': their reference, nodes_report.py says why).\n")
    for bed in summarize(folder):
        nodes, med = bed["nodes"], bed["median"]
        print(f"## {nodes} nodes x {bed['per_node']} ranks, links {bed['rate']}, "
              f"{bed['size'] >> 20} MiB\n")
        print(f"Links, measured before and after the launches: one stream "
              f"{', '.join(f'{x:.3f}' for x in bed['one'])} Gbit/s; {nodes} at once, the slowest "
              f"of each measure {', '.join(f'{x:.3f}' for x in bed['at_once'])} Gbit/s. "
              f"The link: {bed['bound_name']}, {bed['bound_gbits']:.3f} Gbit/s, "
              f"{bed['link_us'] / 1e3:.1f} ms for the bytes each node must send. The cores: "
              f"{nodes * bed['per_node']} ranks' flat-ring transfers over loopback TCP, nothing "
              f"reduced, {', '.join(f'{x / 1e3:.1f}' for x in bed['cores'])} ms. **Bound: "
              f"{'the cores' if bed['cores_bound'] else 'the link'}.**\n")
        print("| library | median ms | repetitions (ms) | what ran the timed calls (Loom, rank 0) |")
        print("|---|---|---|---|")
        libs = bed["libs"]
        for impl in sorted(libs, key=lambda i: (not i.startswith("loom"), i != "loom", med[i])):
            reps = sorted(libs[impl])
            times = ", ".join(f"{t / 1e3:.1f}" for _, t, _ in reps)
            ran = what_ran(reps) if impl.startswith("loom") else ""
            print(f"| {impl} | {med[impl] / 1e3:.1f} | {times} | {ran} |")
        if bed["best"]:
            print(f"\nLoom ÷ the best other ({bed['best']}): **{bed['ratio']:.2f}x** (per "
                  f"repetition, {bed['best']}'s over Loom's of the same repetition: "
                  f"{', '.join(f'{x:.2f}' for x in bed['per_rep'])}). Loom's share of the "
                  f"bound: **{bed['share']:.2f}**.")
            if bed["forced"]:
                print("Forced (LOOM_ALGO), the best other's median over theirs: " +
                      "; ".join(f"{i} {r:.2f}x" for i, r in sorted(bed["forced"].items())) + ".")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
