"""The request's own registers: was the delivered stack the one that was asked for?

A tracer requests a user stack from NMI or IRQ context; the task work walks whatever ``pt_regs``
it finds at the return to user space.  The registers the request was about (the interrupted user
registers, or those saved at kernel entry when the request hit kernel code) must be the ones the
walk started from, unless something between the two legitimately replaced them: the causes of
kind ``regs`` in :mod:`harness.verdicts.causes` (execve, rt_sigreturn, signal delivery, a request
inside the entry/exit assembly).
"""

from __future__ import annotations

from ..memory import Memory, MemoryFault
from ..regs import UserRegs
from .base import NotChecked, Oracle, OracleFrames, Request, Stack, register
from .cfi import RT_SIGRETURN_CODE

__all__ = ["RegsOracle"]


@register
class RegsOracle(Oracle):
    name = "regs"
    registers = True
    description = "the request's own registers (the right stack)"

    def frames(self, stack: Stack) -> OracleFrames | NotChecked:
        req = stack.request
        if req is None or req.want is None:
            return NotChecked("the request hit a task without user registers (kernel thread)")
        # (``outermost`` left at its default: only a frame list's alignment reads it, and the
        # verdict of a registers oracle compares registers)
        return OracleFrames((req.want.ip,), frozenset({0}), "the requested registers", regs=req.want)

    def complete(self, memory: Memory, regs: UserRegs, fs_base: int, request: Request | None = None) -> None:
        """Another task's signal restorer, read while the guest is stopped: for a task whose binaries
        the scenario does not map, signal-delivery and sigreturn-restored prove a signal frame by the
        restorer's code (the word at sp, and the code before the requested ip in rt_sigreturn)."""
        if request is None or request.own is not None or regs.compat:
            return
        addrs = [request.want.ip - len(RT_SIGRETURN_CODE)] if request.want is not None else []
        try:
            addrs.append(int.from_bytes(memory.read(regs.sp, 8), "little"))
        except MemoryFault:
            pass
        for addr in addrs:
            try:
                memory.read(addr, len(RT_SIGRETURN_CODE))
            except MemoryFault:
                pass  # the cause meets the same (kept) fault
