"""Pipelined RSP exchanges (harness/transport/rsp.py: read_many, breakpoint batches) and the
continue that returns at once, against the fake stubs of both QEMU dialects, without QEMU.

The fake answers each packet in order as it arrives, as QEMU's system-mode stub does (it never
waits for our ack), so the client may write a whole batch before it reads the first answer.
"""

from __future__ import annotations

import threading
import time

import pytest

from harness.transport.errors import TargetError, TargetTimeout
from harness.transport.rsp import RspTarget, encode_packet
from tests.support.rsp_stub import RIP, FakeStub

UNREADABLE = 0x9000  # the fake's page that answers E14
GARBLED = 0xA000  # the fake's page whose answers have the right length but are not hex


class PipelineStub(FakeStub):
    def __init__(self, path: str, version: str):
        super().__init__(path, version)
        self.inserted: set[int] = set()
        self.refuse: set[int] = set()  # Z0 at these addresses is answered E01
        self.stop_delay = 0.0  # how long a vCont;c runs before its stop reply
        self.running = False
        self.while_running = bytearray()  # what the client wrote to the "running" guest
        self.interrupt_ignored = False  # the breakpoint's stop wins the race with a ^C

    def _received(self, data: bytes) -> None:
        if self.running:
            self.while_running += data
            if b"\x03" in data and not self.interrupt_ignored:
                # QEMU stops the VM and says SIGINT; the breakpoint's stop never comes
                self.running = False
                self._send_raw(self.conn, encode_packet(b"T02thread:02;"))

    def _stop_later(self) -> None:
        time.sleep(self.stop_delay)
        if self.running:
            self.running = False
            self._send_raw(self.conn, encode_packet(b"T05thread:02;"))

    def _answer(self, pkt: bytes) -> bytes | None:
        if pkt.startswith(b"vCont;c") and self.stop_delay:
            self.running = True
            threading.Thread(target=self._stop_later, daemon=True).start()
            return None
        if pkt.startswith(b"m"):
            addr, n = (int(x, 16) for x in pkt[1:].split(b","))
            if addr <= UNREADABLE < addr + n or UNREADABLE <= addr < UNREADABLE + 0x1000:
                return b"E14"
            if GARBLED <= addr < GARBLED + 0x1000:
                return (b"0a 1b" * n)[:2 * n]  # bytes.fromhex took "0a 1b" as 2 bytes in 5 digits
        if pkt.startswith((b"Z0,", b"z0,")):
            addr = int(pkt[3:].split(b",")[0], 16)
            if pkt[:1] == b"Z" and addr in self.refuse:
                return b"E01"
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


def test_reads_that_touch_in_one_page_share_a_packet_and_each_gets_its_own_answer(target):
    stub, t = target
    before = t.sent["m"]
    ranges = [(0x5018, 8), (0x5010, 8), (0x5014, 0x10), (0x5030, 4), (0x6000, 8), (0x8ffc, 4), (0x8ff8, 4),
              (0x9000, 8), (0x9008, 8)]
    got = t.read_many(ranges)
    # 0x5010-0x5024 in one packet; 0x5030 does not touch it; 0x6000; 0x8ff8-0x9000; the
    # unreadable page's two reads in one packet
    assert t.sent["m"] - before == 5
    assert got == [t.read_partial(a, n) for a, n in ranges]  # as a packet of its own said it
    assert [r.data for r in got[:5]] == [_expected(a, n) for a, n in ranges[:5]]
    assert [r.fault for r in got] == [None] * 7 + [UNREADABLE, UNREADABLE + 8]  # nothing of either read


def test_a_range_the_caller_says_reads_whole_crosses_pages_in_one_packet(target):
    # Target.whole_reads: memory without holes (the kernel's direct map, where a task_struct
    # crossed a page at every stop) is read in packets of the stub's limit, not one a page.
    stub, t = target
    ranges = [(0x2360, 0xd40), (0x3ff8, 0x10)]
    before = t.sent["m"]
    cut = t.read_many(ranges)
    # each range cut at its page (and 7.2's 2048 bytes a packet): 0x2360-0x3000, 0x3000-0x30a0; 2 more
    assert t.sent["m"] - before == (3 if stub.version == "7.2" else 2) + 2
    t.whole_reads = lambda addr, size: 0x2000 <= addr and addr + size <= 0x4000
    before = t.sent["m"]
    got = t.read_many(ranges)
    # the first in one packet where the stub takes a page (11.1; 7.2's limit is 2048 bytes: two);
    # the second is not within the span and is still cut at its page
    assert t.sent["m"] - before == (1 if stub.version == "11.1" else 2) + 2
    assert got == cut and got[0].data == _expected(0x2360, 0xd40) and got[0].fault is None


