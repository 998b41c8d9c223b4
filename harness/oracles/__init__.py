"""Oracles: independent ideas of what a delivered user stack should be.

One module per oracle, each registering itself (:func:`harness.oracles.base.register`):
``regs`` (the request's own registers: the right stack), ``cfi`` (DWARF CFI from .eh_frame,
through signal frames), ``shadow`` (the program's own -finstrument-functions shadow stack),
``perf`` (the guest kernel's own callchain of a perf sample: ``harness perf`` only, see
:mod:`harness.perf.oracle`).
"""

from .base import (
    ORACLES,
    NotChecked,
    Oracle,
    OracleFrames,
    Request,
    Setup,
    Stack,
    build_oracles,
)

__all__ = ["ORACLES", "NotChecked", "Oracle", "OracleFrames", "Request", "Setup", "Stack", "build_oracles"]
