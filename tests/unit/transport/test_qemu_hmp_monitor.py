"""HmpMonitor (harness/transport/qemu.py): the sampling loop's NMI monitor, against a fake human
monitor that answers with the bytes QEMU 7.2.22 and 11.1.3 sent (recorded from both, identical)."""

from __future__ import annotations

import socket
import threading

import pytest

from harness.transport.errors import GuestDied, GuestError
from harness.transport.qemu import HmpMonitor

BANNER = b"QEMU 11.1.3 monitor - type 'help' for more information\r\n(qemu) "


def _echo(line: bytes) -> bytes:
    """readline's redraw of a typed line, as QEMU sends it back character by character."""
    out = b""
    for i in range(1, len(line) + 1):
        out += line[:i] + b"\x1b[K" + (b"\x1b[D" * i if i < len(line) else b"")
    return out


def test_the_echo_is_what_qemu_sent():
    assert _echo(b"nmi") == b"n\x1b[K\x1b[Dnm\x1b[K\x1b[D\x1b[Dnmi\x1b[K"


def _server(path: str, answers: dict[bytes, bytes], split: bool = False):
    """Answer each line with its echo, its output and the prompt (``split``: a byte at a time)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    asked: list[bytes] = []

    def serve():
        conn, _ = srv.accept()
        with conn:
            conn.sendall(BANNER)
            for line in conn.makefile("rb"):
                line = line.rstrip(b"\n")
                asked.append(line)
                if line == b"quit":
                    break
                out = _echo(line) + b"\r\n" + answers.get(line, b"unknown command: '%s'\r\n" % line) + b"(qemu) "
                for k in range(len(out)) if split else [None]:
                    conn.sendall(out if k is None else out[k:k + 1])
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return asked


def test_nmis_sent_without_waiting_are_answered_in_order(tmp_path):
    path = str(tmp_path / "nmi.sock")
    asked = _server(path, {b"nmi": b""}, split=True)
    m = HmpMonitor(path, timeout=2)
    m.send("nmi")
    m.send("nmi")
    assert list(m.unanswered) == ["nmi", "nmi"]
    m.drain(block=True)
    assert not m.unanswered
    assert m.execute("nmi") == ""
    assert m.execute("info version") == "unknown command: 'info version'"  # a command's output
    m.close()
    assert asked == [b"nmi"] * 3 + [b"info version"]


def test_a_refused_nmi_is_a_typed_error_and_the_connection_stays_in_step(tmp_path):
    path = str(tmp_path / "nmi.sock")
    _server(path, {b"nmi": b"Error: this machine has no NMI\r\n", b"help nmi": b"nmi  -- inject an NMI\r\n"})
    m = HmpMonitor(path, timeout=2)
    m.send("nmi")
    with pytest.raises(GuestError, match="HMP nmi: Error: this machine has no NMI"):
        m.drain(block=True)
    assert m.execute("help nmi") == "nmi  -- inject an NMI"
    m.close()


def test_a_closed_or_absent_monitor_is_guest_died(tmp_path):
    path = str(tmp_path / "nmi.sock")
    _server(path, {b"nmi": b""})
    m = HmpMonitor(path, timeout=2)
    m.send("quit")  # the fake closes the connection without an answer
    with pytest.raises(GuestDied, match="closed the connection"):
        m.drain(block=True)
    m.close()
    with pytest.raises(GuestDied, match="cannot connect"):
        HmpMonitor(str(tmp_path / "absent.sock"), timeout=1)
