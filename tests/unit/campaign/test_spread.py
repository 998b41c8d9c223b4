"""Static fuzz campaigns as Dask tasks (harness.fuzz.spread over harness.campaign): the same
programs and signatures in one process, on a LocalCluster and on a real two-worker cluster on
127.0.0.1 (issue 36, item 4); a worker killed mid-campaign (its task runs again elsewhere, counted
once); a task that fails every try reported while the rest goes on (item 3).

The campaigns are small (host gcc, ld.lld -- whose SFrame findings give signatures to compare --
four seeds of three programs) and shrink nothing: what is compared is the search."""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from harness.campaign.executor import Executor, Task
from harness.fuzz import spread
from harness.fuzz.campaign import run
from harness.fuzz.static import StaticChecker
from tests.support.dask_cluster import localhost_cluster
from tests.support.tiers import DEEP
from tests.support.toolchains import need

pytestmark = pytest.mark.xdist_group("dask-campaign")

KW = dict(seeds=(0, 4), budget=600, toolchains=("host",), linkers=("lld",), shrink=False, examples_per_seed=3)


@functools.cache
def _in_process() -> dict:
    work = Path(tempfile.mkdtemp(prefix="test-spread-"))
    try:
        return spread.counts(run(StaticChecker(), work, **KW))
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def in_process():
    need("host")
    counts = _in_process()
    assert counts["programs"] == 12 and counts["signatures"], counts  # something to compare
    # by toolchain and by linker too (a chunk's were once dropped: a Dask campaign said 0 of each)
    assert counts["per_toolchain"] == {"host": 12} and counts["per_linker"] == {"lld": 12}, counts
    return counts


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with localhost_cluster(tmp_path_factory.mktemp("dask")) as c:
        yield c


def _spread(executor, out: Path, **kw):
    camp, summary = spread.run(executor, StaticChecker(), out=out, **{**KW, **kw})
    return camp, summary


def _check_out(camp, out: Path) -> None:
    data = json.loads((out / "campaign.json").read_text())
    assert data["programs"] == camp.programs and "cluster" in data
    for s in data["signatures"]:  # every signature's reproducer came back from its worker
        d = out / s["reproducer"]
        meta = json.loads((d / "signature.json").read_text())
        assert meta["signature"]["key"] == s["signature"]["key"] and (d / "prog").is_file()


@DEEP  # a Dask LocalCluster's start and a campaign on it (10-23 s): the deep tier (tests/support/tiers.py)
def test_the_localcluster_finds_what_one_process_finds(in_process):
    with Executor(workers=2) as ex:
        camp, summary = _spread(ex, None)
    assert spread.counts(camp) == in_process
    assert summary.where == "LocalCluster" and summary.workers == 2 and not summary.failed
    # the chunks' matrix and checker counts are summed too (they were lost: campaign.json of a
    # spread campaign said no program per toolchain and no instruction in the objects)
    assert camp.per_toolchain == {"host": 12} and camp.per_linker == {"lld": 12}
    assert camp.object_instructions > 0 and camp.instructions > 0
    assert summary.dashboard and summary.dashboard.startswith("http://127.0.0.1:")


@DEEP  # a campaign over two Dask workers (5-13 s): the deep tier (tests/support/tiers.py)
def test_a_two_worker_cluster_finds_what_one_process_finds(in_process, cluster, tmp_path):
    with Executor(cluster.address) as ex:
        camp, summary = _spread(ex, tmp_path, chunk=1)
    assert spread.counts(camp) == in_process
    assert summary.workers == 2 and summary.where == cluster.address and not summary.failed
    assert summary.done == 4 + len(camp.records)  # four seed chunks, one settle task per signature
    _check_out(camp, tmp_path)


class CrashingReader:
    """A planted SFrame reader that crashes on every table (an exception in a task's code)."""

    def __init__(self, built, table):
        raise RuntimeError("planted: the SFrame reader crashes")


