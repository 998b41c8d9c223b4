"""The worker's pool of guests (tests/conftest.py) hands out only guests that pass its check.

On the pool's default guest: the check passes on a guest as it was taken, and fails for each
thing a user can leave behind (a breakpoint, a guest left running, a program still running or
still to start).  A guest that panics is shut down at its return, not kept for the next user:
test_engine_faults.py's panic test (a guest of its own, from a pool of its own).
"""

from __future__ import annotations

import signal

import pytest

from harness.images.programs import Variant
from harness.session import GuestSpec

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
        assert guest_pool.unhealthy(sess) is None

        # a program that /init starts later (images/init.sh `later`): pending while it sleeps
        t.resume()
        later = m.run_later([prog.guest_path, "100000000", "spin"], delay=600)
        m.shell("true")  # /init reads its commands in order: the `later` is under way
        t.interrupt()
        why = guest_pool.unhealthy(sess)
        assert why.startswith("programs still running") and "later" in why, why
        t.resume()
        m.shell(f"kill $(cat /tmp/.later.{later.id})")
        t.interrupt()
        assert guest_pool.unhealthy(sess) is None  # and so it goes back to the pool
    assert guest_pool.idle(GUEST) is sess
