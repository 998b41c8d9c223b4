"""The debugger transports under failure: GDB or QEMU killed under them gives a typed error
within its bound, and no process a test started (QEMU, GDB, GDB's socat bridge) is left."""

from __future__ import annotations

import os
import signal
import time

import pytest

from harness.images.initramfs import build_initramfs
from harness.images.kernel import get_kernel
from harness.transport.errors import GuestPanic, TargetDied, TargetError, TargetTimeout
from harness.transport.mi import MiTarget
from harness.transport.qemu import Machine, MachineConfig
from harness.transport.rsp import RspTarget
from tests.support.procs import gone

pytestmark = pytest.mark.qemu

KERNEL_TEXT = 0xFFFFFFFF81000000  # nokaslr: startup_64


def wait_gone(pids, timeout: float = 3.0) -> list[int]:
    """PIDs still running after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if not gone(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@pytest.fixture(scope="module")
def images():
    return get_kernel("default"), build_initramfs([])


def boot(images, attempts: int = 3) -> Machine:
    kernel, initrd = images
    for attempt in range(attempts):
        m = Machine(MachineConfig(kernel.vmlinux, initrd))
        try:
            return m.start()
        except GuestPanic as exc:  # QEMU 7.2 TCG boot flake (stale int3 of text patching)
            m.close()
            if "int3" not in str(exc) or attempt == attempts - 1:
                raise


def _machine(images):
    m = boot(images)
    pid = m.pid
    try:
        yield m
    finally:
        m.close()
    assert wait_gone([pid]) == [], f"QEMU {pid} is still running"


@pytest.fixture
def machine(images):
    """A guest of its own, for a test that kills QEMU; checks QEMU is gone afterwards."""
    yield from _machine(images)


@pytest.fixture(scope="module")
def shared_machine(images):
    """One guest for the tests that only kill GDB."""
    yield from _machine(images)


def attach(kind: str, m: Machine):
    return RspTarget(m.gdb_socket) if kind == "rsp" else MiTarget(m.gdb_socket)


def started_pids(t) -> list[int]:
    return [t.pid, *t.helper_pids()] if isinstance(t, MiTarget) else []


# -- GDB killed --------------------------------------------------------------------------------
@pytest.mark.parametrize("running", [False, True], ids=["stopped", "running"])
def test_gdb_killed_under_mi_is_target_died(shared_machine, running):
    machine = shared_machine
    t = MiTarget(machine.gdb_socket, timeout=5.0)
    pids = started_pids(t)
    assert len(pids) == 2, "expected GDB and its socat bridge"
    try:
        assert len(t.read_memory(KERNEL_TEXT, 16)) == 16
        if running:
            t.resume()
        os.kill(t.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(TargetDied) as err:
            if running:
                t.wait_stop(30.0)
            else:
                t.read_memory(KERNEL_TEXT, 16)
        assert time.monotonic() - start < t.timeout
        assert "GDB exited (status -9)" in str(err.value)
        with pytest.raises(TargetDied):  # and it stays dead
            t.read_memory(KERNEL_TEXT, 16)
    finally:
        t.close()
    assert wait_gone(pids) == []
    # The stub is free again: a new client attaches and reads.
    with MiTarget(machine.gdb_socket) as again:
        assert len(again.read_memory(KERNEL_TEXT, 16)) == 16
        pids = started_pids(again)
    assert wait_gone(pids) == []


# -- QEMU killed -------------------------------------------------------------------------------
@pytest.mark.parametrize("running", [False, True], ids=["stopped", "running"])
@pytest.mark.parametrize("kind", ["rsp", "mi"])
def test_qemu_killed_under_transport(machine, kind, running):
    t = attach(kind, machine)
    pids = started_pids(t)
    try:
        assert len(t.read_memory(KERNEL_TEXT, 16)) == 16
        if running:
            t.resume()
        os.kill(machine.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises((TargetDied, TargetTimeout)) as err:
            if running:
                t.wait_stop(10.0)
            else:
                t.read_memory(KERNEL_TEXT + 4096, 16)
        elapsed = time.monotonic() - start
        assert elapsed < 10.0, f"{type(err.value).__name__} after {elapsed:.1f}s"
        # Expected: the stub's end of the connection closes, so it is a death, and fast.
        assert isinstance(err.value, TargetDied), repr(err.value)
        assert elapsed < 3.0
    finally:
        t.close()
    assert wait_gone(pids) == [], "GDB or socat outlived the transport"


# -- connecting to nothing ---------------------------------------------------------------------
def test_mi_connect_to_missing_socket_is_typed(tmp_path):
    started: list[int] = []

    class Recording(MiTarget):
        def _setup(self, connect_timeout):
            started.append(self.proc.pid)
            super()._setup(connect_timeout)

    start = time.monotonic()
    with pytest.raises(TargetError) as err:
        Recording(tmp_path / "nothing.sock", connect_timeout=10.0)
    assert time.monotonic() - start < 10.0
    assert "-target-select" in str(err.value) and not isinstance(err.value, TargetTimeout)
    assert len(started) == 1 and wait_gone(started) == []
