"""The request's own registers: was the delivered stack the one that was asked for?

A tracer requests a user stack from NMI or IRQ context; the task work walks whatever ``pt_regs``
it finds at the return to user space.  The registers the request was about (the interrupted user
registers, or those saved at kernel entry when the request hit kernel code) must be the ones the
walk started from, unless something between the two legitimately replaced them: the causes of
kind ``regs`` in :mod:`harness.verdicts.causes` (execve, rt_sigreturn, signal delivery, a request
inside the entry/exit assembly).
"""

from __future__ import annotations

from .base import NotChecked, Oracle, OracleFrames, Stack, register

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
        return OracleFrames((req.want.ip,), frozenset({0}), "the requested registers", True, req.want)
