"""The pool of guests (tests/support/guest_pool.py, the guest_pool fixture of tests/conftest.py), without a
guest: what is one kind of guest, what a kind
boots with, and that a test may take only what its module declared (the pool's own check of a
returned guest runs on real guests: tests/qemu/test_guest_pool.py)."""

from __future__ import annotations

import pytest

from harness.images.programs import Variant
from harness.session import GuestSpec
from tests.support.guest_pool import GuestPool, pool_group, pool_key

A = ("callchain", "host", Variant())
B = ("callchain", "host", Variant(bits=32))
C = ("threads", "host", Variant(shadow=True))


def test_the_programs_are_not_the_kind(monkeypatch):
    monkeypatch.delenv("HARNESS_QEMU", raising=False)
    assert pool_key(GuestSpec(programs=[A])) == pool_key(GuestSpec(programs=[B], user_programs=["/usr/bin/true"]))
    from harness.images.qemu import DEFAULT_CHOICE

    assert pool_key(GuestSpec(qemu=DEFAULT_CHOICE)) == pool_key(GuestSpec())  # the default, named or not
    for other in (GuestSpec(smp=2), GuestSpec(kernel="bookworm"), GuestSpec(pti=True), GuestSpec(memory_mb=256),
                  GuestSpec(qemu="host" if DEFAULT_CHOICE != "host" else "backports"), GuestSpec(transport="mi"),
                  GuestSpec(pin=True), GuestSpec(rt=True)):
        assert pool_key(other) != pool_key(GuestSpec()), other
        assert pool_group(other) != pool_group(GuestSpec())
    assert pool_group(GuestSpec(smp=2)).startswith("pool:default-smp2-")


def test_a_kind_boots_with_every_declared_program():
    pool = GuestPool([GuestSpec(programs=[A, B]), GuestSpec(programs=[B, C]), GuestSpec(user_programs=["/bin/x"]),
                      GuestSpec(smp=2, programs=[C])])
    union = pool.spec_for(GuestSpec(programs=[C]))
    assert union.programs == [A, B, C] and union.user_programs == ["/bin/x"] and union.smp == 1
    assert pool.spec_for(GuestSpec(smp=2)).programs == [C]
    assert pool.idle(GuestSpec()) is None and pool.boots == 0  # nothing booted before a take


def test_an_undeclared_guest_is_an_error_not_a_boot():
    pool = GuestPool([GuestSpec(programs=[A])])
    with pytest.raises(AssertionError, match="POOL_GUESTS"):
        pool.spec_for(GuestSpec(programs=[B]))  # a program the kind was not declared with
    with pytest.raises(AssertionError, match="POOL_GUESTS"):
        with pool.take(GuestSpec(kernel="bookworm", programs=[A])):  # a kind nobody declared
            pass
    assert pool.boots == 0
