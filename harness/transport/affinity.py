"""Keeping the harness and QEMU on different CPUs (``--pin``).

A trace is a ping-pong between the harness's thread and QEMU (its main loop answers the gdb
stub; its vCPU thread runs the guest).  Left to the scheduler on a 2-core machine, each write to
the stub can wake a QEMU thread on the core the harness runs on and preempt it.  Measured with
bench deferred's scenario on QEMU 11.1 (2 cores, quiet, alternating): 512 and 540 traces/s
unpinned, 639 and 639 with the harness on one CPU and QEMU's threads on the other.

Only for one harness at a time: two harnesses pinned alike share one CPU (the test suite's
xdist workers run unpinned).  Linux only (``os.sched_setaffinity``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .errors import PinError


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError as exc:
        raise PinError(f"cannot list the threads of QEMU (pid {pid}): {exc}") from exc


def pin_apart(qemu_pid: int) -> tuple[str, Callable[[], None]]:
    """Put the calling thread on the last CPU it may use and every thread of ``qemu_pid`` on the
    others.  Returns (what was done, in words; an undo for the calling thread).  With one CPU
    there is nothing to split: nothing is done, and the words say so."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return f"not pinned: only CPU {cpus[0]} is usable", lambda: None
    mine, theirs = {cpus[-1]}, set(cpus[:-1])
    before = os.sched_getaffinity(0)
    for tid in _threads(qemu_pid):
        try:
            os.sched_setaffinity(tid, theirs)
        except ProcessLookupError:
            continue  # a thread that just ended
        except OSError as exc:
            raise PinError(f"cannot pin QEMU's thread {tid} to CPUs {sorted(theirs)}: {exc}") from exc
    os.sched_setaffinity(0, mine)
    words = f"pinned: the harness on CPU {cpus[-1]}, QEMU on CPU{'s' if len(theirs) > 1 else ''} " + \
        ",".join(map(str, sorted(theirs)))
    return words, lambda: os.sched_setaffinity(0, before)
