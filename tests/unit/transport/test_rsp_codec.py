"""The RSP packet codec and target-description parser, without QEMU."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harness.transport.rsp import PacketReader, decode_body, encode_packet, escape, parse_target_xml


def test_encode_known_packet():
    # GDB manual, "Overview": $packet-data#checksum, checksum = sum of data bytes mod 256
    assert encode_packet(b"g") == b"$g#67"
    assert encode_packet(b"m0,4") == b"$m0,4#fd"


def test_escapes_and_run_length():
    assert escape(b"a$b#c}d*") == b"a}\x04b}\x03c}]d}\x0a"
    assert decode_body(b"a}\x04b}\x03c}]d}\x0a") == b"a$b#c}d*"
    # "0* " is '0' repeated 32 - 29 = 3 more times
    assert decode_body(b"0* ") == b"0000"
    assert decode_body(b"ab") == b"ab"


@given(st.binary(max_size=300))
def test_round_trip_through_the_reader(data):
    r = PacketReader()
    r.feed(b"+" + encode_packet(data) + b"-")
    assert r.next() == ("packet", data)  # the ack passed over, counted
    assert r.acks == 1
    assert r.next() == ("nak", b"")
    assert r.next() is None


def test_reader_waits_for_the_checksum_and_flags_a_bad_one():
    r = PacketReader()
    pkt = encode_packet(b"OK")
    r.feed(pkt[:-1])
    assert r.next() is None
    r.feed(pkt[-1:] + b"$OK#00")
    assert r.next() == ("packet", b"OK")
    assert r.next() == ("bad", b"OK")


def test_target_xml_with_includes_and_regnums():
    files = {
        "target.xml": '<?xml version="1.0"?><!DOCTYPE target SYSTEM "gdb-target.dtd">'
                      '<target><xi:include href="core.xml"/><xi:include href="sys.xml"/></target>',
        "core.xml": '<feature name="core"><reg name="rax" bitsize="64"/><reg name="rbx" bitsize="64"/>'
                    '<reg name="eflags" bitsize="32"/></feature>',
        "sys.xml": '<feature name="sys"><reg name="cr3" bitsize="64" regnum="40"/>'
                   '<reg name="cr4" bitsize="64"/></feature>',
    }
    regs = parse_target_xml(files.__getitem__)
    assert [(r.name, r.regnum, r.offset) for r in regs] == [
        ("rax", 0, 0), ("rbx", 1, 8), ("eflags", 2, 16), ("cr3", 40, 20), ("cr4", 41, 28)]


def test_target_memory_caches_pages_per_stop_and_reports_the_fault():
    from harness.memory import MemoryFault
    from harness.transport.target import PAGE, ReadResult, TargetMemory

    class FakeTarget:
        generation = 0

        def __init__(self):
            self.reads = 0

        def read_partial(self, addr, size):
            self.reads += 1
            if addr >= 0x3000:
                return ReadResult(b"", addr)
            if addr == 0x2000:  # only 100 bytes of this page are readable
                return ReadResult(bytes(range(100)), addr + 100)
            return ReadResult(bytes([addr >> 12]) * PAGE)

    t = FakeTarget()
    m = TargetMemory(t)
    assert m.read(0x0FFC, 8) == b"\x00" * 4 + b"\x01" * 4  # crosses a page boundary
    assert m.read(0x1000, 4) == b"\x01" * 4 and t.reads == 2  # served from the cache
    assert m.read(0x2000 + 90, 10) == bytes(range(90, 100))
    try:
        m.read(0x2000 + 96, 8)
    except MemoryFault as exc:
        assert exc.addr == 0x2000 + 100
    else:
        raise AssertionError("read past the readable prefix did not fault")
    t.generation += 1  # the guest ran: pages are read again
    m.read(0x1000, 4)
    assert t.reads == 4


@given(st.binary(max_size=3000) | st.binary(max_size=3000).map(bytes.hex).map(str.encode)
       | st.text(st.characters(max_codepoint=127), max_size=3000).map(str.encode))
def test_checksum_is_the_byte_sum_at_every_length(data):
    # the long bodies' adler32 pieces against the definition (GDB manual: sum mod 256): any
    # bytes (256-byte pieces), hex and other ASCII (512-byte pieces), one byte past ASCII
    from harness.transport.rsp import checksum
    assert checksum(data) == sum(data) % 256
    assert checksum(data + b"\x80") == (sum(data) + 0x80) % 256
    assert checksum(b"\xff" * 4099) == (255 * 4099) % 256
    assert checksum(b"\x7f" * 4099) == (127 * 4099) % 256  # the most 512 ASCII bytes add up to


def test_reader_takes_many_packets_fed_a_byte_at_a_time():
    # the taken bytes stay behind the reader's position until the next feed
    pkts = [encode_packet(bytes([65 + i]) * (i * 300)) for i in range(6)]
    stream = b"".join(b"+" + p for p in pkts)
    r = PacketReader()
    got = []
    for b in stream:
        r.feed(bytes([b]))
        while (item := r.next()) is not None:
            got.append(item)
    assert [k for k, _ in got] == ["packet"] * 6 and r.acks == 6
    assert [p for k, p in got if k == "packet"] == [bytes([65 + i]) * (i * 300) for i in range(6)]
    assert len(r.buf) - r.pos == 0
