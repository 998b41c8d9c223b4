"""``harness matrix`` through a real Dask cluster on 127.0.0.1 (``dask scheduler`` and two ``dask
worker`` processes, tests/support/dask_cluster.py): a two-cell matrix gives the runs a
LocalCluster gives (issue 36, item 6), and Ctrl-C on the client leaves no guest on any worker
while the workers themselves live on (item 3)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.dask_cluster import localhost_cluster
from tests.support.foreground import foreground_signals
from tests.support.kunit import parse_ktap
from tests.support.paths import REPO
from tests.support.procs import children, cmdline, gone

pytestmark = pytest.mark.qemu

HARNESS = [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())"]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
CELLS = ["--kernels", "cloud", "--qemu", "host,backports", "--smp", "1", "fp-spin", "sframe-v3-nofp"]
SAMPLES = 5


def _matrix(out: Path, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run([*HARNESS, "matrix", *CELLS, "--samples", str(SAMPLES), "--out", str(out), *more],
                          capture_output=True, text=True, timeout=1200, env=ENV)


def _table(out: Path) -> dict:
    m = json.loads((out / "matrix.json").read_text())
    return {c["name"]: (c["exit_code"], [(s["name"], s["own_stacks"] >= SAMPLES, s["failed_stacks"])
                                         for s in c["summary"]["scenarios"]]) for c in m["cells"]}


def test_a_two_cell_matrix_on_a_localhost_cluster_gives_the_local_runs(tmp_path):
    local = _matrix(tmp_path / "local", "--workers", "2", "--ktap", str(tmp_path / "local.ktap"))
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    # KTAP (issue 38): a test per cell, read by the kernel's own parser, its counts those of matrix.json
    test, printed = parse_ktap((tmp_path / "local.ktap").read_text())
    assert test.counts.errors == 0 and test.status.name == "SUCCESS", printed
    cells = json.loads((tmp_path / "local" / "matrix.json").read_text())["cells"]
    assert [t.name for t in test.subtests] == [c["name"] for c in cells]
    for t, c in zip(test.subtests, cells, strict=True):
        assert [s.name for s in t.subtests] == [s["name"] for s in c["summary"]["scenarios"]]
    with localhost_cluster(tmp_path / "cluster") as c:
        p = _matrix(tmp_path / "remote", "--scheduler", c.address)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"2 cells on {c.address}, 2 workers; dashboard http://" in p.stderr
    expected = {"cloud-host-smp1", "cloud-backports-smp1"}
    assert set(_table(tmp_path / "remote")) == expected
    assert _table(tmp_path / "remote") == _table(tmp_path / "local")
    for cell in expected:  # each sub-run as harness run --report leaves it
        d = tmp_path / "remote" / cell
        assert (d / "report.html").is_file() and (d / "fp-spin.jsonl").is_file()
        qemu = json.loads((d / "summary.json").read_text())["run"]["qemu"]
        assert ("7.2" in qemu) == cell.endswith("host-smp1"), (cell, qemu)
    page = (tmp_path / "remote" / "report.html").read_text()
    assert all(f'href="{cell}/report.html"' in page for cell in expected)
    assert "cloud-host-smp1" in p.stdout and "exit 0" in p.stdout


def _guests(pids: list[int]) -> list[int]:
    """The QEMU processes among the descendants of ``pids``."""
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        kids = children(pid)
        todo += kids
        found += [k for k in kids if any("qemu-system" in a for a in cmdline(k))]
    return found


def _interrupt_with_two_guests(p: subprocess.Popen, roots: list[int], interrupt) -> tuple[list[int], str]:
    """Once a guest runs under each worker (QEMUs among the descendants of ``roots``, within 300
    s), ``interrupt()``; the guests seen and the client's stderr.  The client is killed with its
    group if it is still there at the end."""
    try:
        deadline = time.monotonic() + 300
        guests: list[int] = []
        while len(guests) < 2 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.5)
            guests = _guests(roots)
        assert len(guests) == 2, f"no guest on each worker within 300 s: {guests}"
        interrupt()
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
    return guests, err


def test_ctrl_c_on_the_client_leaves_no_guest_on_any_worker(tmp_path):
    with localhost_cluster(tmp_path / "cluster") as c:
        workers = [p.pid for p in c.workers.values()]
        p = subprocess.Popen([*HARNESS, "matrix", *CELLS, "--samples", "2000", "--out", str(tmp_path / "m"),
                              "--scheduler", c.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=ENV, start_new_session=True, preexec_fn=foreground_signals)
        guests, err = _interrupt_with_two_guests(p, workers, lambda: os.kill(p.pid, signal.SIGINT))
        assert p.returncode == 3, err[-3000:]
        assert "interrupted" in err
        deadline = time.monotonic() + 30
        while not all(gone(g) for g in guests) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(gone(g) for g in guests), [(g, cmdline(g)[:2]) for g in guests if not gone(g)]
        assert not _guests(workers)
        assert all(p.poll() is None for p in c.workers.values())  # the cluster lives on


def test_a_terminals_ctrl_c_ends_a_localcluster_matrix_in_order(tmp_path):
    """Ctrl-C at a terminal reaches the whole foreground group, the LocalCluster's workers too:
    they ignore it (spawned so), and the client cancels the cells in order -- exit 3, one line, no
    worker's traceback, no guest left."""
    p = subprocess.Popen([*HARNESS, "matrix", *CELLS, "--samples", "2000", "--out", str(tmp_path / "m"),
                          "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                         start_new_session=True, preexec_fn=foreground_signals)
    guests, err = _interrupt_with_two_guests(p, [p.pid], lambda: os.killpg(p.pid, signal.SIGINT))
    assert p.returncode == 3 and "harness matrix: interrupted (SIGINT)" in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    deadline = time.monotonic() + 30
    while not all(gone(g) for g in guests) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(gone(g) for g in guests)
    assert (tmp_path / "m" / "matrix.json").is_file()
