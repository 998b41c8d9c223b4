"""The RSP client against QEMU 7.2's and 11.x's gdb-stub dialects, without QEMU.

A fake stub on a Unix socket answers as each version was observed to (harness/transport/rsp.py's
docstring): 7.2 sends a stop reply on connect, names ``PacketSize=1000`` and answers ``?`` with
``thread:``; 11.x sends nothing on connect, names ``PacketSize=20020`` (an ``m`` of a whole page
is fine) and answers ``?`` with ``core:``.  Neither accepts ``QStartNoAckMode``.
"""

from __future__ import annotations

import socket
import threading

import pytest

from harness.transport.rsp import (
    MAX_M_PACKET,
    PacketReader,
    RspTarget,
    encode_packet,
    max_read,
    parse_qsupported,
    parse_stop_reply,
)
from harness.transport.target import Target

REGS = list(Target.CORE_REGS)
TARGET_XML = ('<?xml version="1.0"?><target><architecture>i386:x86-64</architecture>'
              + "".join(f'<reg name="{n}" bitsize="64"/>' for n in REGS) + "</target>")
RIP = 0xFFFFFFFF81000000


class FakeStub:
    """One connection, ack mode, the packets RspTarget sends; records what it was asked."""

    def __init__(self, path: str, version: str):
        self.version = version
        self.packet_size = 0x1000 if version == "7.2" else 0x20020
        self.asked: list[bytes] = []
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _reply(self, conn, body: bytes) -> None:
        try:
            conn.sendall(encode_packet(body))
        except OSError:
            pass  # the client left (it does not wait for the answer to D)

    @staticmethod
    def _send_raw(conn, data: bytes) -> None:
        try:
            conn.sendall(data)
        except OSError:
            pass

    def _answer(self, pkt: bytes) -> bytes | None:
        if pkt.startswith(b"qSupported"):
            return b"PacketSize=%x;qXfer:features:read+;vContSupported+;multiprocess+" % self.packet_size
        if pkt == b"QStartNoAckMode":
            return b""
        if pkt.startswith(b"qXfer:features:read:target.xml:"):
            off, _ = (int(x, 16) for x in pkt.rsplit(b":", 1)[1].split(b","))
            return b"l" + TARGET_XML[off:].encode()
        if pkt == b"qfThreadInfo":
            return b"m01,02"
        if pkt == b"qsThreadInfo":
            return b"l"
        if pkt == b"?":
            return b"T05thread:01;" if self.version == "7.2" else b"T05core:01;"
        if pkt == b"g":
            return b"".join(
                (RIP if n == "rip" else 0).to_bytes(8, "little").hex().encode() for n in REGS)
        if pkt.startswith(b"m"):
            addr, n = (int(x, 16) for x in pkt[1:].split(b","))
            if n > self.packet_size // 2:
                return b"E22"
            return bytes((addr + i) & 0xFF for i in range(n)).hex().encode()
        if pkt.startswith(b"vCont;c"):
            return b"T05thread:02;"
        if pkt == b"D":
            return b"OK"
        return b""

    def _received(self, data: bytes) -> None:
        """Every chunk read from the client, before it is parsed (a subclass may watch)."""

    def _serve(self) -> None:
        conn, _ = self.srv.accept()
        self.conn = conn
        with conn:
            if self.version == "7.2":
                self._reply(conn, b"T02thread:01;")  # the unsolicited stop reply on connect
            reader = PacketReader()
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                self._received(data)
                reader.feed(data)
                while (item := reader.next()) is not None:
                    kind, pkt = item
                    if kind != "packet":
                        continue
                    self.asked.append(pkt)
                    self._send_raw(conn, b"+")
                    answer = self._answer(pkt)
                    if answer is not None:
                        self._reply(conn, answer)

    def close(self) -> None:
        self.srv.close()


@pytest.fixture(params=["7.2", "11.1"])
def stub(request, tmp_path):
    s = FakeStub(str(tmp_path / "gdb.sock"), request.param)
    yield s
    s.close()


def test_handshake_and_reads_in_both_dialects(stub, tmp_path):
    t = RspTarget(tmp_path / "gdb.sock", timeout=2.0)
    try:
        assert t.ack_mode  # QStartNoAckMode is answered empty by both
        assert t.cpus() == [0, 1]
        assert t.read_registers()["rip"] == RIP
        assert t.max_read == (2048 if stub.version == "7.2" else 4096)
        before = len(stub.asked)
        data = t.read_memory(0x1000, 4096)
        assert data == bytes(i & 0xFF for i in range(0x1000, 0x2000))
        reads = [p for p in stub.asked[before:] if p.startswith(b"m")]
        assert len(reads) == (2 if stub.version == "7.2" else 1)
        assert not any(p == b"E22" for p in reads)
        stop = t.cont(2.0)  # vCont;c answered with thread:02
        assert (stop.cpu, stop.pc) == (1, RIP)
    finally:
        t.close()


def test_qsupported_and_read_size():
    f = parse_qsupported(b"PacketSize=20020;qXfer:features:read+;vContSupported+;multiprocess-")
    assert f == {"PacketSize": "20020", "qXfer:features:read": True, "vContSupported": True,
                 "multiprocess": False}
    assert max_read(f) == 4096
    assert max_read(parse_qsupported(b"PacketSize=1000;qXfer:features:read+")) == 2048
    assert max_read({}) == MAX_M_PACKET
    assert max_read({"PacketSize": "zz"}) == MAX_M_PACKET


@pytest.mark.parametrize("reply, expected", [
    (b"T05thread:01;", (5, "01")),
    (b"T02thread:02;", (2, "02")),
    (b"T05core:02;", (5, "02")),  # QEMU 11.x's answer to '?'
    (b"T05core:01;thread:02;", (5, "02")),  # thread: wins over core:
    (b"T05thread:01;05:0000000000000000;watch:ffff8000;", (5, "01")),
    (b"S05", (5, None)),
    (b"OK", None),
    (b"W00", None),
])
def test_stop_replies(reply, expected):
    assert parse_stop_reply(reply) == expected
