#!/usr/bin/env python3
"""The harness's rules on made-up measurements: when a cell is met (harness/rules.py), how fast
and slow launches are told apart, and the no-cliff check against the memory bound
(harness/cliffs.py), and one library in two runs (harness/diff.py)."""
import dataclasses
import os
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import cliffs, diff, drivers, placement, report, rules  # noqa: E402
from harness.drivers import BOUND, BOUND_TRANSPORT  # noqa: E402
from harness.measure import MEMCPY_WS, Row  # noqa: E402

MIB = 1 << 20


def row(rep, impl, busbw=None, time_us=1.0, transport="shm", op="allreduce", ranks=2, size=MIB,
        ns=60.0, pace=300.0):
    return Row(rep, impl, transport, op, ranks, size, 5, 2, time_us, busbw, "ring", "", ns, "",
               pace, "")


def cell_rows(loom, other, transport="shm", op="allreduce", ranks=2, size=MIB, other_impl=None):
    """Loom and one other library, one launch per repetition each."""
    other_impl = other_impl or ("mpi-vader" if transport == "shm" else "mpi-tcp")
    out = []
    for rep, (l, o) in enumerate(zip(loom, other), 1):
        out += [row(rep, "loom", l, transport=transport, op=op, ranks=ranks, size=size),
                row(rep, other_impl, o, transport=transport, op=op, ranks=ranks, size=size)]
    return out


def verdict(rows, op="allreduce", ranks=2, transport="shm", size=MIB):
    cells = report.Cells(rows)
    found = [v for v in rules.verdicts(cells)
             if v.config == (op, ranks, transport) and v.size == size and v.impl == "loom"]
    assert len(found) == 1, found
    return found[0]


