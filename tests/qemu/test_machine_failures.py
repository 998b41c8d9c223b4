"""The QEMU machine under failure: each gives its typed error within its bound, nothing is left."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from harness.images.initramfs import build_initramfs
from harness.images.kernel import get_kernel
from harness.transport.errors import GuestDied, GuestPanic, GuestTimeout
from harness.transport.qemu import WORKDIR_PREFIX, Machine, MachineConfig, sweep_orphan_workdirs
from tests.support.procs import gone

pytestmark = pytest.mark.qemu


@pytest.fixture(scope="module")
def images():
    return get_kernel("default"), build_initramfs([])


def listening_tcp_inodes() -> set[str]:
    inodes = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(name).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A":  # TCP_LISTEN
                inodes.add(cols[9])
    return inodes


def socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def test_boots_opens_no_tcp_port_and_closes(images):
    kernel, initrd = images
    m = Machine(MachineConfig(kernel.vmlinux, initrd)).start()
    try:
        assert m.release and m.cpus == 1
        assert not socket_inodes(m.pid) & listening_tcp_inodes(), "QEMU listens on a TCP port"
        assert m.gdb_socket.exists() and m.qmp_socket.exists()
    finally:
        pid = m.pid
        m.close()
    assert gone(pid) and not m.workdir.exists()


def test_guest_panic_is_typed_with_console(images):
    kernel, initrd = images
    with Machine(MachineConfig(kernel.vmlinux, initrd)) as m:
        start = time.monotonic()
        with pytest.raises(GuestPanic) as err:
            m.shell("echo c > /proc/sysrq-trigger", timeout=60)
        assert time.monotonic() - start < 60
        assert any("sysrq" in ln.lower() or "panic" in ln.lower() for ln in err.value.console)
        pid = m.pid
    assert gone(pid)


def test_guest_that_never_becomes_ready(images):
    kernel, initrd = images
    # /bin/sh as init: a guest that boots but never speaks the protocol.  8 s: the bound is
    # what is tested, not its size (the default guest is ready in about 3 s on TCG; it was 20 s,
    # the longest wait of the suite).
    cfg = MachineConfig(kernel.vmlinux, initrd, append="rdinit=/bin/sh", boot_timeout=8)
    m = Machine(cfg)
    start = time.monotonic()
    with pytest.raises(GuestTimeout) as err:
        m.start()
    m.close()
    assert 8 <= time.monotonic() - start < 33
    assert "readiness" in str(err.value)
    assert gone(m.pid)


def test_qemu_killed_under_the_harness(images):
    kernel, initrd = images
    with Machine(MachineConfig(kernel.vmlinux, initrd)) as m:
        os.kill(m.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(GuestDied):
            m.shell("true", timeout=30)
        assert time.monotonic() - start < 10
        with pytest.raises(GuestDied):
            m.inject_nmi()


def test_no_qemu_outlives_a_killed_harness(images, tmp_path):
    kernel, initrd = images
    script = tmp_path / "victim.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from harness.transport.qemu import WORKDIR_PREFIX, Machine, MachineConfig, sweep_orphan_workdirs
        m = Machine(MachineConfig({str(kernel.vmlinux)!r}, {str(initrd)!r})).start()
        print(m.pid, flush=True)
        time.sleep(600)
    """))
    # The victim's private directory goes under a temporary directory of this test's own: every
    # Machine sweeps orphans in its $TMPDIR, and a guest started meanwhile by another test
    # (pytest-xdist's other worker) would sweep this one before the test could.
    tmp = Path(tempfile.mkdtemp(prefix="uh-victim-"))  # short: QEMU's socket paths go under it
    victim = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp)})
    try:
        qemu_pid = int(victim.stdout.readline())
        assert not gone(qemu_pid)
        victim.kill()
        victim.wait(timeout=10)
        deadline = time.monotonic() + 10
        while not gone(qemu_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(qemu_pid), "QEMU survived the harness process that started it"
        # Its private directory (sockets, console log) stayed behind; the next Machine sweeps it.
        orphan = next(d for d in tmp.glob(WORKDIR_PREFIX + "*")
                      if (d / "owner").exists() and (d / "owner").read_text().strip() == str(victim.pid))
        assert orphan in sweep_orphan_workdirs(tmp) and not orphan.exists()
    finally:
        if victim.poll() is None:
            victim.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_kernel_without_kallsyms_is_one_line(images):
    """What a user's kernel built without CONFIG_KALLSYMS gives the harness, on a real guest: the
    dump of a file that is not there, or is empty, is a one-line KernelInputError (exit 2), not a
    failed gzip in the guest; the real /proc/kallsyms comes whole."""
    from harness.errors import EXIT_USAGE
    from harness.images.kernel import KernelInputError
    from harness.session import dump_kallsyms

    kernel, initrd = images
    with Machine(MachineConfig(kernel.vmlinux, initrd)) as m:
        with pytest.raises(KernelInputError) as missing:
            dump_kallsyms(m, "/proc/no-kallsyms")
        assert str(missing.value) == ("the guest kernel has no /proc/no-kallsyms (built without CONFIG_KALLSYMS?): "
                                      "the harness finds the kernel's stop points and symbols through it")
        assert missing.value.exit_code == EXIT_USAGE
        with pytest.raises(KernelInputError, match=r"^the guest kernel's /dev/null is empty: "):
            dump_kallsyms(m, "/dev/null")
        text = dump_kallsyms(m)
        assert " T do_syscall_64\n" in text and "\n" not in str(missing.value)
