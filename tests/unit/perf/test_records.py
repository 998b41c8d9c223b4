"""The perf record parser (harness.perfparse.records) on records crafted with struct, on random bytes,
and on a real capture from the guest (tests/data/, see tests/unit/perf/test_oracle_fixture.py)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.perfparse.records import (
    PERF_CONTEXT_USER_DEFERRED,
    Attr,
    CallchainDeferred,
    Lost,
    Other,
    PerfFormatError,
    Sample,
    TaskEvent,
    parse_capture,
    parse_record,
    parse_records,
    split_callchain,
)
from harness.regs import USER_CS_32
from tests.support import perf_build as pb

REGS = {"ip": 0x401234, "sp": 0x7FFFFFFFE000, "bp": 0x7FFFFFFFE040, "cs": 0x33, "ss": 0x2B, "ax": 1, "r15": 15}
ATTR = Attr.parse(pb.attr())


def test_attr_fields_and_flag_bits():
    a = Attr.parse(pb.attr(flags=("sample_id_all", "defer_callchain", "defer_output", "inherit")))
    assert a.flag("defer_callchain") and a.flag("defer_output") and a.flag("inherit") and a.flag("sample_id_all")
    assert not a.flag("freq") and not a.flag("exclude_callchain_kernel")
    assert a.flags == (1 << 38) | (1 << 39) | (1 << 1) | (1 << 18)
    assert a.sample_type == pb.SAMPLE_TYPE and a.sample_stack_user == 16384 and a.size == 128
    assert a.regs_user == pb.REG_ORDER  # by bit number: ax..ss, then r8..r15


def test_attr_errors_name_the_field():
    with pytest.raises(PerfFormatError, match="attr at byte 0x10") as e:
        Attr.parse(b"\0" * 40, offset=16)
    assert e.value.field == "attr"
    with pytest.raises(PerfFormatError) as e:
        Attr.parse(pb.attr()[:120])  # attr.size says 128
    assert e.value.field == "attr.size" and e.value.offset == 4
    with pytest.raises(PerfFormatError, match="0x400") as e:
        Attr.parse(pb.attr(sample_type=pb.SAMPLE_TYPE | 1 << 10))  # PERF_SAMPLE_RAW
    assert e.value.field == "attr.sample_type"


def test_user_mode_sample_every_field():
    stack = bytes(range(48))
    raw = pb.sample(0x401234, 10, 11, 5000, 0, [pb.CONTEXT_USER, 0x401234, 0x401300, 0x401400], REGS, stack, 64)
    rec, end = parse_record(raw, 0, ATTR)
    assert end == len(raw)
    assert isinstance(rec, Sample) and rec.offset == 0
    assert (rec.ip, rec.pid, rec.tid, rec.time, rec.cpu) == (0x401234, 10, 11, 5000, 0)
    assert rec.user_mode and rec.cpumode == 2
    assert rec.user == (0x401234, 0x401300, 0x401400) and rec.kernel == () and rec.cookie is None
    assert rec.callchain[0] == pb.CONTEXT_USER
    assert rec.regs.ip == 0x401234 and rec.regs.sp == 0x7FFFFFFFE000 and rec.regs.bp == 0x7FFFFFFFE040
    assert rec.regs.ax == 1 and rec.regs.r15 == 15 and rec.regs.cs == 0x33
    assert rec.stack_size == 64 and rec.stack == stack  # dyn_size bytes of the 64


def test_kernel_part_user_part_and_the_deferred_cookie():
    chain = [pb.CONTEXT_KERNEL, 0xFFFFFFFF81000000, pb.CONTEXT_USER, 0x401000]
    rec, _ = parse_record(pb.sample(0xFFFFFFFF81000000, 1, 1, 1, 0, chain, REGS, misc=1), 0, ATTR)
    assert rec.kernel == (0xFFFFFFFF81000000,) and rec.user == (0x401000,) and not rec.user_mode
    rec, _ = parse_record(pb.sample(0x401000, 1, 1, 1, 0, [pb.CONTEXT_USER_DEFERRED, 0x300000001], REGS), 0, ATTR)
    assert rec.deferred and rec.cookie == 0x300000001 and rec.user is None
    assert split_callchain((pb.CONTEXT_USER,), 0) == ((), (), None)  # an empty user part is not "none"


def test_regs_abi_none_and_32_and_an_empty_stack():
    rec, _ = parse_record(pb.sample(0x401000, 1, 1, 1, 0, [pb.CONTEXT_USER, 1], None, b"", 0), 0, ATTR)
    assert rec.regs is None and rec.regs_abi == 0 and rec.stack == b"" and rec.stack_size == 0
    rec, _ = parse_record(pb.sample(0x8049000, 1, 1, 1, 0, [pb.CONTEXT_USER, 0x8049000],
                                    {**REGS, "cs": USER_CS_32}, abi=1), 0, ATTR)
    assert rec.regs_abi == 1 and rec.regs.compat


def test_deferred_lost_task_and_other_records():
    raw = (pb.deferred(0x500000001, [0x401000, 0x401100], 10, 11, 7000, 0) + pb.lost(3, 7100)
           + pb.task("fork", 10, 12, 7200) + pb.task("exit", 10, 11, 7300)
           + pb.header(5, 0, struct.pack("<QQQ", 1, 2, 3) + pb.sample_id(10, 11, 7400, 0)))
    recs = parse_records(raw, ATTR, base=100)
    d, lo, fork, ex, other = recs
    assert isinstance(d, CallchainDeferred) and d.cookie == 0x500000001 and d.ips == (0x401000, 0x401100)
    assert (d.pid, d.tid, d.time, d.offset) == (10, 11, 7000, 100)
    assert isinstance(lo, Lost) and lo.lost == 3 and lo.id == 7 and lo.time == 7100
    assert isinstance(fork, TaskEvent) and fork.kind == "fork" and fork.tid == 12 and fork.time == 7200
    assert isinstance(ex, TaskEvent) and ex.kind == "exit" and ex.tid == 11
    assert isinstance(other, Other) and other.type == 5 and other.size == 8 + 24 + 24 and other.time == 7400


@pytest.mark.parametrize("mutate, field", [
    (lambda r: r[:6], "header"),
    (lambda r: struct.pack("<IHH", 2, 0, 12) + r[8:], "lost.id"),  # a LOST of 12 bytes: no room for its id
    (lambda r: r[:4] + struct.pack("<HH", 2, 4) + r[8:], "header.size"),  # smaller than a header
    (lambda r: r[:-8], "header.size"),  # runs past the end
])
def test_header_errors(mutate, field):
    raw = pb.sample(0x401000, 1, 1, 1, 0, [pb.CONTEXT_USER, 0x401000], REGS, b"\1" * 16)
    with pytest.raises(PerfFormatError) as e:
        parse_records(mutate(raw), ATTR)
    assert e.value.field == field


def _body_errors():
    s = pb.sample
    yield ("callchain nr past the record", s(1, 1, 1, 1, 0, [pb.CONTEXT_USER, 1], REGS), (40, 1 << 40),
           "sample.callchain.ips")
    yield ("dyn_size > size", s(1, 1, 1, 1, 0, [pb.CONTEXT_USER, 1], REGS, b"\1" * 8, 16), (-8, 17),
           "sample.stack_user.dyn_size")
    yield "regs abi 7", s(1, 1, 1, 1, 0, [pb.CONTEXT_USER, 1], REGS), (64, 7), "sample.regs_user.abi"
    yield "unknown marker", s(1, 1, 1, 1, 0, [pb.CONTEXT_USER, 1], REGS), (48, -100 & pb.U64), "sample.callchain[0]"
    yield "entry before a marker", s(1, 1, 1, 1, 0, [0x401000, 1], REGS), None, "sample.callchain[0]"
    yield "deferred not last", s(1, 1, 1, 1, 0, [PERF_CONTEXT_USER_DEFERRED, 5, 6], REGS), None, "sample.callchain[0]"


@pytest.mark.parametrize("what, raw, patch, field", list(_body_errors()), ids=[w for w, *_ in _body_errors()])
def test_body_errors_name_offset_and_field(what, raw, patch, field):
    if patch is not None:
        off, value = patch
        off %= len(raw)
        raw = raw[:off] + struct.pack("<Q", value) + raw[off + 8:]
    with pytest.raises(PerfFormatError) as e:
        parse_records(raw, ATTR, base=0x1000)
    assert e.value.field == field, str(e.value)
    assert 0x1000 <= e.value.offset < 0x1000 + len(raw)


def test_unaligned_records_from_a_32_bit_stack_dump():
    """The kernel cuts a stack dump at TASK_SIZE - sp: 20 bytes here, a record size that is no
    multiple of 8, and the next record starts unaligned."""
    regs = {**REGS, "cs": USER_CS_32, "sp": 0xFFFFDFEC}
    raw = pb.sample(0x8049000, 1, 1, 1, 0, [pb.CONTEXT_USER, 0x8049000], regs, b"\2" * 20, abi=1)
    assert len(raw) % 8 == 4
    s, d = parse_records(raw + pb.deferred(5, [0x8049000], 1, 1, 2), ATTR)
    assert s.stack == b"\2" * 20 and s.stack_size == 20 and d.cookie == 5 and d.offset == len(raw)


def test_left_over_bytes_are_an_error():
    raw = pb.deferred(5, [1], 1, 1, 1)
    raw = struct.pack("<IHH", 22, 2, len(raw) + 8) + raw[8:] + b"\0" * 8
    with pytest.raises(PerfFormatError, match="left over") as e:
        parse_records(raw, ATTR)
    assert e.value.field == "callchain_deferred.size"


def test_capture_sections_and_rings_merged_by_time():
    r0 = pb.sample(0x401000, 1, 1, 100, 0, [pb.CONTEXT_USER, 0x401000], REGS) + pb.deferred(9, [0x401000], 1, 1, 300)
    r1 = pb.sample(0x401000, 1, 2, 200, 1, [pb.CONTEXT_USER, 0x401000], REGS) + pb.task("exit", 1, 2, 400)
    data = pb.capture({0: r0, 1: r1}, maps="00400000-00401000 r-xp 00000000 00:03 12 /x\n",
                      vdso=(0x7FFFF7FFD000, b"\x7fELF" + b"\0" * 12))
    cap = parse_capture(data)
    assert cap.info == {"release": "test", "defer": "off"}
    assert cap.maps.startswith("00400000") and cap.vdso == (0x7FFFF7FFD000, b"\x7fELF" + b"\0" * 12)
    assert [r.cpu for r in cap.rings] == [0, 1]
    assert [r.time for r in cap.records()] == [100, 200, 300, 400]
    # offsets point into the file: the record at that offset has that header
    first = cap.records()[0]
    assert struct.unpack_from("<I", data, first.offset)[0] == 9


def test_capture_errors():
    good = pb.capture({0: b""})
    with pytest.raises(PerfFormatError) as e:
        parse_capture(b"NOTPERFC" + good[8:])
    assert e.value.field == "magic"
    with pytest.raises(PerfFormatError) as e:
        parse_capture(good[:-16])  # no "end"
    assert e.value.field == "section"
    with pytest.raises(PerfFormatError) as e:
        parse_capture(b"PERFCC01" + struct.pack("<8sQ", b"info", 1 << 40))
    assert e.value.field == "section.size"
    with pytest.raises(PerfFormatError, match="'attr'"):
        parse_capture(b"PERFCC01" + pb.section("info", b"x=1\n") + pb.section("end", b""))
    throttle = pb.header(5, 0, struct.pack("<QQQ", 1, 2, 3))  # no sample_id without sample_id_all
    assert parse_records(throttle, Attr.parse(pb.attr(flags=())))[0].time is None
    two = pb.capture({0: throttle, 1: throttle}, attr_bytes=pb.attr(flags=()))
    with pytest.raises(PerfFormatError, match="no time"):
        parse_capture(two).records()


# -- random input: only PerfFormatError, never IndexError / struct.error --------------------------
def _valid_stream() -> bytes:
    return (pb.sample(0x401000, 1, 1, 1, 0, [pb.CONTEXT_USER, 0x401000, 0x401100], REGS, b"\1" * 24)
            + pb.deferred(5, [0x401000], 1, 1, 2) + pb.lost(1, 3) + pb.task("exit", 1, 1, 4))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_random_bytes_parse_or_raise_the_typed_error(data):
    try:
        recs = parse_records(data, ATTR)
    except PerfFormatError as exc:
        assert exc.field and 0 <= exc.offset <= len(data)
    else:
        assert sum(8 for _ in recs) <= len(data)


@given(st.data())
def test_mutated_and_truncated_streams(data):
    raw = bytearray(_valid_stream())
    for _ in range(data.draw(st.integers(0, 6))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    stream = bytes(raw[:cut])
    try:
        recs = parse_records(stream, ATTR)
    except PerfFormatError as exc:
        assert exc.field and 0 <= exc.offset <= len(stream), (exc.field, exc.offset)
        return
    assert sum(8 for _ in recs) <= len(stream)  # every record has its 8-byte header
    if stream == _valid_stream():
        assert [type(r).__name__ for r in recs] == [type(r).__name__ for r in parse_records(_valid_stream(), ATTR)]


@given(st.data())
def test_mutated_captures(data):
    raw = bytearray(pb.capture({0: _valid_stream()}, maps="00400000-00401000 r-xp 00000000 00:03 12 /x\n"))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    capture = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    try:
        recs = parse_capture(capture).records()
    except PerfFormatError as exc:
        assert exc.field, f"a PerfFormatError that names no field: {exc}"
        return
    assert sum(8 for _ in recs) <= len(capture)  # every record has its 8-byte header