class Targets(unittest.TestCase):
    def test_met_when_median_and_every_repetition_are(self):
        v = verdict(cell_rows([3.0, 3.2, 3.1], [2.0, 2.0, 2.0]))  # 1.5, 1.6, 1.55
        self.assertTrue(v.met, v.why)
        self.assertEqual(v.target.value, 1.5)
        self.assertAlmostEqual(v.median, 1.55)

    def test_a_repetition_below_one_misses_a_median_that_meets(self):
        v = verdict(cell_rows([4.0, 1.8, 4.0, 4.0], [2.0, 2.0, 2.0, 2.0]))  # 2, 0.9, 2, 2
        self.assertFalse(v.met)
        self.assertEqual(v.why, "missed: 1 repetition(s) below 1.00x")

    def test_a_median_below_the_target_misses(self):
        v = verdict(cell_rows([2.8, 2.8, 2.8], [2.0, 2.0, 2.0]))  # 1.4 < 1.5
        self.assertFalse(v.met)
        self.assertEqual(v.why, "missed: median 1.40 < 1.50")

    def test_a_target_beyond_the_memory_bound_says_so(self):
        rows = cell_rows([2.0] * 3, [2.0] * 3, op="alltoall", ranks=4)
        bound = [row(rep, BOUND, 2.5, transport=BOUND_TRANSPORT, op="alltoall", ranks=4)
                 for rep in (1, 2, 3)]
        v = verdict(rows + bound, op="alltoall", ranks=4)
        self.assertEqual(v.why, "missed: median 1.00 < 1.50; the target (3.00 GB/s) is 1.20x the "
                                "memory bound")
        bound = [dataclasses.replace(r, busbw_gbps=3.5) for r in bound]  # within: nothing added
        v = verdict(rows + bound, op="alltoall", ranks=4)
        self.assertEqual(v.why, "missed: median 1.00 < 1.50")

    def test_the_memory_bound_is_each_operations_busbw_of_one_pass(self):
        pass_row = "copy_footprint,4,1048576,2,100.0,10.49,100.0,120.0"
        for op, busbw in (("allreduce", 15.72864), ("alltoall", 7.86432)):
            job = drivers.Job(BOUND, BOUND_TRANSPORT, op, 4, MIB, ["echo", pass_row],
                              kind="footprint")
            self.assertAlmostEqual(drivers.run(job, 10, None).busbw, busbw)

    def test_fewer_than_three_repetitions_are_not_judged(self):
        v = verdict(cell_rows([4.0, 4.0], [2.0, 2.0]))
        self.assertFalse(v.met)
        self.assertEqual(v.why, "not judged: 2 repetition(s), a figure needs 3")

    def test_latency_is_judged_on_time(self):
        rows = []
        for rep, (l, o) in enumerate([(60.0, 70.0), (65.0, 70.0), (68.0, 69.0)], 1):
            rows += [row(rep, "loom", 0.001, time_us=l, transport="tcp", ranks=4, size=8),
                     row(rep, "mpi-tcp", 0.001, time_us=o, transport="tcp", ranks=4, size=8)]
        v = verdict(rows, ranks=4, transport="tcp", size=8)
        self.assertTrue(v.met, v.why)
        self.assertAlmostEqual(v.median, 70.0 / 65.0)
        rows.append(row(2, "loom", 0.001, time_us=71.0, transport="tcp", ranks=4, size=8, ns=900))
        rows.append(row(1, "loom", 0.001, time_us=71.0, transport="tcp", ranks=4, size=8, ns=900))
        # Far launches of repetitions that had a near one are not their figure.
        self.assertTrue(verdict(rows, ranks=4, transport="tcp", size=8).met)

    def test_the_best_other_library_is_the_yardstick(self):
        rows = cell_rows([3.0, 3.0, 3.0], [2.0, 2.0, 2.0], transport="tcp")
        rows += [row(rep, "gloo:ring", 2.6, transport="tcp") for rep in (1, 2, 3)]
        v = verdict(rows, transport="tcp")
        self.assertFalse(v.met)  # 3.0 / 2.6 = 1.15 < 1.25
        self.assertAlmostEqual(v.median, 3.0 / 2.6)

    def test_a_limit_target_is_judged_per_repetition_against_its_own_limit(self):
        size = 64 * MIB
        rows = cell_rows([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], transport="tcp", size=size)
        for rep, stream in ((1, 2.1), (2, 2.0), (3, 2.4)):  # 0.95, 1.0, 0.83
            rows.append(Row(rep, "iperf3", "-", "limit", 2, 0, busbw_gbps=stream))
        cells = report.Cells(rows)
        found = [v for v in rules.verdicts(cells) if v.target.limit == "iperf3"]
        self.assertEqual(len(found), 1)
        self.assertAlmostEqual(found[0].median, 2.0 / 2.1)
        self.assertEqual(found[0].why, "missed: 1 repetition(s) below 0.90x")

    def test_cells_without_a_target_are_not_judged(self):
        cells = report.Cells(cell_rows([1.0] * 3, [2.0] * 3, ranks=8))
        self.assertEqual(rules.verdicts(cells), [])

    def test_fast_and_slow_launches_are_reported_apart(self):
        rows = cell_rows([4.0, 4.0, 4.0], [2.0, 2.0, 2.0])
        # Two far launches of Loom (retried), and one of vader's ran slow.
        rows += [row(1, "loom", 1.0, ns=400), row(2, "loom", 1.5, ns=400)]
        rows += [row(3, "mpi-vader", 1.0, pace=900.0)]
        text, missed = rules.targets_report(rows)
        line = next(t for t in text if t.startswith("| Loom, allreduce 2 ranks shm 1 MiB"))
        cols = [c.strip() for c in line.split("|")]
        self.assertEqual(cols[5], "2.00 (3)")  # fast: 4.0 over vader's fast 2.0
        self.assertEqual(cols[6], "1.25 (2)")  # slow: 1.25 over vader's slow 1.0
        self.assertEqual(cols[7], "— / —")  # no DEBUG timing logged
        self.assertEqual(cols[8], "**met**")
        self.assertEqual(missed, 0)

    def test_loom_waiting_is_reported_for_fast_and_slow_launches_apart(self):
        rows = cell_rows([4.0, 4.0, 4.0], [2.0, 2.0, 2.0])
        for r, (share, sleeps) in zip([r for r in rows if r.impl == "loom"],
                                      [(0.1, 0.0), (0.2, 1.0), (0.3, 2.0)]):
            r.wait_share, r.sleeps = share, sleeps
        far = row(1, "loom", 1.0, ns=400)
        far.wait_share, far.sleeps = 0.75, 40.0
        text, _ = rules.targets_report(rows + [far])
        line = next(t for t in text if t.startswith("| Loom, allreduce 2 ranks shm 1 MiB"))
        self.assertEqual([c.strip() for c in line.split("|")][7], "20% (1.0) / 75% (40.0)")

    def test_the_timing_of_a_call_class_is_read_from_rank_0s_log(self):
        log = ("[t] loom rank 1/2 debug: all_reduce ring of 1048576-2097151 B: predicted 125.2 "
               "us, measured 1934.2 us (fastest 150.2) on this rank, mean of 100 call(s), of "
               "which waiting for peers 262.6 us (0.1 waits, 0.0 sleeps a call; 0 call(s) ended "
               "on another CPU); cost model measured at init\n")
        for calls, waited in ((10, 100.0), (100, 400.0)):
            log += (f"[t] loom rank 0/2 debug: all_reduce ring of 1048576-2097151 B: predicted "
                    f"125.2 us, measured 800.0 us (fastest 150.8) on this rank, mean of {calls} "
                    f"call(s), of which waiting for peers {waited} us (0.6 waits, 2.5 sleeps a "
                    f"call; 0 call(s) ended on another CPU); cost model measured at init\n")
        self.assertEqual(drivers.anatomy("allreduce", log, MIB), (0.5, 2.5))
        self.assertEqual(drivers.anatomy("allreduce", log, 4 * MIB), (None, None))
        self.assertEqual(drivers.anatomy("alltoall", log, MIB), (None, None))

    def test_the_choice_is_what_a_trial_kept_where_one_ran(self):
        log = ("[t] loom rank 0/4 info: all_to_all: pairwise in slices of 92 KiB for 262144 B over "
               "shm; model: pairwise 91.2 us, single_copy 359.0 us\n"
               "[t] loom rank 0/4 info: all_to_all: pairwise in whole slots for 64 B over shm; "
               "model: pairwise 2.0 us\n")
        self.assertEqual(drivers.choice_of("alltoall", log),
                         "pairwise in slices of 92 KiB for 262144 B over shm")
        verdict = ("[t] loom rank {r}/4 info: all_to_all of {b} B: pairwise against single_copy "
                   "on its first 23 calls, each the slowest rank's time, medians of the last 3 "
                   "of each: 323.9 us against 202.2 us; {w} from now on\n")
        # Another rank's verdict, and one for another size, are not the measured call's.
        other = (verdict.format(r=1, b=262144, w="single_copy")
                 + verdict.format(r=0, b=64, w="single_copy"))
        self.assertEqual(drivers.choice_of("alltoall", log + other),
                         "pairwise in slices of 92 KiB for 262144 B over shm")
        kept = log + verdict.format(r=0, b=262144, w="single_copy")
        self.assertEqual(drivers.choice_of("alltoall", kept),
                         "single_copy (kept by a trial: pairwise 323.9 us, single_copy 202.2 us; "
                         "the model: pairwise in slices of 92 KiB for 262144 B over shm)")
        self.assertEqual(drivers.choice_of("allreduce", kept), "")

    def test_memcpy_at_the_working_set_is_a_column_not_a_library(self):
        rows = cell_rows([3.0] * 3, [2.0] * 3)
        rows += [Row(rep, MEMCPY_WS, BOUND_TRANSPORT, "allreduce", 2, MIB, busbw_gbps=30.0)
                 for rep in (1, 2, 3)]
        cells = report.Cells(rows)
        self.assertEqual(cells.configs(), [("allreduce", 2, "shm")])
        self.assertEqual(cells.memcpy_ws("allreduce", 2, MIB), 30.0)
        table = "\n".join(report.config_table(cells, ("allreduce", 2, "shm")))
        self.assertIn("| memcpy at the working set (GB/s) |", table)
        self.assertIn("| 30.00 |", table)


