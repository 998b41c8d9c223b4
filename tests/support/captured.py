"""Shared by the tests on gdb-captured snapshots (tests/unit/unwind/test_user_real.py,
tests/unit/unwind/test_cfi_compat.py)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.unwind.cfi import cfi_tables_for, unwind_cfi
from harness.unwind.snapshot import Snapshot
from harness.unwind.symbolize import Symbolizer
from harness.unwind.user import unwind_user
from tests.support.gating import require


@dataclass
class Captured:
    """One build's snapshots, by stop name, and the program they were taken of."""

    toolchain: str
    fp: bool
    static: bool
    snaps: dict[str, Snapshot]
    program: object  # harness.images.programs.Program


def funcs(sym: Symbolizer, trace) -> list[str | None]:
    """The function names of a trace's frames (None where no symbol covers one)."""
    return sym.functions(trace.ips)


def get(captures: dict, tc: str, fp: bool, static: bool):
    """The capture of one (toolchain, fp, static) build; a string there says why it is missing
    (skipped locally, a failure in CI)."""
    c = captures[(tc, fp, static)]
    require(not isinstance(c, str), c if isinstance(c, str) else "")
    return c


def walk(snap: Snapshot, **kw):
    """The kernel model's walk (``kw`` for UnwindConfig switches), the CFI oracle's walk and a
    symbolizer, all on the snapshot's registers and memory."""
    space = snap.address_space()
    mem = snap.memory()
    fp = unwind_user(mem, snap.regs, **kw)
    cfi = unwind_cfi(mem, snap.regs, cfi_tables_for(space))
    return fp, cfi, Symbolizer(space)