def test_a_task_failing_every_try_is_reported_and_the_rest_goes_on(cluster):
    good = spread.Plan(StaticChecker(), "static", ("host",), ("lld",), 3)
    # ld.bfd merges the SFrame sections (the reader is asked; ld.lld's are left unmerged)
    bad = spread.Plan(StaticChecker(sframe_provider=CrashingReader), "static", ("host",), ("bfd",), 3)
    deadline = time.time() + 600
    outcomes = []
    with Executor(cluster.address, retries=2) as ex:
        summary = ex.run([Task("bad", spread.search_task, (bad, (0, 2), deadline)),
                          Task("good", spread.search_task, (good, (0, 2), deadline))], outcomes.append,
                         count=lambda c: c.programs)
    by_key = {o.task.key: o for o in outcomes}
    assert by_key["good"].ok and by_key["good"].result.programs == 6
    assert not by_key["bad"].ok and by_key["bad"].tries == 3
    assert "planted: the SFrame reader crashes" in by_key["bad"].error
    assert [o.task.key for o in summary.failed] == ["bad"]
    assert len(summary.retried["bad"]) == 2 and all("RuntimeError" in why for why in summary.retried["bad"])
    assert summary.units == 6 and summary.done == 1


# The last two tests end the module's cluster's processes: a worker, then the scheduler.


@DEEP  # a campaign with a worker killed under it: the deep tier (tests/support/tiers.py)
def test_a_worker_killed_mid_campaign_its_task_runs_elsewhere_counted_once(in_process, cluster):
    killed: dict = {}

    def killer(cluster, stop: threading.Event) -> None:
        """Kill the first worker seen holding a seed chunk for 0.3 s (mid-task: a chunk of two
        seeds takes seconds)."""
        from distributed import Client
        seen: dict = {}
        with Client(cluster.address, timeout=20) as c:
            names = {a: w["name"] for a, w in c.scheduler_info(n_workers=-1)["workers"].items()}
            while not stop.is_set() and not killed:
                for addr, keys in c.processing().items():
                    busy = [k for k in keys if "-seeds-" in str(k)]
                    for k in busy:
                        seen.setdefault((addr, k), time.monotonic())
                        if time.monotonic() - seen[(addr, k)] >= 0.3:
                            cluster.kill_worker(names[addr])
                            killed.update(worker=addr, key=str(k))
                            return
                time.sleep(0.1)

    c = cluster
    stop = threading.Event()
    t = threading.Thread(target=killer, args=(c, stop), daemon=True)
    t.start()
    try:
        with Executor(c.address) as ex:
            camp, summary = _spread(ex, None, chunk=2)
    finally:
        stop.set()
        t.join(timeout=30)
    assert killed, "no worker was seen mid-task"
    assert spread.counts(camp) == in_process  # nothing lost, nothing counted twice
    assert summary.lost_workers == [killed["worker"]] and not summary.failed
    task = killed["key"].split("-", 2)[2].rsplit("-try", 1)[0]  # harness-ID-seeds-A:B-tryN -> seeds-A:B
    assert task in summary.retried  # and any task queued on that worker next, for the same reason
    assert {why for whys in summary.retried.values() for why in whys} == {
        f"worker {killed['worker']} lost while it held the task"}


def test_the_scheduler_lost_ends_the_campaign_with_exit_3_and_what_was_done_written(cluster, tmp_path):
    from harness.campaign.executor import SchedulerLost
    c = cluster

    def stop_when_one_is_done(ex, stop: threading.Event) -> None:
        while not stop.is_set() and ex.summary.done < 1:
            time.sleep(0.05)
        if not stop.is_set():
            c.stop_scheduler()

    stop = threading.Event()
    with Executor(c.address) as ex:
        t = threading.Thread(target=stop_when_one_is_done, args=(ex, stop), daemon=True)
        t.start()
        try:
            with pytest.raises(SchedulerLost) as lost:
                _spread(ex, tmp_path / "out", seeds=(0, 40), chunk=1)
        finally:
            stop.set()
            t.join(timeout=10)
    assert lost.value.exit_code == 3 and "was lost" in str(lost.value)
    data = json.loads((tmp_path / "out" / "campaign.json").read_text())
    assert data["cluster"]["done"] >= 1 and 1 <= data["seeds_done"] < 40
    assert data["programs"] == 3 * data["seeds_done"]  # whole seeds of three programs: nothing half-counted
