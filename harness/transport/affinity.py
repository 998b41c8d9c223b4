"""Keeping the harness and QEMU on different CPUs (``--pin``).

A trace is a ping-pong between the harness's thread and QEMU (its main loop answers the gdb
stub; its vCPU thread runs the guest).  Left to the scheduler on a 2-core machine, each write to
the stub can wake a QEMU thread on the core the harness runs on and preempt it.  Measured with
bench deferred's scenario on QEMU 11.1 (2 cores, quiet, alternating): 512 and 540 traces/s
unpinned, 639 and 639 with the harness on one CPU and QEMU's threads on the other.

Pinned, QEMU's vCPU threads also run as ``SCHED_IDLE``: on QEMU's CPU a TCG vCPU thread
never sleeps while the guest runs, and under the EEVDF scheduler (Linux 6.6 on) a woken
thread of the same class may wait for the running one's slice, up to a scheduler tick: QEMU's
main loop, which answers the gdb stub and runs the NMI monitor's command, waited 4 ms (HZ=250)
behind the vCPU thread for most NMIs.  A waking normal thread always preempts an idle-policy
one at once.  Measured on QEMU 11.1 (2 cores, quiet): from the NMI command to its stop 3.9 ms
median pinned, 0.25 ms with the vCPU threads idle-policy; bench deferred's traces/s 617-664
pinned, 766-808 with it.  The cost: on a machine with other work, a vCPU thread gets only the
CPU time nothing else wants, which is why this belongs to ``--pin`` (a quiet machine, one
harness) and not to every run.

Only for one harness at a time: two harnesses pinned alike share one CPU (the test suite's
xdist workers run unpinned).  Linux only (``os.sched_setaffinity``, ``os.sched_setscheduler``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from .errors import PinError


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError as exc:
        raise PinError(f"cannot list the threads of QEMU (pid {pid}): {exc}") from exc


#: QEMU's names for its vCPU threads ("CPU 0/TCG", "CPU 1/KVM")
VCPU_THREAD = re.compile(r"CPU \d+/(TCG|KVM)")


def _comm(pid: int, tid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""  # a thread that just ended


def pin_apart(qemu_pid: int) -> tuple[str, Callable[[], None]]:
    """Put the calling thread on the last CPU it may use and every thread of ``qemu_pid`` on the
    others, its vCPU threads at ``SCHED_IDLE`` (the module's docstring says why).  Returns (what
    was done, in words; an undo for the calling thread).  With one CPU there is nothing to
    split: nothing is done, and the words say so."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return f"not pinned: only CPU {cpus[0]} is usable", lambda: None
    mine, theirs = {cpus[-1]}, set(cpus[:-1])
    before = os.sched_getaffinity(0)
    idle = 0
    for tid in _threads(qemu_pid):
        try:
            os.sched_setaffinity(tid, theirs)
            if VCPU_THREAD.fullmatch(_comm(qemu_pid, tid)):
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
                idle += 1
        except ProcessLookupError:
            continue  # a thread that just ended
        except OSError as exc:
            raise PinError(f"cannot pin QEMU's thread {tid} to CPUs {sorted(theirs)}: {exc}") from exc
    os.sched_setaffinity(0, mine)
    words = f"pinned: the harness on CPU {cpus[-1]}, QEMU on CPU{'s' if len(theirs) > 1 else ''} " + \
        ",".join(map(str, sorted(theirs))) + f", its {idle} vCPU thread{'s' if idle != 1 else ''} SCHED_IDLE"
    return words, lambda: os.sched_setaffinity(0, before)
