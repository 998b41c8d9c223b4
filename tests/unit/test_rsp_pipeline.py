"""Pipelined RSP exchanges (harness/transport/rsp.py: read_many, breakpoint batches) and the
continue that returns at once, against the fake stubs of both QEMU dialects, without QEMU.

The fake answers each packet in order as it arrives, as QEMU's system-mode stub does (it never
waits for our ack), so the client may write a whole batch before it reads the first answer.
"""

from __future__ import annotations

import pytest
from test_rsp_dialects import RIP, FakeStub

from harness.transport.rsp import RspTarget

UNREADABLE = 0x9000  # the fake's page that answers E14


class PipelineStub(FakeStub):
    def __init__(self, path: str, version: str):
        super().__init__(path, version)
        self.inserted: set[int] = set()

    def _answer(self, pkt: bytes) -> bytes | None:
        if pkt.startswith(b"m"):
            addr, n = (int(x, 16) for x in pkt[1:].split(b","))
            if addr <= UNREADABLE < addr + n or UNREADABLE <= addr < UNREADABLE + 0x1000:
                return b"E14"
        if pkt.startswith((b"Z0,", b"z0,")):
            addr = int(pkt[3:].split(b",")[0], 16)
            (self.inserted.add if pkt[:1] == b"Z" else self.inserted.discard)(addr)
            return b"OK"
        if pkt.startswith(b"P"):
            return b"OK"
        return super()._answer(pkt)


@pytest.fixture(params=["7.2", "11.1"])
def target(request, tmp_path):
    stub = PipelineStub(str(tmp_path / "gdb.sock"), request.param)
    t = RspTarget(tmp_path / "gdb.sock", timeout=2.0)
    yield stub, t
    t.close()
    stub.close()


def _expected(addr: int, n: int) -> bytes:
    return bytes((addr + i) & 0xFF for i in range(n))


def test_read_many_is_one_round_trip_with_every_answer(target):
    stub, t = target
    before = t.round_trips
    got = t.read_many([(0x1ff0, 0x30), (0x4000, 0x2000), (0x8ff8, 0x10), (0x5005, 3)])
    assert t.round_trips - before == 1
    assert got[0].data == _expected(0x1ff0, 0x30) and got[0].fault is None  # split at the page
    assert got[1].data == _expected(0x4000, 0x2000) and got[1].fault is None
    assert got[2].data == _expected(0x8ff8, 8) and got[2].fault == UNREADABLE  # as read_partial says it
    assert got[3].data == _expected(0x5005, 3)
    assert [r.fault for r in got] == [None, None, UNREADABLE, None]
    assert t.read_partial(0x8ff8, 0x10) == got[2]
    pieces = 2 + (4 if stub.version == "7.2" else 2) + 2 + 1
    assert t.sent["m"] >= pieces


def test_breakpoint_batches(target):
    stub, t = target
    before = t.round_trips
    t.set_breakpoints([0x1000, 0x2000, 0x3000, 0x2000])
    assert t.round_trips - before == 1
    assert stub.inserted == {0x1000, 0x2000, 0x3000} and t.breakpoints == stub.inserted
    t.set_breakpoints([0x1000])  # already in: nothing sent
    assert t.round_trips - before == 1
    t.remove_breakpoints([0x1000, 0x3000, 0x4000])
    assert t.round_trips - before == 2
    assert stub.inserted == {0x2000} and t.breakpoints == {0x2000}


def test_cont_start_then_wait(target):
    stub, t = target
    assert t.cont_start(2.0) is None and t.running
    stop = t.wait_stop(2.0)
    assert not t.running and (stop.cpu, stop.pc) == (1, RIP)


def test_a_breakpoint_on_a_nop4_is_passed_by_moving_rip(target):
    stub, t = target
    # the fake's memory at RIP reads (RIP + i) & 0xff: 00 01 02 03, not endbr64: a step
    assert not t._at_endbr(RIP)
    t._endbr[RIP] = True  # as read from a kernel whose endbr64 is sealed into 0f 1f 40 d6
    t.set_breakpoint(RIP)
    before = list(stub.asked)
    t.cont_start(2.0)
    sent = stub.asked[len(before):]
    assert any(p.startswith(b"P") for p in sent) and not any(p.startswith(b"vCont;s") for p in sent)
    t.wait_stop(2.0)
