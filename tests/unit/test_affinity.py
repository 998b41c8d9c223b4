"""--pin (harness/transport/affinity.py) on real processes: a child with threads, this thread."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import require

from harness.transport.affinity import pin_apart
from harness.transport.errors import PinError

CHILD = "import threading, time\n[threading.Thread(target=time.sleep, args=(30,), daemon=True).start() for _ in range(3)]\n" \
        "print('up', flush=True)\ntime.sleep(30)\n"


def test_the_harness_and_qemus_threads_end_up_on_different_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    require(len(cpus) >= 2, "one CPU: nothing to split")
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "up"
        before = os.sched_getaffinity(0)
        words, undo = pin_apart(child.pid)
        try:
            assert os.sched_getaffinity(0) == {cpus[-1]}
            tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
            assert len(tids) == 4 and all(os.sched_getaffinity(t) == set(cpus[:-1]) for t in tids)
            assert words.startswith(f"pinned: the harness on CPU {cpus[-1]}")
        finally:
            undo()
        assert os.sched_getaffinity(0) == before
    finally:
        child.kill()
        child.wait(timeout=10)


def test_a_qemu_that_is_gone_is_a_typed_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=10)
    require(len(os.sched_getaffinity(0)) >= 2, "one CPU: pin_apart does nothing there")
    before = os.sched_getaffinity(0)
    with pytest.raises(PinError, match=f"pid {child.pid}"):
        pin_apart(child.pid)
    assert os.sched_getaffinity(0) == before  # nothing changed for the harness
