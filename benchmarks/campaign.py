"""Static fuzz campaigns on Dask (issue 36, item 6): programs per minute in one process, on a
LocalCluster of 1 and of 2 workers, and on a real localhost cluster (``dask scheduler`` and two
``dask worker --nthreads 1`` processes), the ratios to the 1-worker LocalCluster in one run.
Figures printed, nothing asserted.

    PYTHONPATH=. .venv/bin/python benchmarks/campaign.py [--seeds 0:16] [--toolchains host] [--chunk 1]

Each setup checks the same seeds (no shrinking, no time bound: the work is fixed), so each also
says whether it found the same programs and signatures as the process.  A cluster's start is
timed apart (``start``) from its campaign (``campaign``: the rate's denominator, which includes
each worker's first imports).  The load average is printed before and after: on a shared machine
the figures are only as good as it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from harness.campaign.executor import Executor
from harness.fuzz import spread
from harness.fuzz.build import LINKERS, linker_available
from harness.fuzz.campaign import run
from harness.fuzz.static import StaticChecker


def _seeds(text: str) -> tuple[int, int]:
    a, b = (int(x) for x in text.split(":"))
    return a, b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=_seeds, default=(0, 16))
    ap.add_argument("--toolchains", default="host")
    ap.add_argument("--chunk", type=int, default=1, help="seeds per task")
    ap.add_argument("--overhead-only", action="store_true",
                    help="only the executor's task rate and the client's merge per chunk")
    ap.add_argument("--tasks", type=int, default=2000, help="empty tasks for the task rate")
    args = ap.parse_args(argv)
    if args.overhead_only:
        return overhead(args.tasks)
    toolchains = tuple(args.toolchains.split(","))
    linkers = tuple(x for x in LINKERS if linker_available("host", x))
    kw = dict(seeds=args.seeds, budget=1e9, toolchains=toolchains, linkers=linkers, shrink=False)
    print(f"static campaign, seeds {args.seeds[0]}:{args.seeds[1]} ({args.chunk} a task), {','.join(toolchains)} x "
          f"{','.join(linkers)}, no shrinking; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}",
          flush=True)
    rows = []

    work = Path(tempfile.mkdtemp(prefix="harness-bench-campaign-"))
    try:
        t = time.monotonic()
        camp = run(StaticChecker(), work, **kw)
        rows.append(("one process", 0.0, camp, time.monotonic() - t))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _row(rows[-1], None)
    base = spread.counts(camp)

    def on_cluster(name: str, scheduler: str | None, workers: int | None):
        t = time.monotonic()
        with Executor(scheduler, workers=workers) as ex:
            start = time.monotonic() - t
            t = time.monotonic()
            c, _ = spread.run(ex, StaticChecker(), chunk=args.chunk, **kw)
            rows.append((name, start, c, time.monotonic() - t))
        _row(rows[-1], rows[1] if len(rows) > 1 else None, same=spread.counts(c) == base)

    on_cluster("LocalCluster, 1 worker", None, 1)
    on_cluster("LocalCluster, 2 workers", None, 2)
    from tests.support.dask_cluster import localhost_cluster
    tmp = Path(tempfile.mkdtemp(prefix="harness-bench-cluster-"))
    try:
        t = time.monotonic()
        with localhost_cluster(tmp, workers=2) as cluster:
            up = time.monotonic() - t
            on_cluster(f"localhost cluster, 2 workers (up in {up:.1f} s)", cluster.address, None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


def overhead(n: int) -> int:
    """What limits a big cluster on the client's side: empty tasks per second through
    :meth:`Executor.run` on the localhost cluster (the scheduler's and the client loop's rate),
    and the client's merge of one real search chunk's result."""
    import copy
    import pickle

    from harness.campaign.executor import Task
    from harness.fuzz.campaign import Campaign
    from tests.support.dask_cluster import localhost_cluster
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="harness-bench-cluster-"))
    try:
        with localhost_cluster(tmp, workers=2) as cluster, Executor(cluster.address) as ex:
            for window in (4, 200):
                ex.summary.done = 0
                t = time.monotonic()
                ex.run((Task(f"empty-{window}-{i}", len, ((),)) for i in range(n)), lambda o: None, window=window)
                dt = time.monotonic() - t
                print(f"{n} empty tasks, {window} in flight: {n / dt:7.1f} tasks/s ({dt:.1f} s)", flush=True)
            linkers = tuple(x for x in LINKERS if linker_available("host", x))
            plan = spread.Plan(StaticChecker(), "static", ("host",), linkers)
            chunk = spread.search_task(plan, (0, 2), time.time() + 1e6)
            size = len(pickle.dumps(chunk))
            into = Campaign("static", (0, 2), 0, ("host",), linkers)
            reps = 2000
            copies = [copy.deepcopy(chunk) for _ in range(reps)]
            t = time.perf_counter()
            for c in copies:
                spread._merge_chunk(into, c)
            per = (time.perf_counter() - t) / reps
            print(f"a search chunk of 2 seeds: {chunk.programs} programs, {len(chunk.records)} signatures, "
                  f"{size} bytes pickled; the client merges one in {per * 1e6:.0f} us", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


def _rate(row) -> float:
    return row[2].programs / row[3] * 60 if row[3] else 0.0


def _row(row, one_worker, same: bool | None = None) -> None:
    name, start, camp, seconds = row
    ratio = f"{_rate(row) / _rate(one_worker):.2f} x 1 worker" if one_worker else "-"
    same_text = "" if same is None else ("; same programs and signatures" if same else "; DIFFERENT programs or "
                                         "signatures")
    print(f"{name:52} start {start:5.1f} s  campaign {seconds:6.1f} s  {camp.programs:4d} programs  "
          f"{_rate(row):6.1f}/min  {ratio}{same_text}", flush=True)


if __name__ == "__main__":  # a LocalCluster's workers import this module again (spawn)
    raise SystemExit(main())