def sweep(loom, bound=None, transport="shm", reps=3, loopback=None):
    """Loom's busbw per size (64 KiB up in x2 steps), the memory bound's and the loopback
    exchange's, every repetition."""
    rows = []
    for rep in range(1, reps + 1):
        for i, v in enumerate(loom):
            size = (64 << 10) << i
            rows.append(row(rep, "loom", v, transport=transport, size=size))
            if bound:
                rows.append(Row(rep, BOUND, BOUND_TRANSPORT, "allreduce", 2, size,
                                busbw_gbps=bound[i]))
            if loopback:
                rows.append(Row(rep, drivers.LOOPBACK, drivers.LOOPBACK_TRANSPORT, "allreduce",
                                2, size, busbw_gbps=loopback[i],
                                choice=f"2 threads, {drivers.SOCKBUF_NOTE} 4194304 B"))
    return rows


class Cliffs(unittest.TestCase):
    def test_a_fall_the_bound_shares_is_no_cliff(self):
        _, found = cliffs.cliff_report(sweep([10, 10, 6], [40, 40, 24]))
        self.assertEqual(found, 0)

    def test_a_fall_of_the_fraction_is_a_cliff_whatever_the_busbw(self):
        # busbw rises 10 -> 11 but the bound doubles: the fraction falls 45%.
        text, found = cliffs.cliff_report(sweep([10, 10, 11], [40, 40, 80]))
        self.assertEqual(found, 1)
        self.assertIn("- Loom shm, 2 ranks: 128 KiB → 256 KiB: 10.00 → 11.00 GB/s; ÷ memory "
                      "bound 0.25 → 0.14", text)

    def test_falls_up_to_the_threshold_pass(self):
        _, found = cliffs.cliff_report(sweep([10, 8.6, 7.4], [40, 40, 40]))  # -14%, -14%
        self.assertEqual(found, 0)
        _, found = cliffs.cliff_report(sweep([10, 8.4], [40, 40]))  # -16%
        self.assertEqual(found, 1)

    def test_a_tcp_fall_the_loopback_exchange_shares_is_no_cliff(self):
        # The loopback exchange falls 40% where the memory bound is flat: Loom's -40% is the
        # kernel's.
        text, found = cliffs.cliff_report(sweep([2, 2, 1.2], [40, 40, 40], transport="tcp",
                                                loopback=[4, 4, 2.4]))
        self.assertEqual(found, 0)
        self.assertIn("tcp: busbw ÷ the loopback exchange at the same size (one of the two", text)
        self.assertIn("tcp: busbw ÷ the memory bound at the same size (one of the two", text)
        # A fall the memory bound shares is still the machine's, the exchange flat.
        _, found = cliffs.cliff_report(sweep([2, 2, 1.2], [40, 40, 20], transport="tcp",
                                             loopback=[4, 4, 4]))
        self.assertEqual(found, 0)
        # The exchange rising where Loom rises less is no fall of Loom's.
        _, found = cliffs.cliff_report(sweep([2, 2, 2.2], [40, 40, 40], transport="tcp",
                                             loopback=[2, 2, 4]))
        self.assertEqual(found, 0)

    def test_a_tcp_fall_neither_curve_shares_is_a_cliff(self):
        text, found = cliffs.cliff_report(sweep([2, 2, 1.2], [40, 40, 40], transport="tcp",
                                                loopback=[4, 4, 3.6]))
        self.assertEqual(found, 1)  # -40% against the bound, -33% against the exchange
        self.assertIn("÷ memory bound 0.05 → 0.03 (memory bound 40.00 → 40.00 GB/s); ÷ loopback "
                      "exchange 0.50 → 0.33 (loopback exchange 4.00 → 3.60 GB/s): −33%", text)
        # Over shm the memory bound alone judges, whatever loopback measured.
        _, found = cliffs.cliff_report(sweep([2, 2, 1.2], [40, 40, 40], loopback=[4, 4, 2.4]))
        self.assertEqual(found, 1)

    def test_the_exchange_is_judged_on_its_median_over_the_run(self):
        # Repetition 1's exchange ran fast at 128 KiB and repetition 2's slow at 256 KiB, each a
        # launch of its own: set against each repetition's own exchange, two of three would
        # excuse Loom's -40%; the run's curve is flat, and the fall is Loom's.
        rows = sweep([2, 2, 1.2], [40, 40, 40], transport="tcp", loopback=[4, 4, 4])
        for r in rows:
            if r.impl == drivers.LOOPBACK and (r.rep, r.bytes) == (1, 128 << 10):
                r.busbw_gbps = 4 / 0.6
            if r.impl == drivers.LOOPBACK and (r.rep, r.bytes) == (2, 256 << 10):
                r.busbw_gbps = 2.4
        _, found = cliffs.cliff_report(rows)
        self.assertEqual(found, 1)

    def test_an_exchange_with_the_kernel_s_socket_buffers_is_shown_not_judged(self):
        rows = sweep([2, 2, 1.2], [40, 40, 40], transport="tcp", loopback=[4, 4, 2.4])
        for r in rows:
            if r.impl == drivers.LOOPBACK:
                r.choice = "2 threads"  # a run before the exchange took Loom's socket buffers
        text, found = cliffs.cliff_report(rows)
        self.assertEqual(found, 1)
        self.assertIn("### The loopback exchange, busbw GB/s", text)
        self.assertNotIn("÷ loopback exchange", text)

    def test_loom_sockbuf_reads_loom_s_setting(self):
        self.assertEqual(drivers.loom_sockbuf({}), 4 << 20)
        self.assertEqual(drivers.loom_sockbuf({"LOOM_SOCKBUF": "1M"}), 1 << 20)
        self.assertEqual(drivers.loom_sockbuf({"LOOM_SOCKBUF": "8MB"}), 8 << 20)
        self.assertEqual(drivers.loom_sockbuf({"LOOM_SOCKBUF": "65536"}), 65536)
        self.assertEqual(drivers.loom_sockbuf({"LOOM_SOCKBUF": "0"}), 0)
        self.assertEqual(drivers.loom_sockbuf({"LOOM_SOCKBUF": "4G"}), 1 << 30)  # Loom's cap
        self.assertEqual(drivers.loom_sockbuf({"LOOM_SOCKBUF": "lots"}), 4 << 20)

    def test_tcp_without_the_loopback_exchange_is_judged_against_the_memory_bound(self):
        _, found = cliffs.cliff_report(sweep([2, 2, 1.2], [40, 40, 20], transport="tcp"))
        self.assertEqual(found, 0)  # -40% against the bound's -50%
        _, found = cliffs.cliff_report(sweep([2, 2, 1.2], [40, 40, 40], transport="tcp"))
        self.assertEqual(found, 1)

    def test_without_the_bound_the_busbw_is_judged(self):
        text, found = cliffs.cliff_report(sweep([10, 8]))
        self.assertEqual(found, 1)
        self.assertIn("no yardstick measured at this step: judged on busbw", text)

    def test_each_repetition_is_set_against_its_own_bound(self):
        # Repetition 2's bound and Loom both ran at half speed at 128 KiB: no fall in any
        # repetition's fraction, where the medians alone would show one.
        rows = sweep([10, 10], [40, 40])
        for r in rows:
            if r.rep == 2 and r.bytes == 128 << 10:
                r.busbw_gbps /= 2
        _, found = cliffs.cliff_report(rows)
        self.assertEqual(found, 0)


