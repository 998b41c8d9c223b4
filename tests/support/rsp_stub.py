"""A fake QEMU gdb stub on a Unix socket that answers as QEMU 7.2's and 11.x's stubs were
observed to (harness/transport/rsp.py's docstring); the RSP tests of tests/unit/transport/ talk
to it, and subclass it for pipelining."""

from __future__ import annotations

import socket
import threading

from harness.transport.rsp import PacketReader, encode_packet
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
