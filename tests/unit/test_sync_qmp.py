"""SyncQmp (harness/transport/qemu.py): the sampling loop's NMI monitor, against a fake QMP server."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from harness.transport.errors import GuestDied, GuestError
from harness.transport.qemu import SyncQmp


def _server(path: str, script):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    asked: list[dict] = []

    def serve():
        conn, _ = srv.accept()
        with conn:
            conn.sendall(b'{"QMP": {"version": {}, "capabilities": []}}\r\n')
            f = conn.makefile("rb")
            for line in f:
                cmd = json.loads(line)
                asked.append(cmd)
                for out in script(cmd):
                    conn.sendall(json.dumps(out).encode() + b"\r\n")
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return asked


def test_commands_skip_events_and_return(tmp_path):
    def script(cmd):
        if cmd["execute"] == "inject-nmi":
            # the STOP/RESUME events of gdb stops arrive before the answer
            yield {"event": "STOP", "timestamp": {}}
            yield {"event": "RESUME", "timestamp": {}}
        yield {"return": {}}

    path = str(tmp_path / "qmp.sock")
    asked = _server(path, script)
    q = SyncQmp(path, timeout=2)
    assert q.execute("inject-nmi") == {}
    assert q.execute("inject-nmi") == {}
    q.close()
    assert [c["execute"] for c in asked] == ["qmp_capabilities", "inject-nmi", "inject-nmi"]


def test_an_error_answer_and_a_closed_connection(tmp_path):
    def script(cmd):
        if cmd["execute"] == "inject-nmi":
            yield {"error": {"class": "GenericError", "desc": "no NMI here"}}
            return
        yield {"return": {}}

    path = str(tmp_path / "qmp.sock")
    _server(path, script)
    q = SyncQmp(path, timeout=2)
    with pytest.raises(GuestError, match="no NMI here"):
        q.execute("inject-nmi")
    q.close()
    with pytest.raises(GuestDied, match="cannot connect"):
        SyncQmp(str(tmp_path / "absent.sock"), timeout=1)


def test_commands_sent_without_waiting_are_answered_in_order(tmp_path):
    n = {"inject-nmi": 0}

    def script(cmd):
        if cmd["execute"] == "inject-nmi":
            n["inject-nmi"] += 1
            yield {"event": "STOP", "timestamp": {}}
            if n["inject-nmi"] == 3:
                yield {"error": {"class": "GenericError", "desc": "third NMI refused"}}
                return
        yield {"return": {}}

    path = str(tmp_path / "qmp.sock")
    asked = _server(path, script)
    q = SyncQmp(path, timeout=2)
    q.send("inject-nmi")
    q.send("inject-nmi")
    assert list(q.unanswered) == ["inject-nmi", "inject-nmi"]
    q.drain(block=True)
    assert not q.unanswered
    q.send("inject-nmi")  # refused: said by the next read of its answer, naming it
    with pytest.raises(GuestError, match="inject-nmi: third NMI refused"):
        q.execute("query-status")
    assert q.execute("query-status") == {}  # the connection stays in step
    q.close()
    assert [c["execute"] for c in asked] == ["qmp_capabilities", *["inject-nmi"] * 3, "query-status"]
