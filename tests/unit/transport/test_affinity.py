"""--pin and --rt (harness/transport/affinity.py) on real processes: a child with threads, this thread."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys

import pytest

from harness.transport.affinity import STUB_PRIORITY, claim_cpus, pin_apart, stub_first
from harness.transport.errors import PinError
from tests.support.gating import require
from tests.support.paths import REPO

# Three threads, the first named as QEMU names a TCG vCPU thread (prctl PR_SET_NAME).
CHILD = """import ctypes, threading, time
def vcpu():
    ctypes.CDLL(None).prctl(15, b"CPU 0/TCG", 0, 0, 0)
    time.sleep(30)
threading.Thread(target=vcpu, daemon=True).start()
[threading.Thread(target=time.sleep, args=(30,), daemon=True).start() for _ in range(2)]
time.sleep(0.2)
print('up', flush=True)
time.sleep(30)
"""


@contextlib.contextmanager
def _child(code: str, stdin=None):
    """A Python child running ``code``, once it has printed "up"; killed and reaped after."""
    child = subprocess.Popen([sys.executable, "-c", code], stdin=stdin, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "up"
        yield child
    finally:
        child.kill()
        child.wait(timeout=10)


def test_the_harness_and_qemus_threads_end_up_on_different_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    require(len(cpus) >= 2, "one CPU: nothing to split")
    with _child(CHILD) as child:
        before = os.sched_getaffinity(0)
        words, undo = pin_apart(child.pid)
        try:
            assert os.sched_getaffinity(0) == {cpus[-1]}
            tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
            names = {t: open(f"/proc/{child.pid}/task/{t}/comm").read().strip() for t in tids}
            assert len(tids) == 4 and sorted(names.values()).count("CPU 0/TCG") == 1
            # the vCPU thread alone on the other CPUs; QEMU's other threads beside the harness
            assert {names[t]: os.sched_getaffinity(t) for t in tids}["CPU 0/TCG"] == set(cpus[:-1])
            assert [os.sched_getaffinity(t) for t in tids if names[t] != "CPU 0/TCG"] == [{cpus[-1]}] * 3
            assert words.startswith("pinned: QEMU's 1 vCPU thread on CPU")
            assert words.endswith(f"the harness and QEMU's other threads on CPU {cpus[-1]}")
        finally:
            undo()
        assert os.sched_getaffinity(0) == before


def test_a_qemu_that_is_gone_is_a_typed_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=10)
    require(len(os.sched_getaffinity(0)) >= 2, "one CPU: pin_apart does nothing there")
    before = os.sched_getaffinity(0)
    with pytest.raises(PinError, match=f"pid {child.pid}"):
        pin_apart(child.pid)
    assert os.sched_getaffinity(0) == before  # nothing changed for the harness


def test_a_qemu_without_named_vcpu_threads_is_a_typed_error():
    # QEMU 7.2 names its threads only with -name debug-threads=on: nothing to tell the vCPUs by
    require(len(os.sched_getaffinity(0)) >= 2, "one CPU: pin_apart does nothing there")
    with _child("import time; print('up', flush=True); time.sleep(30)") as child:
        before = os.sched_getaffinity(0)
        with pytest.raises(PinError, match="named as a vCPU thread"):
            pin_apart(child.pid)
        assert os.sched_getaffinity(0) == before


# A main thread that starts a thread when told (a line on stdin), after --rt was applied to it.
LATER = """import os, sys, threading, time
print('up', flush=True)
sys.stdin.readline()
def later():
    print(os.sched_getscheduler(0), flush=True)
    time.sleep(30)
