"""Where ``harness kernel-diff`` stops the guest kernel: the ``unwind_deferred`` points of a 7.x
kernel, each found by symbol and checked in the kernel's own code (kallsyms and the bytes there).

:func:`resolve_points` gives the :class:`Points` of a booted session; the code facts it reads
(:func:`hardirq_offset`, :func:`indirect_call_sites`, :func:`flag_set_sites`) are pure functions
of the kernel's bytes.  The list of the points and what each stop carries is in
:mod:`harness.lockstep.driver`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import capstone

from ..errors import HarnessError
from ..kernel import PF_EXITING
from ..kernel.stops import RETURN_POINTS
from ..session import Session

__all__ = ["KernelDiffError", "Points", "flag_set_sites", "hardirq_offset", "indirect_call_sites", "resolve_points"]

# include/linux/preempt.h: HARDIRQ and NMI are 4 bits each, NMI right above HARDIRQ.  Where
# HARDIRQ starts differs between kernels (bit 16 in 6.x; bit 24 in 7.3, whose preempt count is 64
# bits): it is read from the kernel's own irq_enter_rcu(), see hardirq_offset().
HARDIRQ_OFFSET_DEFAULT = 0x00010000


class KernelDiffError(HarnessError):
    """A kernel point the lockstep needs cannot be found in this kernel's code."""


@dataclass(frozen=True)
class Points:
    request: int
    task_work: int
    task_exit: int
    unwind_user: int
    faultable: tuple[int, int]  # unwind_user_faultable's [start, end): the walks we count
    callback: int  # the indirect call of work->func in process_unwind_deferred (or a func's entry)
    callback_how: str
    fork: int
    exiting: tuple[int, ...]  # right after PF_EXITING is set
    returns: dict[int, str]
    perf_work: int
    hardirq_offset: int = HARDIRQ_OFFSET_DEFAULT


def hardirq_offset(code: bytes) -> int | None:
    """HARDIRQ_OFFSET from the code of ``irq_enter_rcu()``: its first ``add $imm32, %gs:rel32(%rip)``
    (``__preempt_count_add(HARDIRQ_OFFSET)``), qword (65 48 81 05) or dword (65 81 05)."""
    for prefix in (b"\x65\x48\x81\x05", b"\x65\x81\x05"):
        i = code.find(prefix)
        if i >= 0 and i + len(prefix) + 8 <= len(code):
            imm = struct.unpack_from("<I", code, i + len(prefix) + 4)[0]
            if imm and imm & (imm - 1) == 0:
                return imm
    return None


def indirect_call_sites(code: bytes, code_addr: int, thunks: set[int]) -> list[int]:
    """Addresses of the ``call rel32`` instructions in ``code`` whose target is one of ``thunks``
    (the retpoline thunks ``__x86_indirect_thunk_rax`` and the like: how ``work->func(...)`` is
    called in a retpoline build)."""
    hits = []
    for i in range(len(code) - 4):
        if code[i] == 0xE8:
            rel = struct.unpack_from("<i", code, i + 1)[0]
            if code_addr + i + 5 + rel in thunks:
                hits.append(code_addr + i)
    return hits


def flag_set_sites(code: bytes, code_addr: int, flags_offset: int, flag: int) -> list[int]:
    """Addresses right after each ``or $flag, flags_offset(%reg)`` in ``code`` (capstone):
    in ``exit_signals()``, the instruction after ``tsk->flags |= PF_EXITING``."""

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    want = f"+ {flags_offset:#x}], {flag}"
    return [i.address + i.size for i in md.disasm(code, code_addr)
            if i.mnemonic == "or" and i.op_str.startswith("dword ptr [") and i.op_str.endswith(want)]


def resolve_points(sess: Session) -> Points:
    """The kernel points, checked against the kernel's own text (kallsyms + the bytes there)."""
    syms = sess.info.symbols
    ks = sess.symbols

    def sym(name: str) -> int:
        if name not in syms:
            raise KernelDiffError(f"kernel {sess.info.release} has no symbol {name}")
        return syms[name]

    proc = sym("process_unwind_deferred")
    end = ks.next_symbol_address(proc)
    code = sess.read(proc, end - proc)
    thunks = {a for n, a in syms.items() if n.startswith("__x86_indirect_") and n.endswith("rax")}
    sites = indirect_call_sites(code, proc, thunks)
    perf_work = sym("perf_unwind_work")
    if len(sites) == 1:
        callback, how = sites[0], f"the indirect call at process_unwind_deferred+{sites[0] - proc:#x}"
    else:
        # No single retpoline call found (another mitigation build): perf's callback's entry.
        callback, how = sym("perf_unwind_deferred_callback"), "perf_unwind_deferred_callback's entry"
    faultable = sym("unwind_user_faultable")
    # Where PF_EXITING is set: inside exit_signals(), with interrupts off (a request after the
    # store fails with -EINVAL, and one can come before exit_signals() returns); else after its call.
    es = sym("exit_signals")
    sites = flag_set_sites(sess.read(es, ks.next_symbol_address(es) - es), es,
                           sess.btf.member_offset("task_struct", "flags"), PF_EXITING)
    if sites:
        exiting = tuple(sites)
    else:
        exiting = (sess.stops.points["exit"].addr,) if "exit" in sess.stops.points else ()
    returns = {sess.stops[p].addr: p for p in RETURN_POINTS if p in sess.stops.points}
    irq = sym("irq_enter_rcu")
    hardirq = hardirq_offset(sess.read(irq, min(ks.next_symbol_address(irq) - irq, 512))) or HARDIRQ_OFFSET_DEFAULT
    return Points(sym("unwind_deferred_request"), sym("unwind_deferred_task_work"),
                  sym("unwind_deferred_task_exit"), sym("unwind_user"),
                  (faultable, ks.next_symbol_address(faultable)), callback, how, sym("unwind_task_init"),
                  exiting, returns, perf_work, hardirq)
