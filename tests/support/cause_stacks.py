"""The stacks and CFI frames the cause tests build from captured stops: what the engine would
deliver and what the CFI oracle says at that stop (tests/unit/verdicts/test_causes.py and
test_causes_go.py share them)."""

from __future__ import annotations

import dataclasses

from harness.memory import Memory
from harness.oracles.base import OracleFrames, Request, Stack
from harness.oracles.cfi import CFIOracle
from harness.regs import UserRegs
from harness.unwind.code import CodeFacts
from harness.unwind.mixed import sframe_tables_for
from harness.unwind.snapshot import Snapshot
from harness.unwind.user import UNWIND_MAX_ENTRIES, UnwindConfig, unwind_user

__all__ = ["cfi_of", "stack_of"]


def stack_of(snap: Snapshot, unwinder: str = "fp", *, memory: Memory | None = None, regs: UserRegs | None = None,
             request: Request | None = None, max_entries: int = UNWIND_MAX_ENTRIES,
             walk_entries: int | None = None) -> Stack:
    """The Stack the engine would build at this stop: the kernel model's walk ("fp": frame
    pointers only; "sframe": SFrame where an FRE exists, else FP) from ``regs`` (default the
    snapshot's) over ``memory`` (default the snapshot's), delivered with ``max_entries``."""
    space = snap.address_space()
    mem = memory if memory is not None else snap.memory()
    regs = regs if regs is not None else snap.regs
    tables = sframe_tables_for(space)
    config = UnwindConfig(tables_for=tables if unwinder == "sframe" else None,
                          max_entries=walk_entries or max_entries)
    trace = unwind_user(mem, regs, config)
    return Stack(regs, trace, unwinder, max_entries, mem, space, CodeFacts(space, mem, 8), tables, request=request)


def cfi_of(stack: Stack, snap: Snapshot | None = None) -> tuple[CFIOracle, OracleFrames]:
    """The CFI oracle and its frames; with ``snap``, over that snapshot's own (uncorrupted)
    memory: where a test corrupts a frame record the FP walk reads, CFI would restore rbp and the
    return address from the same slots, so the truth is the stack before the corruption."""
    oracle = CFIOracle(stack.space)
    if snap is None:
        return oracle, oracle.frames(stack)
    return oracle, oracle.frames(dataclasses.replace(stack, memory=snap.memory()))