def test_breakpoint_changes_go_out_with_the_next_packet(target):
    stub, t = target
    before = t.round_trips
    t.set_breakpoints([0x1000, 0x2000, 0x3000, 0x2000])
    assert t.round_trips == before and stub.inserted == set()  # nothing written yet
    assert t.breakpoints == {0x1000, 0x2000, 0x3000}
    t.read_many([(0x4000, 8)])  # the Z packets ahead of the read, in its one write
    assert t.round_trips - before == 1
    assert stub.inserted == {0x1000, 0x2000, 0x3000}
    t.set_breakpoints([0x1000])  # already in: nothing queued
    t.remove_breakpoints([0x1000, 0x3000, 0x4000])
    t.flush()
    assert t.round_trips - before == 2
    assert stub.inserted == {0x2000} and t.breakpoints == {0x2000}
    assert [p[:1] for p in stub.asked[-3:]] == [b"m", b"z", b"z"]


def test_a_refused_lazy_command_is_a_typed_error_naming_it(target):
    stub, t = target
    stub.refuse.add(0x5000)
    t.set_breakpoint(0x5000)
    with pytest.raises(TargetError, match=r"Z0,5000,1.*E01"):
        t.read_registers()
    assert t.read_many([(0x4000, 4)])[0].data == bytes((0, 1, 2, 3))  # the connection goes on


def test_the_continue_carries_the_changes_and_stop_arrived_looks_past_their_oks(target):
    stub, t = target
    stub.stop_delay = 0.4
    t.read_registers()  # an answer to ack: the ack must go out before the continue
    t.set_breakpoints([0x1000, 0x2000])
    t0 = time.monotonic()
    assert t.cont_start(2.0) is None and t.running
    time.sleep(0.1)  # the two OKs are in by now, the stop is not
    assert t.stop_arrived() is False
    while not t.stop_arrived():
        assert time.monotonic() - t0 < 2.0
        time.sleep(0.01)
    stop = t.wait_stop(2.0)
    assert stop.cpu == 1 and not t.running
    assert stub.inserted == {0x1000, 0x2000}
    # Nothing reached the stub while the guest ran: QEMU stops a running VM on any byte,
    # a stray ack included (gdb_read_byte).
    assert bytes(stub.while_running) == b""


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
    t.wait_stop(2.0)
    sent = stub.asked[len(before):]
    assert any(p.startswith(b"P") for p in sent) and not any(p.startswith(b"vCont;s") for p in sent)


def test_the_stop_reads_come_with_the_registers_in_one_round_trip(target):
    stub, t = target
    asked = []
    t.stop_reads = lambda cpu: asked.append(cpu) or [(0x4000, 16), (UNREADABLE, 8)]
    t.cont_start(2.0)
    before = t.round_trips
    stop = t.wait_stop(2.0)
    n = len(stub.asked)
    assert t.round_trips - before == 1  # g and both reads in one batch
    assert asked == [1] and stop.pc == RIP
    gen, got = t.stop_prefetch
    assert gen == t.generation
    assert got[0] == ((0x4000, 16), t.read_partial(0x4000, 16))
    assert got[1][1].fault == UNREADABLE
    assert [p[:1] for p in stub.asked[n - 3:n]] == [b"g", b"m", b"m"]


def test_a_stop_that_races_the_timeout_is_the_stop_not_a_timeout(target):
    stub, t = target
    stub.stop_delay = 0.3
    t.set_breakpoint(RIP)
    t._endbr[RIP] = True  # passed by a RIP write, no step (the fake has none)
    stub.interrupt_ignored = True  # the stop is on its way when the ^C arrives
    t.cont_start(2.0)
    stop = t.wait_stop(0.1)
    assert (stop.pc, stop.signal) == (RIP, 5) and not t.running
    stub.interrupt_ignored = False  # no stop on its way: the ^C's SIGINT, a timeout
    t.remove_breakpoint(RIP)
    t.cont_start(2.0)
    with pytest.raises(TargetTimeout, match="no stop within 0.1s"):
        t.wait_stop(0.1)
    assert not t.running


