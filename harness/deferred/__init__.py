"""Model of the kernel's deferred user-space unwinding (``kernel/unwind/deferred.c``).

* :mod:`.profile`: the revision validated (``seed-v10``, ``mainline``), as data and small strategies;
* :mod:`.model`: tasks, tracers, requests, task work, exit, fork, as interleavable steps;
* :mod:`.log`: the JSONL event log; :mod:`.check`: the offline invariant checker;
* :mod:`.stitch`: joining samples with deferred user stacks, as perf does.
"""

from .check import Checker, Verdict, Violation, check_events, check_lines
from .log import EventLog, LogFormatError, read_events, trace_hash
from .model import (
    IRQ,
    NMI,
    SYSCALL,
    Context,
    DeferredModel,
    ModelBlocked,
    ModelError,
    Task,
    UnwindWork,
    run,
)
from .profile import EBUSY, EINVAL, PF_EXITING, PF_KTHREAD, Profile, get_profile, mainline, seed_v10

__all__ = [
    "Checker", "Verdict", "Violation", "check_events", "check_lines",
    "EventLog", "LogFormatError", "read_events", "trace_hash",
    "IRQ", "NMI", "SYSCALL", "Context", "DeferredModel", "ModelBlocked", "ModelError", "Task",
    "UnwindWork", "run",
    "EBUSY", "EINVAL", "PF_EXITING", "PF_KTHREAD", "Profile", "get_profile", "mainline", "seed_v10",
]
