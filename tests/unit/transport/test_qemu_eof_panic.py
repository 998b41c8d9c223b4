"""A guest that panics: QEMU exits (panic=-1, -no-reboot), and the control socket's EOF may be
seen before the console's thread has read the panic.  The wait still says GuestPanic."""

from __future__ import annotations

import socket
import threading

import pexpect
import pytest

from harness.transport.errors import GuestDied, GuestPanic
from harness.transport.qemu import Console, ControlChannel


def _closed_control(tmp_path, cond, console):
    """A control socket whose peer (QEMU) accepts and hangs up at once."""
    path = tmp_path / "ctl.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def accept_and_close():
        conn, _ = server.accept()
        conn.close()
        server.close()

    threading.Thread(target=accept_and_close, daemon=True).start()
    return ControlChannel(path, cond, console)


def _console(tmp_path, cond, script: str) -> Console:
    child = pexpect.spawn("sh", ["-c", script], echo=False)
    return Console(child, tmp_path / "console.log", cond)


def test_panic_printed_after_the_control_eof_is_a_guest_panic(tmp_path):
    cond = threading.Condition()
    # the console's last lines come 0.3 s after the control socket is gone
    console = _console(tmp_path, cond, "sleep 0.3; printf '<0>Kernel panic - not syncing: sysrq triggered crash\\n'")
    control = _closed_control(tmp_path, cond, console)
    with pytest.raises(GuestPanic) as err:
        control.wait(r"done 1 (\d+)", 30, "shell 'echo c > /proc/sysrq-trigger'")
    assert "sysrq triggered crash" in str(err.value)
    control.close()


def test_a_plain_exit_is_still_guest_died(tmp_path):
    cond = threading.Condition()
    console = _console(tmp_path, cond, "sleep 0.3; printf '<6>reboot: Power down\\n'")
    control = _closed_control(tmp_path, cond, console)
    with pytest.raises(GuestDied):
        control.wait(r"done 1 (\d+)", 30, "shell 'true'")
    control.close()
