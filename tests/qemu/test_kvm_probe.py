"""The KVM probe (harness/transport/qemu.py: boot_probe, kvm_usable) costs seconds, not 30: it
watches the console as it comes and gives up on a silent guest after PROBE_FIRST_OUTPUT.

Real QEMU, real kernel, no guest channels: the same boot the probe makes, under TCG where the
answer is known (it boots), and under KVM whatever this machine's KVM does (a paravirtual KVM
that cannot run the kernel: silent, then "no" in about 3 s; a real one: "yes" in about 1 s)."""

from __future__ import annotations

import os
import time

import pytest

from harness.images.kernel import get_kernel
from harness.images.qemu import resolve_qemu
from harness.transport.qemu import PROBE_FIRST_OUTPUT, boot_probe, kvm_usable

pytestmark = pytest.mark.qemu


@pytest.fixture(scope="module")
def qemu_and_kernel():
    return list(resolve_qemu(None).prefix), get_kernel("default").vmlinux


def test_a_kernel_that_runs_is_seen_booting(qemu_and_kernel):
    qemu, vmlinux = qemu_and_kernel
    ok, why, seconds = boot_probe(qemu, vmlinux, "tcg")
    assert ok and why == "TCG booted the guest kernel" and seconds < 30


def test_a_silent_guest_is_given_up_on_quickly(qemu_and_kernel):
    qemu, vmlinux = qemu_and_kernel
    # Too short for even TCG's first console byte (~0.5-1 s after QEMU starts): "no" at once.
    ok, why, seconds = boot_probe(qemu, vmlinux, "tcg", first_output=0.05)
    assert not ok and why.startswith("no console output within 0.05 s") and seconds < 5


def test_the_kvm_probe_costs_seconds(qemu_and_kernel):
    qemu, vmlinux = qemu_and_kernel
    t0 = time.monotonic()
    ok, why = kvm_usable(qemu, vmlinux)
    seconds = time.monotonic() - t0
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        assert not ok and "/dev/kvm" in why
    # Either way, the answer is there within the silence limit and QEMU's start (or a boot).
    assert seconds < PROBE_FIRST_OUTPUT + 5 or ok, (ok, why, seconds)
