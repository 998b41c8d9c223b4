"""``harness matrix``: the same scenarios on every kernel x QEMU x vCPU count, one ``harness run``
per cell, the cells as tasks on Dask (:mod:`harness.campaign`).

A cell (:class:`Cell`) is one ``harness run`` on a worker: ``--kernel NAME`` (or
``--kernel-path PATH``), ``--qemu host|backports``, ``--smp N``, the scenarios and ``--samples``,
``--report``, into a run directory of the worker's own.  The worker fetches or builds the images
it lacks into its own cache (the first cell pays), and the run directory comes back to the client
as one compressed archive, unpacked under the matrix's directory as ``CELL/``.  The run's child
process is registered with :mod:`harness.campaign.isolate`: a cancelled matrix kills it, and its
guest with it.

Kernels are named as ``harness run --kernel`` takes them (checked by the same
:func:`harness.images.kernel.check_kernel_choice` before any task), with the issue's aliases:
``cloud`` (the default kernel: trixie-backports' cloud flavour), ``6.12`` (trixie), ``6.1``
(bookworm); an existing file is a ``--kernel-path``; ``tree:PATH`` a kernel tree, built (cached, one
build at a time under its lock) by the first cell that needs it, labelled ``tree-NAME``.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..campaign.executor import Executor, Outcome, Summary, Task
from ..campaign.isolate import run_command, scratch_dir
from ..errors import EXIT_INFRA, EXIT_USAGE, HarnessError
from ..images.kernel import TREE_PREFIX, check_kernel_choice

__all__ = ["ALIASES", "Cell", "CellResult", "MatrixInputError", "cells", "parse_kernels", "run_matrix"]

#: the issue's names for the harness's kernels
ALIASES = {"cloud": "default", "6.12": "trixie", "6.1": "bookworm"}
QEMUS = ("host", "backports")
CELL_TIMEOUT = 3600.0  # seconds one cell's harness run may take (its own waits are bounded too)


class MatrixInputError(HarnessError):
    """Bad matrix input: an empty list, an unknown QEMU, a vCPU count that is no number."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Kernel:
    label: str  # as the user wrote it (a path: its file name)
    name: str | None  # as --kernel takes it
    path: str | None = None  # --kernel-path


@dataclass(frozen=True)
class Cell:
    kernel: Kernel
    qemu: str
    smp: int

    @property
    def name(self) -> str:
        return f"{self.kernel.label}-{self.qemu}-smp{self.smp}"

    def argv(self, scenarios: tuple[str, ...], samples: int | None, out: str, extra: tuple[str, ...] = ()) -> list[str]:
        kernel = ["--kernel-path", self.kernel.path] if self.kernel.path else ["--kernel", self.kernel.name]
        # --no-pin: the cells run side by side, one a worker; pinning whichever came first to one
        # CPU (the commands' default, one harness at a time) would fix it beside the others'.
        return ["run", *scenarios, *kernel, "--qemu", self.qemu, "--smp", str(self.smp), "--out", out, "--report",
                "--no-pin", *(["--samples", str(samples)] if samples else []), *extra]


def parse_kernels(text: str) -> list[Kernel]:
    out = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        if Path(word).is_file():
            check_kernel_choice(path=word)
            out.append(Kernel(Path(word).name, None, str(Path(word).resolve())))
            continue
        name = ALIASES.get(word, word)
        if name.startswith(TREE_PREFIX):  # a tree: its absolute path for the workers, a label for a directory
            tree = Path(name[len(TREE_PREFIX):]).resolve()
            name = f"{TREE_PREFIX}{tree}"
            word = "tree-" + (re.sub(r"[^A-Za-z0-9._+-]+", "_", tree.name) or "root")
        check_kernel_choice(name)  # the names --kernel takes (KernelInputError: exit 2)
        out.append(Kernel(word, name))
    if not out:
        raise MatrixInputError(f"--kernels {text!r}: no kernel")
    return out


def parse_qemus(text: str) -> list[str]:
    out = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in out if w not in QEMUS]
    if bad or not out:
        raise MatrixInputError(f"--qemu {text!r}: known are {', '.join(QEMUS)}")
    return out


def parse_smp(text: str) -> list[int]:
    try:
        out = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise MatrixInputError(f"--smp {text!r}: not a list of vCPU counts (1,2)") from None
    if not out or any(not 1 <= n <= 16 for n in out):
        raise MatrixInputError(f"--smp {text!r}: vCPU counts from 1 to 16")
    return out


