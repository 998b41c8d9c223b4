"""A user's own binary under the main job: Debian's dynamically linked sha256sum (PIE, glibc,
no frame pointers, no SFrame), copied into the guest with its libraries."""

from __future__ import annotations

import dataclasses

import pytest

from harness.images.programs import USER, user_program
from harness.scenarios.catalog import user_scenario
from harness.scenarios.engine import MAX_REQUESTS_PER_SAMPLE, OFF_PROGRAM_PAUSE_MAX, OFF_PROGRAM_STREAK, Engine
from harness.session import GuestSpec

pytestmark = pytest.mark.qemu

BINARY = "/usr/bin/sha256sum"
GUEST = GuestSpec(user_programs=[BINARY])
SLEEPER = "/bin/sleep"  # Debian's coreutils: the program sleeps, so every NMI lands elsewhere
SLEEPER_GUEST = GuestSpec(user_programs=[SLEEPER])
POOL_GUESTS = [GUEST, SLEEPER_GUEST]  # from the worker's pool (tests/conftest.py)


def test_user_program_variant_is_read_from_the_file():
    p = user_program(BINARY)
    assert p.toolchain == USER and p.variant.bits == 64 and not p.variant.static
    assert not p.variant.shadow and not p.variant.sframe  # bookworm's binutils 2.40 builds
    guest = {g for _, g in p.runtime}
    assert "/lib64/ld-linux-x86-64.so.2" in guest and any(g.endswith("/libc.so.6") for g in guest)


@pytest.mark.pool_guest(GUEST)
def test_user_program_stacks_are_checked_by_cfi(guest_pool):
    sc = user_scenario(BINARY, ["/dev/zero"], samples=30)
    assert sc.unwinder == "fp" and not sc.variant.shadow
    with guest_pool.take(GUEST) as sess:
        r = Engine(sess, sc).run()
    assert not r.errors and not r.failures and not r.invariant_violations, (r.errors, r.failures[:2])
    own = r.own_stacks
    assert own >= 10, f"requests {dict(r.requests)}, causes {dict(r.causes)}"
    # Every own stack is judged by CFI (frame pointers stop early in this build: each proven).
    assert r.judged("cfi") == own and "shadow" not in r.oracles


@pytest.mark.pool_guest(SLEEPER_GUEST)
def test_requests_that_keep_missing_the_program_let_the_guest_run_between_them(guest_pool):
    # NMIs back to back (no jitter) on a program that sleeps: each lands on the idle task or
    # another task.  From the OFF_PROGRAM_STREAK-th in a row on, each waits 1 ms more (at most
    # OFF_PROGRAM_PAUSE_MAX) with the guest running, until the request budget ends the run.
    samples = 5
    sc = dataclasses.replace(user_scenario(SLEEPER, ["600"], samples=samples), jitter=0.0)
    with guest_pool.take(SLEEPER_GUEST) as sess:
        r = Engine(sess, sc).run()
    assert not r.errors and not r.failures, (r.errors, r.failures[:2])
    limit = MAX_REQUESTS_PER_SAMPLE * samples + 100
    assert r.sampled == 0 and any(n.startswith(f"sampling stopped after {limit} requests") for n in r.notes), r.notes
    pauses = sum(min(0.001 * (k - OFF_PROGRAM_STREAK + 1), OFF_PROGRAM_PAUSE_MAX)
                 for k in range(OFF_PROGRAM_STREAK, limit))
    # at least the pauses (2.6 s); 150 NMIs without them take a fraction of that on TCG
    assert r.loop_seconds >= pauses, (r.loop_seconds, pauses, r.stops)