class Diff(unittest.TestCase):
    """Two runs of one library: speed after over before, per cell and over the cells."""

    def test_busbw_and_time_are_both_read_as_speed(self):
        before = [row(r, "loom", b) for r, b in enumerate([4.0, 5.0, 6.0], 1)] + \
            [row(r, "loom", 0.1, time_us=t, size=8) for r, t in enumerate([10.0, 12.0, 11.0], 1)]
        after = [row(r, "loom", b) for r, b in enumerate([10.0, 9.0, 11.0], 1)] + \
            [row(r, "loom", 0.1, time_us=t, size=8) for r, t in enumerate([11.0, 10.0, 12.0], 1)]
        text, median = diff.diff_report(before, after)
        self.assertIn("**2.00**", text)  # busbw 5 -> 10
        self.assertIn("**1.00**", text)  # 11 us either way
        self.assertIn("Over 2 cells", text)
        self.assertIn("1 within ±6%", text)
        self.assertIn("in 1 one run's median lies inside", text)
        self.assertAlmostEqual(median, 1.5)

    def test_cells_of_one_run_only_are_left_out(self):
        text, median = diff.diff_report([row(1, "loom", 4.0)], [row(1, "loom", 4.0, ranks=4)])
        self.assertIsNone(median)
        self.assertIn("No cell", text)