def cells(kernels: list[Kernel], qemus: list[str], smps: list[int]) -> list[Cell]:
    return [Cell(k, q, n) for k in kernels for q in qemus for n in smps]


@dataclass
class CellResult:
    cell: Cell
    exit_code: int
    output: str  # the run's stdout and stderr (its table, its exit line)
    archive: bytes  # the run directory, tar.gz
    elapsed: float
    worker_host: str = ""
    run_dir: str = ""  # where the run was on the worker (its output names it)


def _harness_argv(args: list[str]) -> list[str]:
    return [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())", *args]


def cell_task(campaign: str, cell: Cell, scenarios: tuple[str, ...], samples: int | None, extra: tuple[str, ...],
              timeout: float = CELL_TIMEOUT) -> CellResult:
    """One cell: ``harness run`` in a child process of the worker (killed if the matrix is
    cancelled), its run directory archived."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="harness-matrix-cell-", dir=scratch_dir()) as tmp:
        run_dir = Path(tmp) / "run"
        log = Path(tmp) / "output.txt"
        code = run_command(campaign, _harness_argv(cell.argv(scenarios, samples, str(run_dir), extra)), log,
                           timeout=timeout)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            if run_dir.is_dir():
                tar.add(run_dir, arcname=".")
        return CellResult(cell, code, log.read_text(errors="replace"), buf.getvalue(), time.monotonic() - start,
                          os.uname().nodename, str(run_dir))


@dataclass
class MatrixResult:
    out: Path
    cells: list[Cell]
    scenarios: tuple[str, ...]
    results: dict[str, CellResult] = field(default_factory=dict)  # cell name -> result
    summaries: dict[str, dict] = field(default_factory=dict)  # cell name -> its summary.json
    failed: dict[str, str] = field(default_factory=dict)  # cell name -> why no run came back

    @property
    def exit_code(self) -> int:
        """As ``harness run``'s over every cell: the worst (3 over 2 over 1 over 0); a cell that
        never came back is 3."""
        codes = [r.exit_code for r in self.results.values()] + [EXIT_INFRA for _ in self.failed]
        return max(codes, default=EXIT_INFRA)

    def to_json(self) -> dict:
        return {"scenarios": list(self.scenarios), "exit_code": self.exit_code,
                "cells": [{"name": c.name, "kernel": c.kernel.label, "kernel_name": c.kernel.name,
                           "kernel_path": c.kernel.path, "qemu": c.qemu, "smp": c.smp,
                           "exit_code": self.results[c.name].exit_code if c.name in self.results else None,
                           "elapsed": round(self.results[c.name].elapsed, 1) if c.name in self.results else None,
                           "worker": self.results[c.name].worker_host if c.name in self.results else None,
                           "failed": self.failed.get(c.name), "summary": self.summaries.get(c.name)}
                          for c in self.cells]}


def _unpack(archive: bytes, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")


def run_matrix(executor: Executor, cells_: list[Cell], scenarios: tuple[str, ...], out: Path, *,
               samples: int | None = None, extra: tuple[str, ...] = (),
               timeout: float = CELL_TIMEOUT) -> tuple[MatrixResult, Summary]:
    """Every cell as a task; each run directory unpacked under ``out/CELL`` as it comes back,
    ``out/matrix.json`` written at the end (also when the matrix ends early)."""
    res = MatrixResult(out, cells_, scenarios)
    out.mkdir(parents=True, exist_ok=True)

    def on_result(o: Outcome) -> None:
        cell: Cell = o.task.args[1]
        if not o.ok:
            res.failed[cell.name] = o.error or "?"
            return
        r: CellResult = o.result
        res.results[cell.name] = r
        d = out / cell.name
        _unpack(r.archive, d)
        r.archive = b""
        if r.run_dir:  # the paths the run printed, as they are here
            r.output = r.output.replace(r.run_dir, str(d))
        (d / "output.txt").write_text(r.output)
        summary = d / "summary.json"
        if summary.is_file():
            res.summaries[cell.name] = json.loads(summary.read_text())

    tasks = [Task(c.name, cell_task, (executor.id, c, scenarios, samples, extra, timeout)) for c in cells_]
    try:
        summary = executor.run(tasks, on_result, count=lambda r: 1, unit="runs", window=len(tasks))
    finally:
        data = res.to_json()
        data["cluster"] = executor.summary.to_json()
        (out / "matrix.json").write_text(json.dumps(data, indent=1) + "\n")
    return res, summary
