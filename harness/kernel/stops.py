"""Named stop points: where the harness puts breakpoints in the guest kernel.

Some points are functions (found by symbol); others are instructions inside entry code, found
by scanning the live kernel text for the ``call rel32`` to a known target and taking the next
instruction.  Names and inlining differ between 6.1, 6.12 and 7.x: a point a kernel lacks is
reported in :attr:`StopPoints.missing`, never guessed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import KernelInfo

__all__ = ["RETURN_POINTS", "StopPoint", "StopPoints", "delivery_points", "find_stop_points"]

# kind: what the model does there.  regs: where struct pt_regs of the interrupted or returning
# context is: "rdi" (first argument), "rsp" (the stack pointer points at it), "task" (the top of
# the current task's stack).
REQUEST_KINDS = ("nmi", "irq", "syscall")


@dataclass(frozen=True)
class StopPoint:
    name: str
    addr: int
    kind: str  # "nmi" | "irq" | "syscall" | "return" | "exit"
    regs: str  # "rdi" | "rsp" | "task"
    how: str  # "symbol X" or "after call X in Y"


@dataclass(frozen=True)
class StopPoints:
    points: dict[str, StopPoint]
    missing: dict[str, str]  # name -> why

    def of_kind(self, kind: str) -> list[StopPoint]:
        return [p for p in self.points.values() if p.kind == kind]

    def __getitem__(self, name: str) -> StopPoint:
        try:
            return self.points[name]
        except KeyError:
            why = self.missing.get(name, "unknown stop point")
            raise KeyError(f"stop point {name!r} is not available on this kernel: {why}") from None


# (name, kind, regs, symbol)
FUNCTION_POINTS = (
    ("syscall_entry", "syscall", "rdi", "do_syscall_64"),
    ("nmi", "nmi", "rdi", "exc_nmi"),
    ("apic_timer", "irq", "rdi", "sysvec_apic_timer_interrupt"),
    ("return_irq", "return", "rsp", "swapgs_restore_regs_and_return_to_usermode"),
)
# (name, kind, regs, callee, caller): the instruction after `call callee` inside caller.
AFTER_CALL_POINTS = (
    ("return_syscall64", "return", "rsp", "do_syscall_64", "entry_SYSCALL_64"),
    ("return_syscall32", "return", "rsp", "do_fast_syscall_32", "entry_SYSCALL_compat"),
    ("return_sysenter32", "return", "rsp", "do_SYSENTER_32", "entry_SYSENTER_compat"),
    # Task exit: do_exit() sets PF_EXITING in exit_signals() and only later calls
    # unwind_deferred_task_exit().  A request that lands in do_exit() before exit_signals()
    # (a timer tick, an NMI) still returns 0 and is delivered at exit, one after it fails with
    # -EINVAL: the stop goes right after that call, not at do_exit's first instruction, or the
    # first kind of request would find no exit stop left to deliver it.
    ("exit", "exit", "task", "exit_signals", "do_exit"),
)
SCAN_LIMIT = 4096
# The return-to-user points: the exit-to-user path runs a task's pending task work on the way
# (``unwind_reset_info()`` is inlined into it, so it has no symbol of its own).
RETURN_POINTS = ("return_syscall64", "return_irq", "return_syscall32", "return_sysenter32")


def delivery_points(stops: StopPoints, symbols: Mapping[str, int], with_exit: bool = True,
                    with_signal: bool = True) -> dict[int, StopPoint]:
    """Where a task's deferred work is run, by address: the :data:`RETURN_POINTS`; ``with_exit``:
    the exit point (``do_exit()`` after ``exit_signals()``); ``with_signal``: ``get_signal()``, which
    runs the task work before it looks for a signal, i.e. before a handler's frame replaces the
    user registers.  A point this kernel lacks is left out."""
    names = RETURN_POINTS + (("exit",) if with_exit else ())
    out = {stops[n].addr: stops[n] for n in names if n in stops.points}
    if with_signal and "get_signal" in symbols:
        a = symbols["get_signal"]
        out[a] = StopPoint("get_signal", a, "return", "task", "symbol get_signal")
    return out


def find_after_call(code: bytes, code_addr: int, callee: int) -> list[int]:
    """Addresses right after each ``e8 rel32`` in ``code`` that calls ``callee`` (or a call thunk
    in the 32 bytes of padding before it, as call-depth tracking patches callers to do)."""
    hits = []
    for i in range(len(code) - 4):
        if code[i] != 0xE8:
            continue
        rel = struct.unpack_from("<i", code, i + 1)[0]
        target = code_addr + i + 5 + rel
        if callee - 32 <= target <= callee:
            hits.append(code_addr + i + 5)
    return hits


def find_stop_points(info: KernelInfo, read: Callable[[int, int], bytes],
                     function_end: Callable[[int], int]) -> StopPoints:
    """Resolve every named point on this kernel.  ``function_end(addr)`` is the next symbol's
    address (bounds the scan of a function's code)."""
    points: dict[str, StopPoint] = {}
    missing: dict[str, str] = {}
    for name, kind, regs, sym in FUNCTION_POINTS:
        if sym in info.symbols:
            points[name] = StopPoint(name, info.symbols[sym], kind, regs, f"symbol {sym}")
        else:
            missing[name] = f"no symbol {sym}"
    for name, kind, regs, callee, caller in AFTER_CALL_POINTS:
        if caller not in info.symbols or callee not in info.symbols:
            missing[name] = f"no symbol {caller if caller not in info.symbols else callee}"
            continue
        start = info.symbols[caller]
        # entry_SYSENTER_compat continues into entry_SYSENTER_compat_after_hwframe and the
        # like: scan a little past the next symbol, up to SCAN_LIMIT bytes.
        size = min(max(function_end(start) - start, 256), SCAN_LIMIT)
        code = read(start, size)
        hits = find_after_call(code, start, info.symbols[callee])
        if len(hits) == 1:
            points[name] = StopPoint(name, hits[0], kind, regs, f"after call {callee} in {caller}")
        else:
            missing[name] = f"{len(hits)} calls to {callee} in the first {size} bytes of {caller}"
    return StopPoints(points, missing)
