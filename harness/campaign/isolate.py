"""A task's work in a child process of the worker, so that a cancelled campaign can end it.

Dask cannot stop a task's thread once it runs.  A task that starts a guest therefore runs its
work through :func:`call`: in a child process (``python -m harness.campaign.child``, its own
session, killed with SIGKILL if the worker dies: ``PR_SET_PDEATHSIG``), registered under the
campaign's id.  :func:`kill_campaign`, which the client runs on every worker when the campaign is
cancelled (Ctrl-C), sends each such child SIGTERM -- the harness's own ending signal: it shuts its
guest down as on a Ctrl-C (:mod:`harness.signals`) -- then SIGKILL to its process group after
:data:`TERM_GRACE` seconds.  A QEMU the child started dies with it either way (the transport starts
QEMU with ``PR_SET_PDEATHSIG`` too: :func:`harness.transport.qemu.die_with_parent`).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import HarnessError
from ..transport.qemu import die_with_parent

__all__ = ["TaskCancelled", "TaskDied", "call", "children", "kill_campaign", "run_command", "scratch_dir"]

TERM_GRACE = 10.0  # seconds a child gets to end its guest after SIGTERM

_children: dict[str, set[subprocess.Popen]] = {}
_cancelled: set[str] = set()
_lock = threading.Lock()


class TaskCancelled(HarnessError):
    """The campaign was cancelled while this task's child ran (it was killed)."""


class TaskDied(HarnessError):
    """The task's child process ended without a result (a crash, a kill from outside)."""


class TaskTimeout(HarnessError):
    """The task's child ran past its bound and was killed."""


def children(campaign: str) -> list[int]:
    """The PIDs of ``campaign``'s children alive in this process."""
    with _lock:
        return [p.pid for p in _children.get(campaign, ()) if p.poll() is None]


def _end(procs: list[subprocess.Popen], grace: float) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGTERM)
    end = time.monotonic() + grace
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, end - time.monotonic()))
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)  # the child's session: whatever it left
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)


def kill_campaign(campaign: str, grace: float = TERM_GRACE) -> list[int]:
    """End every child of ``campaign`` in this process (run on each worker by the client); the
    PIDs it ended."""
    with _lock:
        _cancelled.add(campaign)
        procs = [p for p in _children.get(campaign, ()) if p.poll() is None]
    _end(procs, grace)
    return [p.pid for p in procs]


def scratch_dir() -> str | None:
    """Where a task keeps its temporary files: the worker's own directory (``dask worker
    --local-directory``; Dask removes it with the worker, and a killed worker's at the next
    start), so a worker killed mid-task leaves nothing in /tmp; None outside a worker."""
    try:
        from distributed import get_worker
        return get_worker().local_directory
    except (ImportError, ValueError):
        return None


def _start(campaign: str, argv: list[str], log: Path) -> subprocess.Popen:
    with _lock:
        if campaign in _cancelled:
            raise TaskCancelled(f"campaign {campaign} was cancelled")
    with open(log, "wb") as logf:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=die_with_parent)
    with _lock:
        _children.setdefault(campaign, set()).add(proc)
    return proc


def _wait(campaign: str, proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for ``proc`` (bounded); whether the campaign was cancelled meanwhile."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end([proc], TERM_GRACE)
        raise TaskTimeout(f"the task ran past {timeout:.0f} s and was killed") from None
    finally:
        with _lock:
            _children.get(campaign, set()).discard(proc)
    with _lock:
        return campaign in _cancelled


def run_command(campaign: str, argv: list[str], log: Path, *, timeout: float) -> int:
    """``argv`` as a child of ``campaign`` (its output to ``log``); its exit status.
    :class:`TaskCancelled` when the campaign was cancelled while it ran."""
    proc = _start(campaign, argv, log)
    if _wait(campaign, proc, timeout):
        raise TaskCancelled(f"campaign {campaign} was cancelled: its child (pid {proc.pid}) was killed")
    return proc.returncode


def call(campaign: str, fn: Callable[..., Any], args: tuple = (), *, timeout: float) -> Any:
    """``fn(*args)`` in a child process; its result (or its exception, raised here).  Bounded by
    ``timeout`` seconds; ended by :func:`kill_campaign`."""
    import cloudpickle
    with tempfile.TemporaryDirectory(prefix="harness-task-", dir=scratch_dir()) as tmp:
        spec, out, log = Path(tmp, "task.pkl"), Path(tmp, "result.pkl"), Path(tmp, "child.log")
        spec.write_bytes(cloudpickle.dumps((fn, args)))
        proc = _start(campaign, [sys.executable, "-m", "harness.campaign.child", str(spec), str(out)], log)
        cancelled = _wait(campaign, proc, timeout)
        if out.is_file():
            ok, value = pickle.loads(out.read_bytes())
            if ok:
                return value
            raise value
        if cancelled:
            raise TaskCancelled(f"campaign {campaign} was cancelled: its child (pid {proc.pid}) was killed")
        tail = log.read_text(errors="replace")[-2000:]
        raise TaskDied(f"the task's child (pid {proc.pid}) ended with status {proc.returncode} and no result:\n{tail}")
