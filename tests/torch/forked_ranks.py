"""Runs a test's ranks as forked processes joined through a FileStore under the loom backend (or
another, to compare with), and reports every rank's traceback where one fails (the torch tests'
own launcher)."""
import datetime
import multiprocessing
import os
import sys
import tempfile
import time
import traceback

import torch.distributed as dist

import loom_torch  # noqa: F401  (registers the loom backend)

WAIT_S = 120  # every rank of a test ends within this


def _rank_main(fn, rank, world, path, results, timeout_s, backend):
    try:
        store = dist.FileStore(path, world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
        fn(rank, world)
        if dist.is_initialized():
            dist.destroy_process_group()
        results.put((rank, None))
    except BaseException:  # noqa: B036  (the parent reports it)
        results.put((rank, traceback.format_exc()))
    finally:
        sys.stdout.flush()
        results.close()
        results.join_thread()  # the report is written before the process goes
        os._exit(0)  # no atexit or finalizer of the parent's (forked) state


def run_ranks(fn, world=3, timeout_s=60, killed=(), backend="loom"):
    """Runs fn(rank, world) on `world` forked ranks; raises with every rank's traceback. The
    ranks in `killed` kill themselves: no report is awaited from them."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "store")
        ranks = [context.Process(target=_rank_main, args=(fn, r, world, path, results, timeout_s,
                                                          backend))
                 for r in range(world)]
        for p in ranks:
            p.start()
        reports = {}
        deadline = time.monotonic() + WAIT_S
        while len(reports) < world - len(killed) and time.monotonic() < deadline:
            try:
                rank, error = results.get(timeout=max(0.1, deadline - time.monotonic()))
                reports[rank] = error
            except Exception:  # noqa: BLE001  (queue.Empty: the deadline passed)
                break
        for p in ranks:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
        missing = [r for r in range(world) if r not in reports and r not in killed]
        failed = {r: e for r, e in reports.items() if e}
        if missing or failed:
            text = "".join(f"\n--- rank {r} ---\n{e}" for r, e in sorted(failed.items()))
            raise AssertionError(f"ranks {missing} did not finish within {WAIT_S} s{text}"
                                 if missing else f"ranks failed:{text}")