def test_a_planned_stop_is_read_armed_and_left_in_one_write(target):
    # Target.plan_continue: at the NMI point (endbr64) the registers, the stop's guesses, RIP
    # past the endbr64, the return points and the continue go out together; the caller sees
    # a stop the guest has already left.
    stub, t = target
    t.stop_reads = lambda cpu: [(0x4000, 16), (UNREADABLE, 8)]
    t.set_breakpoint(RIP)
    t._endbr[RIP] = True
    t.flush()
    assert t.plan_continue(RIP, [0x1000, 0x2000, RIP])
    stub.stop_delay = 0.2
    t.cont_start(2.0)
    before = t.round_trips
    stop = t.wait_stop(2.0)
    assert stop.continued and stop.pc == RIP and t.running
    assert t.round_trips - before == 1  # only the registers and the reads were waited for
    assert t.breakpoints == {RIP, 0x1000, 0x2000}
    assert t.read_registers()["rip"] == RIP  # the stop's registers serve it while the guest runs
    gen, got = t.stop_prefetch
    assert gen == t.generation and got[0][1].data == _expected(0x4000, 16) and got[1][1].fault == UNREADABLE
    nxt = t.wait_stop(2.0)  # the plan was for one stop: the next is taken the usual way
    assert not nxt.continued and not t.running and t.generation > gen
    n = stub.asked.index(b"Z0,1000,1") - 4  # past the continue into the stop (g, P, vCont;c)
    assert [p[:2] for p in stub.asked[n:n + 7]] == [b"g", b"m4", b"m9", b"P1", b"Z0", b"Z0", b"vC"]
    assert stub.asked[n + 3].endswith((RIP + 4).to_bytes(8, "little").hex().encode())
    assert stub.inserted == {RIP, 0x1000, 0x2000}
    assert bytes(stub.while_running) == b""  # the Z OKs were read, nothing reached a running guest


def test_a_plan_is_declined_where_the_stop_could_be_another_or_needs_a_step(target):
    stub, t = target
    t.set_breakpoints([RIP, 0x5000])
    t._endbr[RIP] = True
    assert not t.plan_continue(RIP, [0x1000])  # another breakpoint is in
    t.remove_breakpoint(0x5000)
    assert t.plan_continue(RIP, [0x1000])
    t._plan = None
    t._endbr[RIP] = False
    assert not t.plan_continue(RIP, [0x1000])  # leaving it needs a step


def test_a_planned_stop_elsewhere_is_a_typed_error_and_the_guest_runs_on(target):
    stub, t = target
    t.set_breakpoint(0x5000)  # the fake's g says the vCPU is at RIP
    t._endbr[0x5000] = True
    assert t.plan_continue(0x5000, [0x1000])
    stub.stop_delay = 0.2
    t.cont_start(2.0)
    with pytest.raises(TargetError, match="leave the stop at 0x5000.*stopped at 0xffffffff81000000"):
        t.wait_stop(2.0)
    assert t.running
    t.wait_stop(2.0)


class StallingStub(PipelineStub):
    """Stops reading the client once the handshake is over, as a hung QEMU would."""

    stall = False

    def _received(self, data: bytes) -> None:
        super()._received(data)
        while self.stall:
            time.sleep(0.05)


def test_a_stub_that_reads_no_more_is_a_timeout_on_write_not_a_hang(tmp_path):
    # The client writes the descriptor itself, non-blocking (no socket timeout's poll before
    # each send): a full socket buffer waits the target's timeout, then says so.
    stub = StallingStub(str(tmp_path / "gdb.sock"), "11.1")
    t = RspTarget(tmp_path / "gdb.sock", timeout=1.0)
    try:
        stub.stall = True
        t._write(b"$g#67")  # the stub takes this one and stalls in its handler
        time.sleep(0.1)
        with pytest.raises(TargetTimeout, match="takes no more bytes"):
            for _ in range(1000):
                t._write(b"x" * 65536)  # 64 MiB: far more than any socket buffer
    finally:
        stub.stall = False
        t.sock.close()
        stub.close()


def test_an_answer_of_the_right_length_that_is_not_hex_is_a_typed_error_naming_the_read(target):
    stub, t = target
    with pytest.raises(TargetError) as e:
        t.read_many([(0x1000, 16), (GARBLED + 8, 4)])
    assert str(e.value) == f"m{GARBLED + 8:x},4 answered b'0a 1b0a ': not hex"
    assert t.read_many([(0x1000, 4)])[0].data == _expected(0x1000, 4)  # the connection in step
