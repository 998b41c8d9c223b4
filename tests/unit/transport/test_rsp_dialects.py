"""The RSP client against QEMU 7.2's and 11.x's gdb-stub dialects, without QEMU.

A fake stub on a Unix socket answers as each version was observed to (harness/transport/rsp.py's
docstring): 7.2 sends a stop reply on connect, names ``PacketSize=1000`` and answers ``?`` with
``thread:``; 11.x sends nothing on connect, names ``PacketSize=20020`` (an ``m`` of a whole page
is fine) and answers ``?`` with ``core:``.  Neither accepts ``QStartNoAckMode``.
"""

from __future__ import annotations

import pytest

from harness.transport.rsp import (
    MAX_M_PACKET,
    RspTarget,
    max_read,
    parse_qsupported,
    parse_stop_reply,
)
from tests.support.rsp_stub import RIP, FakeStub


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
