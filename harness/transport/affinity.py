"""Keeping the harness and QEMU on different CPUs (``--pin``).

A trace is a ping-pong between the harness's thread and QEMU (its main loop answers the gdb
stub; its vCPU thread runs the guest).  Left to the scheduler on a 2-core machine, each write to
the stub can wake a QEMU thread on the core the harness runs on and preempt it.  The first
layout (the harness on one CPU, all of QEMU on the other; NMIs by QMP) measured with bench
deferred's scenario on QEMU 11.1 (2 cores, quiet, alternating): 512 and 540 traces/s unpinned,
639 and 639 pinned.

QEMU's vCPU threads get their own CPUs; its main loop and other threads share the harness's.
A TCG vCPU thread never sleeps while the guest runs, and under the EEVDF scheduler (Linux 6.6
on) a thread woken on its CPU may wait for the running one's slice, up to a scheduler tick:
with every QEMU thread on one CPU, the main loop (which answers the gdb stub and runs the NMI
monitor's command) waited 4 ms (HZ=250) behind the vCPU thread for most NMIs, and bench
deferred fell to 250 traces/s.  The main loop and the harness take turns (one waits for the
other's answer), so they share a CPU well.  Measured on QEMU 11.1 (2 cores, quiet), bench
deferred's scenario, ten and six runs: 526-657 traces/s.

Tried and not used: the vCPU threads at ``SCHED_IDLE`` on QEMU's CPU (a waking normal thread
preempts an idle-policy one at once) gave 766-910 traces/s, but in 4 of 14 runs most NMIs
caught /init or an exiting task instead of the program, so a run took up to 2100 requests.
Most likely why: the main loop, which now always ran first, took the next NMI's command
before the vCPU thread ran on, so the guest hardly progressed between two NMIs, and a task
caught on its way to sleep or out of do_exit stayed current across thousands of them (one
run: 3966 requests refused with -EINVAL on one PF_EXITING task).

Only for one harness at a time: two harnesses pinned alike share one CPU (the test suite's
xdist workers run unpinned).  Linux only (``os.sched_setaffinity``).

``--rt`` (:func:`stub_first`) is the other half of the same problem, and it pays more: while
the guest runs to its next stop, the harness does the last delivery's walk and checks; on two
cores the vCPU thread holds one and the harness the other, and QEMU's main loop, woken by the
NMI command or by the vCPU thread's stop, waited for one of them to give its CPU up (a 0.5 ms
busy loop after the NMI command made the NMI's stop 0.72 ms late instead of 0.33).  At
``SCHED_FIFO`` the main loop preempts the harness at once.  Measured on QEMU 11.1 (2 cores,
quiet), bench deferred's scenario, 1000 samples, three runs in each of three guests: 857-1007
traces/s with the main loop at SCHED_FIFO 1, 589-664 without; with ``--pin`` besides, 661-689.
The earlier note "one run of three at 77 traces/s" with a real-time main loop was taken in the
first --pin layout (all of QEMU on one CPU).
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Callable
from pathlib import Path

from .errors import PinError

#: the real-time priority of QEMU's main loop under --rt: the lowest; nothing else here is real-time
STUB_PRIORITY = 1


def stub_first(qemu_pid: int) -> str:
    """Put QEMU's main loop (its main thread: the gdb stub, the monitors, the stop and resume
    of the vCPUs) at ``SCHED_FIFO``, so that it runs as soon as it is woken, before the
    harness's own work (the module's docstring says why).  Threads it starts later do not
    inherit the policy (``SCHED_RESET_ON_FORK``).  Needs ``CAP_SYS_NICE`` (root); without it,
    or with QEMU gone, a :class:`PinError`.  The kernel's real-time throttling (by default 5%
    of each second left to other policies) still bounds a main loop that would spin."""
    try:
        os.sched_setscheduler(qemu_pid, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(STUB_PRIORITY))
    except PermissionError as exc:
        raise PinError(f"--rt: cannot make QEMU's main loop (pid {qemu_pid}) real-time: {exc.strerror} "
                       f"(SCHED_FIFO needs CAP_SYS_NICE: run as root, or leave --rt out)") from exc
    except OSError as exc:
        raise PinError(f"--rt: cannot make QEMU's main loop (pid {qemu_pid}) real-time: {exc}") from exc
    return (f"QEMU's main loop (pid {qemu_pid}) at SCHED_FIFO {STUB_PRIORITY}: the gdb stub answers before the "
            "harness's own work")


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


def claim_cpus(lock: Path) -> int | None:
    """Take the machine's pin lock (``flock``, without waiting): the file descriptor that holds it
    until it is closed (or the process ends), or None when another harness on this machine holds
    it.  What lets ``--pin`` be the default: one harness at a time pins (two pinned alike would
    share one CPU), the others run where the scheduler puts them."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def pin_apart(qemu_pid: int) -> tuple[str, Callable[[], None]]:
    """Put QEMU's vCPU threads on all CPUs but the last one this process may use, and the
    calling thread with QEMU's other threads on that last one (the module's docstring says
    why).  Returns (what was done, in words; an undo for the calling thread).  With one CPU
    there is nothing to split: nothing is done, and the words say so."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return f"not pinned: only CPU {cpus[0]} is usable", lambda: None
    mine, theirs = {cpus[-1]}, set(cpus[:-1])
    before = os.sched_getaffinity(0)
    names = {tid: _comm(qemu_pid, tid) for tid in _threads(qemu_pid)}
    if not any(VCPU_THREAD.fullmatch(n) for n in names.values()):
        raise PinError(f"no thread of QEMU (pid {qemu_pid}) is named as a vCPU thread (CPU n/TCG or KVM; "
                       f"QEMU names them with -name debug-threads=on): {sorted(set(names.values()))}")
    vcpus = 0
    for tid, name in names.items():
        vcpu = bool(VCPU_THREAD.fullmatch(name))
        try:
            os.sched_setaffinity(tid, theirs if vcpu else mine)
        except ProcessLookupError:
            continue  # a thread that just ended
        except OSError as exc:
            raise PinError(f"cannot pin QEMU's thread {tid}: {exc}") from exc
        vcpus += vcpu
    os.sched_setaffinity(0, mine)
    words = (f"pinned: QEMU's {vcpus} vCPU thread{'s' if vcpus != 1 else ''} on CPU{'s' if len(theirs) > 1 else ''} "
             + ",".join(map(str, sorted(theirs))) + f", the harness and QEMU's other threads on CPU {cpus[-1]}")
    return words, lambda: os.sched_setaffinity(0, before)
