#!/usr/bin/env python3
"""nodes_report.py on made-up launches: the bound it names, Loom's ratio to the best other and its
share of the bound, failed launches left out, forced Loom columns not counted as others."""
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nodes_report  # noqa: E402

MIB = 1 << 20


def write(folder, runs, links, cores=()):
    with open(os.path.join(folder, "runs.csv"), "w") as f:
        f.write("rate,nodes,ranks_per_node,rep,impl,bytes,time_us,busbw_gbps,choice\n")
        for rate, nodes, rep, impl, us in runs:
            f.write(f'{rate},{nodes},2,{rep},{impl},{64 * MIB},{us},0,"x"\n')
    with open(os.path.join(folder, "links.csv"), "w") as f:
        f.write("rate,nodes,when,streams,gbits_each\n")
        for rate, nodes, streams, each in links:
            f.write(f"{rate},{nodes},before,{streams},{';'.join(map(str, each))}\n")
    if cores:
        with open(os.path.join(folder, "cores.csv"), "w") as f:
            f.write("rate,nodes,when,ranks,bytes,pass_us\n")
            for rate, nodes, us in cores:
                f.write(f"{rate},{nodes},before,{2 * nodes},{64 * MIB},{us}\n")


class NodesReport(unittest.TestCase):
    def test_link_bound_ratio_and_share(self):
        with tempfile.TemporaryDirectory() as d:
            # 2 nodes at 1 Gbit/s: Loom 600 ms (three launches), Gloo 660 and 630, OpenMPI's one
            # launch failed in each repetition, a forced ring 900 ms.
            runs = []
            for rep, (loom, bcube, ring) in enumerate([(600e3, 660e3, 900e3), (610e3, 630e3, 910e3),
                                                        (590e3, 640e3, 890e3)], 1):
                runs += [("1gbit", 2, rep, "loom", loom), ("1gbit", 2, rep, "gloo:bcube", bcube),
                         ("1gbit", 2, rep, "mpi", "nan"), ("1gbit", 2, rep, "loom:ring", ring)]
            write(d, runs, [("1gbit", 2, 1, [0.96]), ("1gbit", 2, 2, [0.95, 0.94])])
            [bed] = nodes_report.summarize(d)
            self.assertEqual(bed["best"], "gloo:bcube")  # a forced Loom column is no other
            self.assertAlmostEqual(bed["ratio"], 640e3 / 600e3)
            self.assertEqual([round(x, 4) for x in bed["per_rep"]],
                             [round(660 / 600, 4), round(630 / 610, 4), round(640 / 590, 4)])
            self.assertEqual(bed["bound_name"], "2 iperf3 streams at once")
            self.assertAlmostEqual(bed["bound_gbits"], 0.94)
            # 64 MiB out of each node in 0.6 s, over 0.94 Gbit/s.
            self.assertAlmostEqual(bed["share"], 64 * MIB * 8 / 0.6 / 1e9 / 0.94)
            self.assertAlmostEqual(bed["forced"]["loom:ring"], 640e3 / 900e3)

    def test_what_ran_counts_the_trials_verdicts(self):
        reps = [(1, 6e5, "hierarchical for 67108864 B; ring kept after a trial (hierarchical "
                         "125116.6 us, ring 124800.0 us)"),
                (2, 6e5, "hierarchical for 67108864 B; hierarchical kept after a trial (...)"),
                (3, 6e5, "ring in slices of 164 KiB for 67108864 B; ring kept after a trial (..)")]
        self.assertEqual(nodes_report.what_ran(reps),
                         "hierarchical 1 of 3, ring 2 of 3 (after a trial in 3)")
        # As the comparison harness's choice_of writes it (nodes_table.sh since 2026-12-07).
        now = [(1, 6e5, "ring (kept by a trial: hierarchical 18217.7 us, ring 14217.9 us; the "
                        "model: hierarchical for 67108864 B over tcp)"),
               (2, 6e5, "hierarchical for 67108864 B over tcp")]
        self.assertEqual(nodes_report.what_ran(now),
                         "hierarchical 1 of 2, ring 1 of 2 (after a trial in 1)")
        forced = [(1, 6e5, "ring (LOOM_ALGO) in slices of 376 KiB for 67108864 B")] * 2
        self.assertEqual(nodes_report.what_ran(forced), "ring 2 of 2")

    def test_the_shaped_rate_bounds_where_streams_run_faster(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, [("1gbit", 4, 1, "loom", 1e6), ("1gbit", 4, 1, "gloo:ring", 2e6)],
                  [("1gbit", 4, 1, [1.2]), ("1gbit", 4, 4, [1.1, 1.3, 1.2, 1.2])])
            [bed] = nodes_report.summarize(d)
            self.assertEqual(bed["bound_name"], "the shaped rate")
            # 4 nodes: 2 x 3/4 of the buffer out of each node.
            self.assertAlmostEqual(bed["share"], 1.5 * 64 * MIB * 8 / 1.0 / 1e9 / 1.0)

    def test_the_cores_bound_where_their_transfers_outlast_the_link(self):
        with tempfile.TemporaryDirectory() as d:
            runs = [("10gbit", 2, 1, "loom", 120e3), ("10gbit", 2, 1, "gloo:allreduce_ring", 110e3)]
            # 64 MiB at 9 Gbit/s: 59.7 ms; the transfers alone 73 and 80 ms: the cores bound.
            write(d, runs, [("10gbit", 2, 1, [9.5]), ("10gbit", 2, 2, [9.0, 9.2])],
                  [("10gbit", 2, 73e3), ("10gbit", 2, 80e3)])
            [bed] = nodes_report.summarize(d)
            self.assertTrue(bed["cores_bound"])
            self.assertAlmostEqual(bed["share"], 73e3 / 120e3)
            self.assertAlmostEqual(bed["ratio"], 110 / 120)
        with tempfile.TemporaryDirectory() as d:
            # At 1 Gbit/s the link's 560 ms outlast the same transfers: the link bounds.
            write(d, [("1gbit", 2, 1, "loom", 600e3), ("1gbit", 2, 1, "mpi", 900e3)],
                  [("1gbit", 2, 2, [0.95, 0.96])], [("1gbit", 2, 73e3)])
            [bed] = nodes_report.summarize(d)
            self.assertFalse(bed["cores_bound"])
            self.assertAlmostEqual(bed["share"], 64 * MIB * 8 / 0.95 / 1e3 / 600e3)

    def test_no_ratio_when_loom_failed(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, [("10gbit", 2, 1, "loom", "nan"), ("10gbit", 2, 1, "gloo:ring", 1e5)],
                  [("10gbit", 2, 1, [9.5])])
            [bed] = nodes_report.summarize(d)
            self.assertIsNone(bed["best"])


if __name__ == "__main__":
    unittest.main()
