"""What every oracle and every divergence cause looks at: one delivered user stack.

A :class:`Stack` is everything known at the stop where a stack was delivered (or, for
``harness perf``, about one sample): the registers the walk started from, the unwinder's
:class:`~harness.unwind.user.Trace`, the task's memory and address space, facts about its code,
and what the request was about.  An :class:`Oracle` turns a stack into its own idea of the frame
list (:class:`OracleFrames`) or says why it cannot (:class:`NotChecked`); the verdicts
(:mod:`harness.verdicts`) compare the two and prove each difference with a cause.

Oracles are registered by name (:func:`register`); the engine, ``harness perf``, the counters and
the table columns iterate the registry, never a typed-out list.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..memory import Memory
from ..regs import UserRegs
from ..unwind.code import CodeFacts
from ..unwind.maps import AddressSpace
from ..unwind.user import RuleProvider, Trace

__all__ = [
    "ORACLES",
    "NotChecked",
    "Oracle",
    "OracleFrames",
    "Request",
    "Setup",
    "Stack",
    "build_oracles",
    "register",
]


@dataclass(frozen=True)
class Request:
    """What a request was about: the user registers it wanted a stack of, and where it hit."""

    want: UserRegs | None  # the interrupted user registers, or those saved at kernel entry
    window: str | None = None  # the entry/exit asm symbol the request interrupted, if any
    where: str | None = None  # the kernel function the request interrupted; None: user mode
    syscall: int | None = None  # the syscall the task was in (orig_ax), where known
    own: str | None = None  # "main", "thread", "child" or None (another task)


@dataclass
class Stack:
    """One delivered user stack and what oracles and causes may look at, at that stop."""

    regs: UserRegs  # the registers the deferred walk started from
    trace: Trace  # the unwinder's walk (the stack the tracers received)
    unwinder: str  # "fp" (frame pointers only) or "sframe" (SFrame where an FRE exists, else FP)
    max_entries: int  # UNWIND_MAX_ENTRIES of the modelled kernel
    memory: Memory
    space: AddressSpace
    code: CodeFacts
    # The SFrame table of the ELF mapped at an address, as the kernel's SFrame series registers
    # one per mapped ELF with PT_GNU_SFRAME; None where the ELF has none.
    sframe_for: Callable[[int], RuleProvider | None] = lambda addr: None
    request: Request | None = None
    # The task's thread pointer (fs_base, for __thread data), read only when an oracle asks.
    thread_pointer: Callable[[], int] | None = None
    # ``harness perf``: the perf sample this stack was walked from, with the kernel's own user
    # callchain for it (:class:`harness.oracles.perf.PerfSample`); None in the live engine.
    sample: object | None = None


@dataclass(frozen=True)
class OracleFrames:
    """An oracle's frame list: the IP first, then return addresses (or interrupted IPs)."""

    ips: tuple[int, ...]
    # Entries that are interrupted IPs (looked up at themselves, not at ra - 1): the first, and
    # the one after each signal frame.
    marks: frozenset[int] = frozenset({0})
    stop: str = ""  # why the oracle's own walk ended
    # True when the oracle ended at the outermost frame (its end is the stack's end: any frame
    # the unwinder reports past it is wrong); False when it ran out of information there.
    outermost: bool = True
    regs: UserRegs | None = None  # the registers oracle: the requested registers


@dataclass(frozen=True)
class NotChecked:
    """An oracle that does not apply to this stack, and why.  ``failure``: the reason is a fault
    of the harness or the program's data (a wrong shadow address), not a fact of the stack."""

    reason: str
    failure: bool = False


@dataclass(frozen=True)
class Setup:
    """What oracles are built from, once per program run."""

    space: AddressSpace
    memory: Memory
    program: str | None = None  # the program's host path
    shadow: bool = False  # built with the -finstrument-functions shadow stack
    # ``harness perf``'s sample source (:class:`harness.oracles.perf.PerfSource`); None in the
    # live engine, where the perf oracle does not apply.
    perf: object | None = None


class Oracle:
    """An independent idea of what a user stack should be.  Subclasses set ``name`` and
    implement :meth:`create` and :meth:`frames`; a ``registers`` oracle compares the registers
    the stack was walked from with those the request was about, not frame lists."""

    name: ClassVar[str]
    registers: ClassVar[bool] = False
    description: ClassVar[str] = ""
    # False for an oracle that runs the unwinder's own algorithm (the kernel's perf callchain):
    # only causes that name it (``oracles={...}``) may prove a difference from it.
    generic_causes: ClassVar[bool] = True

    @classmethod
    def create(cls, setup: Setup) -> Oracle | None:
        """The oracle for one program, or None where it cannot apply to any of its stacks."""
        return cls()

    def frames(self, stack: Stack) -> OracleFrames | NotChecked:
        raise NotImplementedError

    # -- what to take at the stop (the engine's snapshot; the stack is taken for every oracle) ----
    def captures(self, regs: UserRegs, fs_base: int) -> list[tuple[int, int]]:
        """``(addr, size)`` ranges of the task's memory beyond its stack that :meth:`frames` will
        read: read at the delivery stop in the same batch as the stack."""
        return []

    def complete(self, memory: Memory, regs: UserRegs, fs_base: int, request: Request | None = None) -> None:
        """Read (through ``memory``, while the guest is still stopped) what the first batch says
        is needed too, e.g. the rest of a deeper shadow stack, or what ``request``'s causes read."""


ORACLES: dict[str, type[Oracle]] = {}


def register(cls: type[Oracle]) -> type[Oracle]:
    """Class decorator: one registry line per oracle."""
    if cls.name in ORACLES:
        raise ValueError(f"oracle {cls.name!r} registered twice")
    ORACLES[cls.name] = cls
    return cls


def load_all() -> None:
    """Import every module of this package once, so that their @register lines fill ORACLES
    (drgn loads its commands the same way): a new oracle is a new module, nothing else."""
    # The package's folder, not the package: importing harness.oracles here would be a circle.
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{__package__}.{info.name}")


def build_oracles(setup: Setup, only: tuple[str, ...] | None = None) -> list[Oracle]:
    """Every registered oracle (or those named in ``only``) that applies to this program."""
    load_all()
    out = []
    for name, cls in ORACLES.items():
        if only is not None and name not in only:
            continue
        o = cls.create(setup)
        if o is not None:
            out.append(o)
    return out
