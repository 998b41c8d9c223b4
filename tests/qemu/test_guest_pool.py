"""The worker's pool of guests (tests/conftest.py) hands out only guests that pass its check.

On the pool's default guest: the check passes on a guest as it was taken, and fails for each
thing a user can leave behind (a breakpoint, a guest left running, a program still running);
a guest whose QEMU was killed is shut down at its return, not kept for the next user.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from harness.images.programs import Variant
from harness.session import GuestSpec
from procs import gone

GUEST = GuestSpec(programs=[("callchain", "host", Variant())])
POOL_GUESTS = [GUEST]
pytestmark = [pytest.mark.qemu, pytest.mark.pool_guest(GUEST)]


def test_the_check_finds_what_a_user_left_behind(guest_pool):
    with guest_pool.take(GUEST) as sess:
        t, m = sess.target, sess.machine
        assert guest_pool.unhealthy(sess) is None

        addr = sess.stops["nmi"].addr
        t.set_breakpoint(addr)
        assert "breakpoint" in guest_pool.unhealthy(sess)
        t.remove_breakpoint(addr)

        t.resume()
        assert guest_pool.unhealthy(sess) == "left running"
        t.interrupt()

        prog = sess.program("callchain", "host", Variant())
        proc = sess.run_program([prog.guest_path, "100000000", "spin"])
        why = guest_pool.unhealthy(sess)
        assert why.startswith("programs still running") and f"{proc.pid} {prog.guest_path}" in why, why
        t.resume()
        m.shell(f"kill {proc.pid}")
        assert m.wait_exit(proc, timeout=30) == 128 + signal.SIGTERM
        t.interrupt()
        assert guest_pool.unhealthy(sess) is None  # and so it goes back to the pool


def test_a_killed_guest_is_never_handed_out_again(guest_pool):
    with guest_pool.take(GUEST) as sess:
        pid = sess.machine.pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while sess.machine.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert guest_pool.unhealthy(sess) == "QEMU is gone"
    assert gone(pid)
    assert guest_pool.discarded and guest_pool.discarded[-1] == "QEMU is gone"
    # Not kept: the next user of this kind of guest boots a fresh one (not done here: a boot)
    assert guest_pool.idle(GUEST) is None