threading.Thread(target=later, daemon=True).start()
time.sleep(30)
"""


def test_rt_makes_the_main_thread_real_time_and_not_the_threads_it_starts_later():
    require(os.geteuid() == 0, "SCHED_FIFO needs CAP_SYS_NICE (root)")
    with _child(LATER, stdin=subprocess.PIPE) as child:
        mine = os.sched_getscheduler(0)
        words = stub_first(child.pid)
        assert os.sched_getscheduler(child.pid) == os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
        assert os.sched_getparam(child.pid).sched_priority == STUB_PRIORITY
        assert words.startswith(f"QEMU's main loop (pid {child.pid}) at SCHED_FIFO {STUB_PRIORITY}")
        child.stdin.write("go\n")
        child.stdin.flush()
        assert int(child.stdout.readline()) == os.SCHED_OTHER  # SCHED_RESET_ON_FORK
        assert os.sched_getscheduler(0) == mine  # the harness itself is left as it was


def test_rt_on_a_qemu_that_is_gone_is_a_typed_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=10)
    with pytest.raises(PinError, match=f"--rt: .*pid {child.pid}"):
        stub_first(child.pid)


def test_rt_without_the_capability_says_what_it_needs():
    # a child that gave up every capability (setpriv, util-linux) tries it on itself
    require(shutil.which("setpriv") is not None, "setpriv (util-linux) is not installed")
    code = ("import os; from harness.transport.affinity import stub_first\n"
            "from harness.transport.errors import PinError\n"
            "try:\n    stub_first(os.getpid())\nexcept PinError as e:\n    print(e)\n")
    out = subprocess.run(["setpriv", "--inh-caps=-all", "--bounding-set=-all", sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "SCHED_FIFO needs CAP_SYS_NICE" in out.stdout, out.stdout + out.stderr


CLAIM = """import sys
from pathlib import Path
from harness.transport.affinity import claim_cpus
print('up', flush=True)
print('held' if claim_cpus(Path(sys.argv[1])) is None else 'taken', flush=True)
"""


def _claim_elsewhere(lock) -> str:
    """What another process (another harness) gets from claim_cpus on ``lock``."""
    r = subprocess.run([sys.executable, "-c", CLAIM, str(lock)], capture_output=True, text=True, timeout=60,
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    return r.stdout.split()[-1]


def test_one_harness_at_a_time_holds_the_pin_lock(tmp_path):
    """The default --pin: the first harness takes the machine's lock and pins; another finds it
    held and stays unpinned; once the first closes it (or ends), the next one takes it."""
    lock = tmp_path / "cache" / "pin.lock"
    fd = claim_cpus(lock)
    assert fd is not None and lock.exists()
    try:
        assert _claim_elsewhere(lock) == "held"
        assert claim_cpus(lock) is None  # flock: another open file of this process is turned away too
    finally:
        os.close(fd)
    assert _claim_elsewhere(lock) == "taken"


class _Machine:
    """The QEMU process as Session._pin and Session.close see it: a pid (a real child's), and a
    close that the child's own context manager does instead."""

    def __init__(self, pid: int):
        self.pid = pid

    def close(self) -> None:
        pass


@pytest.mark.parametrize("banner, pinned", [("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)", False),
                                            ("QEMU emulator version 11.1.3 (Debian 1:11.1.3+ds-2~bpo13+1)", True)])
def test_the_default_pins_a_qemu_that_keeps_its_code_and_one_harness_only(banner, pinned, tmp_path, monkeypatch):
    """Session._pin(auto) on a real child whose thread is named as a TCG vCPU: 7.2 (which
    retranslates after every stop, where pinning measured slower) is left unpinned with the
    reason; 11.1 is pinned, and with the machine's lock held by another harness it is not."""
    from harness.images.qemu import Qemu
    from harness.session import PIN_LOCK, GuestSpec, Session
    require(len(os.sched_getaffinity(0)) >= 2, "one CPU: nothing to split")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    before = os.sched_getaffinity(0)
    with _child(CHILD) as child:
        s = Session(GuestSpec(pin=None))
        s.qemu, s.machine = Qemu("x", ("qemu-system-x86_64",), banner), _Machine(child.pid)
        try:
            s._pin(auto=True)
            assert bool(s.pinned) == pinned and bool(s.unpinned) != pinned, (s.pinned, s.unpinned)
            if not pinned:
                assert "flushes its translated code" in s.unpinned
                return
            assert _claim_elsewhere(tmp_path / PIN_LOCK) == "held"
            other = Session(GuestSpec(pin=None))
            other.qemu, other.machine = s.qemu, s.machine
            other._pin(auto=True)
            assert other.pinned == "" and "another harness" in other.unpinned
        finally:
            s.close()
            os.sched_setaffinity(0, before)
    assert _claim_elsewhere(tmp_path / PIN_LOCK) == "taken"  # closed: the lock is free again
