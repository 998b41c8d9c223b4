"""A new run directory for ``harness run``: unique, never reused.

Without ``--out``: ``runs/YYYYmmdd-HHMMSS``, or ``...-2``, ``...-3`` when that second is taken:
each name is made with one ``mkdir`` (atomic: of two harnesses started in the same second
exactly one gets each name), so two runs never share a directory.

With ``--out DIR``: DIR is created if missing; an existing DIR is used only if it is empty.
Either way the run claims it by creating ``.harness-run`` (its pid and start time) with
``O_EXCL``: of two runs given the same empty DIR at once, one gets it and the other is refused,
as is any run given a directory that holds anything (another run's logs): exit 2, one line.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..errors import EXIT_USAGE, HarnessError

__all__ = ["CLAIM", "RunDirTaken", "new_run_dir", "release_if_unused"]

CLAIM = ".harness-run"


class RunDirTaken(HarnessError):
    """``--out`` names a directory that is not empty (or is being claimed by another run)."""

    exit_code = EXIT_USAGE  # bad input


def new_run_dir(out: str | os.PathLike | None = None, base: str | os.PathLike = "runs",
                now: float | None = None, suffix: str = "") -> Path:
    """Create and claim the run's directory; see the module's docstring for the rule.  ``suffix``
    follows the timestamp of a default name (``runs/TIMESTAMP-kernel-diff``)."""
    if out is None:
        base = Path(base)
        base.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + suffix
        for n in range(1, 10_000):
            path = base / (stamp if n == 1 else f"{stamp}-{n}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            _claim(path)
            return path
        raise RunDirTaken(f"{base}/{stamp}: 9,999 run directories of this second exist already")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise RunDirTaken(f"--out {path}: exists and is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    if any(path.iterdir()):
        raise RunDirTaken(f"--out {path}: not empty (a run directory is never reused; name a new or empty one)")
    try:
        _claim(path)
    except FileExistsError:
        raise RunDirTaken(f"--out {path}: another harness run claimed it a moment ago") from None
    return path


def _claim(path: Path) -> None:
    fd = os.open(path / CLAIM, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n")


def release_if_unused(path: Path) -> bool:
    """Remove a run directory that holds nothing but this run's claim (the run failed before it
    recorded anything: a kernel without BTF, an interrupt before the guest was up; a guest lost
    while it booted leaves run.json and summary.json, harness/commands/run.py); True if it went.  A
    directory with anything else in it is left as it is."""
    try:
        if {p.name for p in path.iterdir()} != {CLAIM}:
            return False
        (path / CLAIM).unlink()
        path.rmdir()
    except OSError:
        return False
    return True
