"""A real Dask cluster on 127.0.0.1 for the campaign tests: ``dask scheduler`` and ``dask worker``
processes as a user starts them (docs/scale.md), on free ports, each wait bounded, every process
ended by its PID when the test is done (also when it failed)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.paths import REPO

START_TIMEOUT = 60.0  # seconds for the scheduler to listen and the workers to register


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dask_bin() -> str:
    """The ``dask`` entry point of this interpreter's environment."""
    path = Path(sys.executable).parent / "dask"
    return str(path) if path.exists() else (shutil.which("dask") or "dask")


@dataclass
class LocalhostCluster:
    address: str
    scheduler: subprocess.Popen
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)  # name -> process
    logs: Path | None = None

    def kill_worker(self, name: str) -> None:
        """SIGKILL: the worker dies as a machine does, mid-task."""
        p = self.workers[name]
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)

    def stop_scheduler(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.scheduler.pid, signal.SIGKILL)
        self.scheduler.wait(timeout=10)


def _wait_listening(port: int, proc: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dask scheduler exited with {proc.returncode}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"dask scheduler: nothing listens on 127.0.0.1:{port} after {START_TIMEOUT:.0f} s")


@contextlib.contextmanager
def localhost_cluster(tmp: Path, workers: int = 2) -> Iterator[LocalhostCluster]:
    """A scheduler and ``workers`` workers (``--nthreads 1 --no-nanny``: a killed worker stays
    dead) on 127.0.0.1; the processes see this checkout first on their path."""
    from distributed import Client

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               DASK_TEMPORARY_DIRECTORY=str(tmp))  # the scheduler's directory: not /tmp/dask-scratch-space
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    tmp.mkdir(parents=True, exist_ok=True)

    def start(argv: list[str], log: str) -> subprocess.Popen:
        with open(tmp / log, "wb") as f:
            p = subprocess.Popen([dask_bin(), *argv], stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                 env=env, cwd=tmp, start_new_session=True)
        procs.append(p)
        return p

    try:
        deadline = time.monotonic() + START_TIMEOUT
        sched = start(["scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address",
                       f"127.0.0.1:{free_port()}"], "scheduler.log")
        _wait_listening(port, sched, deadline)
        cluster = LocalhostCluster(address, sched, logs=tmp)
        for i in range(workers):
            cluster.workers[f"w{i}"] = start(["worker", address, "--nthreads", "1", "--no-nanny", "--name", f"w{i}",
                                              "--host", "127.0.0.1", "--local-directory", str(tmp / f"w{i}")],
                                             f"w{i}.log")
        with Client(address, timeout=20) as c:
            c.wait_for_workers(workers, timeout=max(1.0, deadline - time.monotonic()))
        yield cluster
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        end = time.monotonic() + 1.5
        for p in reversed(procs):
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
