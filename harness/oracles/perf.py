"""The perf oracle: the guest kernel's own user callchain of a perf sample.

``harness perf`` (:mod:`harness.perf.oracle`) parses a capture and builds one
:class:`~harness.oracles.base.Stack` per sample: our unwinder run on the sample's user registers
over the dumped stack bytes, with the sample itself in ``stack.sample`` (a :class:`PerfSample`).
This oracle's frame list for that stack is what the kernel itself walked:

* without ``defer_callchain``: the user part of the sample's callchain, from
  ``perf_callchain_user()`` (arch/x86/events/core.c): ``regs->ip``, then ``{next_frame,
  return_address}`` pairs read at ``fp`` up to ``perf_event_max_stack`` entries, without
  unwind_user's checks (``fp < sp``, CFA growth, alignment);
* with it (6.19+): the ips of the ``PERF_RECORD_CALLCHAIN_DEFERRED`` record that answered the
  sample's cookie, walked by the kernel's ``unwind_user()`` at the return to user space: the
  very function our unwinder models.

The live engine has no perf samples: its :class:`~harness.oracles.base.Setup` carries no
``perf`` source, and :meth:`PerfCallchainOracle.create` returns None there.  The causes that
prove a difference from the kernel's walk (:mod:`harness.verdicts.causes`, ``oracles={"perf"}``)
look at the sample with the helpers below: which bytes the dump holds, the signal frame at the
sampled sp.  Parsing stays in :mod:`harness.perfparse.records`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from ..memory import BufferMemory, Memory
from ..perfparse.records import Sample
from ..regs import SIGCONTEXT_64, UC_MCONTEXT, UserRegs, compat_sigcontext_at, compat_sigcontext_regs
from ..unwind.maps import AddressSpace
from ..unwind.user import StopReason, Trace
from .base import NotChecked, Oracle, OracleFrames, Setup, Stack, register

__all__ = [
    "PERF_WALK_LACKS",
    "PerfCallchainOracle",
    "PerfSample",
    "PerfSource",
    "at_elf_entry",
    "at_function_start",
    "chain_agrees",
    "in_dump",
    "sigreturn_regs",
    "stack_memory",
    "word",
]

# unwind_user stop reasons that perf_callchain_user() does not have: it goes on where they stop us.
PERF_WALK_LACKS = {StopReason.FP_BELOW_SP: "fp < sp", StopReason.NON_MONOTONIC: "cfa <= sp",
                   StopReason.MISALIGNED_CFA: "cfa misaligned"}


@dataclass
class PerfSource:
    """What a ``harness perf`` run gives its oracles (``Setup.perf``): the limits of the kernel's
    walks, and the symbols of the sampled program (anything with ``locate(addr, ra)``)."""

    max_stack: int  # kernel.perf_event_max_stack (or the event's sample_max_stack)
    symbolizer: object | None = None


@dataclass(frozen=True)
class PerfSample:
    """One perf sample as the source of a stack (``Stack.sample``), and the kernel's user
    callchain for it."""

    sample: Sample
    chain: tuple[int, ...] | None  # the kernel's user callchain; None: none arrived
    deferred: bool  # from CALLCHAIN_DEFERRED (kernel unwind_user), else perf_callchain_user's FP walk
    source: PerfSource
    seq: int | None = None  # the sample's index in the record stream
    record_seq: int | None = None  # the index of the CALLCHAIN_DEFERRED record answering its entry
    exit_seq: int | None = None  # the PERF_RECORD_EXIT that ended its entry without a record
    entry_first: Sample | None = None  # the first sample of its entry (same cookie), if not itself

    @property
    def max_stack(self) -> int:
        return self.source.max_stack


def stack_memory(sample: Sample) -> Memory:
    """The sampled user stack: ``dyn_size`` bytes at the user sp (a 32-bit task's: its low half, where
    :func:`~harness.unwind.user.unwind_user` reads it); every other read faults."""
    if sample.regs is None or not sample.stack:
        return BufferMemory()
    sp = sample.regs.sp & 0xFFFFFFFF if sample.regs.compat else sample.regs.sp
    return BufferMemory({sp: sample.stack})


def in_dump(sample: Sample, addr: int, size: int = 8) -> bool:
    """``[addr, addr + size)`` lies in the dumped stack bytes."""
    sp = sample.regs.sp
    return sp <= addr and addr + size <= sp + len(sample.stack)


def word(sample: Sample, addr: int) -> int | None:
    """The 64-bit word at ``addr`` in the dump, or None where the dump does not hold it."""
    if not in_dump(sample, addr):
        return None
    return struct.unpack_from("<Q", sample.stack, addr - sample.regs.sp)[0]




def sigreturn_regs(sample: Sample) -> tuple[UserRegs, int] | None:
    """The registers rt_sigreturn (or a 32-bit task's sigreturn) would restore if the sampled task
    is in it, and where, from the sampled sp, the frame's sigcontext holds them: sp + 40 for a
    64-bit task's sigcontext_64; for a 32-bit task's sigcontext_32 where
    :func:`harness.regs.compat_sigcontext_at` finds it (sp + 160 in an rt frame, sp + 0 in the
    other; a sample carries no syscall number to tell them apart).  Read from the dump; None where
    the dump does not hold them.  The frame's own cs and ss words, which restore_sigcontext()
    takes, are not read: a 64-bit task's segments are UserRegs' defaults, as
    :func:`harness.oracles.cfi.kernel_sigframe_regs` has them, and a 32-bit task's the compat
    user segments (:func:`harness.regs.compat_sigcontext_regs`)."""
    if sample.regs is None:
        return None
    if sample.regs.compat:
        at = compat_sigcontext_at(sample.stack, sample.regs.sp & 0xFFFFFFFF)
        restored = None if at is None else compat_sigcontext_regs(sample.stack[at:])
        return None if restored is None else (restored, at)
    need = UC_MCONTEXT + 8 * len(SIGCONTEXT_64)
    if len(sample.stack) < need:
        return None
    values = struct.unpack_from(f"<{len(SIGCONTEXT_64)}Q", sample.stack, UC_MCONTEXT)  # one word per name
    return UserRegs(**{name: values[i] for i, name in enumerate(SIGCONTEXT_64)}), UC_MCONTEXT


def chain_agrees(sample: Sample, trace: Trace, chain) -> str | None:
    """How our ``trace`` over the sample's dump relates to a kernel chain: "equal", "ran off the
    dump" (a prefix of it, stopped by a fault outside the dumped bytes: the kernel read on in live
    memory), or None."""
    ours = tuple(trace.ips)
    chain = tuple(chain)
    if ours == chain:
        return "equal"
    stop = trace.stop
    # ours a proper prefix of the chain (an equal one returned above)
    if (chain[:len(ours)] == ours and stop.reason is StopReason.FAULT and stop.addr is not None
            and not in_dump(sample, stop.addr)):
        return "ran off the dump"
    return None


@register
class PerfCallchainOracle(Oracle):
    name = "perf"
    description = "the guest kernel's own user callchain of a perf sample (FP walk, or CALLCHAIN_DEFERRED)"
    # The kernel's walk is the unwinder's own algorithm (perf_callchain_user() is a frame-pointer
    # walk; the deferred record is unwind_user() itself): the generic causes, which say why an
    # unwinder misses the truth, cannot prove a difference from it.  Only causes naming it can.
    generic_causes: ClassVar[bool] = False

    @classmethod
    def create(cls, setup: Setup) -> PerfCallchainOracle | None:
        # The source's limits reach frames() with each sample (PerfSample.source): only its
        # presence is read here.
        return cls() if setup.perf is not None else None

    def frames(self, stack: Stack) -> OracleFrames | NotChecked:
        ps = stack.sample
        if ps is None:
            return NotChecked("not a perf sample")
        s = ps.sample
        if ps.chain is None:
            if ps.exit_seq is not None:
                return OracleFrames((), frozenset({0}), f"no CALLCHAIN_DEFERRED: the task exited (record "
                                    f"{ps.exit_seq}) before its entry's deferred work ran", False)
            return NotChecked("the kernel gave no user callchain for this sample")
        chain = tuple(ps.chain)
        if ps.deferred:
            cut = len(chain) >= stack.max_entries
            return OracleFrames(chain, frozenset({0}), "CALLCHAIN_DEFERRED (kernel unwind_user)"
                                + (f", cut at UNWIND_MAX_ENTRIES ({stack.max_entries})" if cut else ""), not cut)
        first = s.ip if s.user_mode else s.regs.ip
        if not chain or chain[0] != s.regs.ip or (s.user_mode and s.ip != s.regs.ip):
            return NotChecked(f"the kernel's user callchain does not start at the sampled user IP {first:#x}",
                              failure=True)
        cut = len(chain) >= ps.max_stack
        return OracleFrames(chain, frozenset({0}), "perf_callchain_user (kernel FP walk)"
                            + (f", cut at perf_event_max_stack ({ps.max_stack})" if cut else ""), not cut)


def at_function_start(ps: PerfSample, ip: int, name: str | None = None) -> str | None:
    """The function ``ip`` is the first byte of (of ``name``, if given), by the program's symbols;
    None where it is not, or no symbols are known."""
    sym = ps.source.symbolizer
    if sym is None:
        return None
    loc = sym.locate(ip)
    if loc.symbol is None or loc.offset != 0 or (name is not None and loc.symbol != name):
        return None
    return loc.symbol


def at_elf_entry(space: AddressSpace, ip: int) -> str | None:
    """The path of the ELF whose entry point (e_entry) ``ip`` is: the program's, or for a dynamic
    one the interpreter's, where a successful execve starts; None otherwise."""
    e = space.elf_at(ip)
    if e is None:
        return None
    return e.path if ip == e.image.elf.header["e_entry"] + e.bias else None