class Placement(unittest.TestCase):
    """Each library's time over near and over far launches, from every launch of the run."""

    def rows(self):
        return [row(1, "loom", 4.0, time_us=100.0, ns=60),
                row(2, "loom", 2.0, time_us=300.0, ns=300, pace=600.0),
                row(3, "loom", 4.0, time_us=120.0, ns=62),
                row(1, "mpi-vader", 2.0, time_us=200.0, ns=61),
                row(2, "mpi-vader", 2.0, time_us=210.0, ns=310),
                # Of Gloo's algorithms the fastest near, not one that only ran far.
                row(1, "gloo:ring", 1.0, time_us=900.0, ns=60),
                row(1, "gloo:bcube", 1.0, time_us=700.0, ns=305),
                row(1, "gloo:ring_chunked", 1.0, time_us=950.0, ns=60),
                # Neither a failed launch nor the memory bound's reference row counts.
                dataclasses.replace(row(2, "mpi-vader", None, time_us=5.0, ns=300), error="x"),
                row(1, BOUND, 9.0, time_us=50.0, transport=BOUND_TRANSPORT, ns=60),
                row(2, BOUND, 9.0, time_us=500.0, transport=BOUND_TRANSPORT, ns=300)]

    def test_far_over_near_per_library(self):
        rows = self.rows()
        report.Cells(rows)  # sets each row's placement and pace
        text = "\n".join(placement.placement_table(rows))
        # The far launch ran while the host was slow too: the count says so.
        self.assertIn("| allreduce 2 ranks shm 1 MiB | Loom | 110.0 (2) | 300.0 (1, 1‡) | 2.73 |",
                      text)
        self.assertIn("| OpenMPI vader | 200.0 (1) | 210.0 (1) | 1.05 |", text)
        self.assertIn("| Gloo ring | 900.0 (1) | — | — |", text)
        self.assertNotIn("Gloo bcube", text)
        self.assertNotIn("ring_chunked", text)
        self.assertNotIn(report.name(BOUND), text)
        self.assertEqual(text.count("| allreduce 2 ranks shm 1 MiB |"), 3)

    def test_the_comparison_report_ends_with_it(self):
        text = report.compare_report(self.rows())
        self.assertIn("### Near and far launches", text)
        self.assertIn("| Loom | 110.0 (2) | 300.0 (1, 1‡) | 2.73 |", text)

    def test_nothing_where_no_library_shown_ran_both_near_and_far(self):
        rows = cell_rows([3.0, 3.2], [2.0, 2.0])
        report.Cells(rows)
        self.assertEqual(placement.placement_table(rows), [])
        # A Gloo algorithm that is not shown ran both: still nothing.
        rows = cell_rows([3.0], [2.0], transport="tcp") + [
            row(1, "gloo:ring", 1.0, time_us=90.0, transport="tcp", ns=60),
            row(1, "gloo:bcube", 1.0, time_us=95.0, transport="tcp", ns=60),
            row(2, "gloo:bcube", 1.0, time_us=95.0, transport="tcp", ns=300)]
        report.Cells(rows)
        self.assertEqual(placement.placement_table(rows), [])


if __name__ == "__main__":
    unittest.main()
