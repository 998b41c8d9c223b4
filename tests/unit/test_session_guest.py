"""harness/session.py without a guest: the guest's RAM follows its initramfs, and a spec that
cannot work is refused before anything is built or booted."""

from __future__ import annotations

import pytest

from harness.session import (
    MAX_SMP,
    MEMORY_MIN_MB,
    GuestSpec,
    GuestSpecError,
    Session,
    guest_memory_mb,
)


def test_memory_follows_the_initramfs():
    assert guest_memory_mb(4 << 20) == MEMORY_MIN_MB  # the catalog's small programs
    assert guest_memory_mb(200 << 20) == 704  # 2 * 200 + 256, rounded up to 64
    assert guest_memory_mb(200 << 20) % 64 == 0
    assert guest_memory_mb((200 << 20) + 1) == 704  # 401 MiB + 256, still under 704


@pytest.mark.parametrize("spec, text", [
    (GuestSpec(smp=MAX_SMP + 1), f"--smp {MAX_SMP + 1}: between 1 and {MAX_SMP}"),
    (GuestSpec(smp=0), "--smp 0"),
    (GuestSpec(memory_mb=64), "--mem 64: at least"),
    (GuestSpec(user_programs=["/usr/bin/true", "/tmp/elsewhere/true"]),
     "user programs /usr/bin/true and /tmp/elsewhere/true would both be /user/true in the guest"),
])
def test_a_spec_that_cannot_work_is_refused_before_any_boot(spec, text):
    with pytest.raises(GuestSpecError, match=text) as e:
        Session(spec).start()  # raises before the kernel is even looked up
    assert e.value.exit_code == 2


def test_one_binary_named_twice_is_one_program(tmp_path):
    (tmp_path / "prog").write_bytes(b"")
    # the same file by two spellings: one /user/prog, no clash
    GuestSpec(user_programs=[str(tmp_path / "prog"), f"{tmp_path}/./prog"]).check()
