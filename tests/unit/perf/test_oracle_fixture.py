"""The perf parser and oracle on two real captures from the guest.

Where they come from: the default guest (Debian's linux-binary-7.3.4+deb13-cloud-amd64, TCG, one
vCPU), guest_programs/callchain built with the host toolchain (fp-sframe-static-64-shadow),
``callchain 100000000 raw``, sampled by guest_programs/perfcc.c at 50 Hz for 0.2 s with a
256-byte user stack dump:

    harness perf --seconds 0.2 --freq 50 --stack 256 --save perf-callchain-7.3.4.perfcc
    harness perf --defer --seconds 0.2 --freq 50 --stack 256 --save perf-callchain-defer-7.3.4.perfcc
    gzip -9 -n perf-callchain*.perfcc        # then copy them to tests/data/

A new capture has other times, pids and cookies: update the pinned values below with it.
"""

from __future__ import annotations

import gzip
import struct

import pytest

from harness.perf.oracle import check_capture
from harness.perfparse.records import (
    PERF_RECORD_MISC_KERNEL,
    PERF_RECORD_MISC_USER,
    CallchainDeferred,
    Sample,
    TaskEvent,
    parse_capture,
)
from tests.support.paths import TEST_DATA

DATA = TEST_DATA
CHAIN = (0x4016C7, 0x40173C, 0x401772, 0x4017BF, 0x401B94)  # c, b, a, main, __libc_start_call_main


def load(name: str) -> bytes:
    return gzip.decompress((DATA / name).read_bytes())


@pytest.fixture(scope="module")
def plain() -> bytes:
    return load("perf-callchain-7.3.4.perfcc.gz")


@pytest.fixture(scope="module")
def deferred() -> bytes:
    return load("perf-callchain-defer-7.3.4.perfcc.gz")


def test_plain_capture_records(plain):
    cap = parse_capture(plain)
    assert cap.info["release"] == "7.3.4+deb13-cloud-amd64" and cap.info["defer"] == "off"
    assert cap.attr.flag("inherit") and cap.attr.flag("exclude_callchain_kernel")
    assert not cap.attr.flag("defer_callchain")
    assert cap.vdso is not None and cap.vdso[1][:4] == b"\x7fELF"
    assert "/progs/host/callchain-fp-sframe-static-64-shadow" in cap.maps
    recs = cap.records()
    samples = [r for r in recs if isinstance(r, Sample)]
    assert len(samples) == 11 and isinstance(recs[-1], TaskEvent) and recs[-1].kind == "exit"
    assert [s.cpumode for s in samples].count(PERF_RECORD_MISC_USER) == 4
    first = samples[0]
    assert (first.pid, first.tid, first.time, first.cpu) == (106, 106, 4851987777, 0)
    assert first.cpumode == PERF_RECORD_MISC_KERNEL and first.ip == 0xFFFFFFFF81388B25
    # perf_callchain_user(): the user IP, the chain, then two more words read through glibc's rbp
    assert first.user == (*CHAIN, 0x4015A0, 0xBE552274C0854800) and first.kernel == ()
    assert (first.regs.ip, first.regs.sp, first.regs.bp) == (0x4016C7, 0x7FFFFFFFEB20, 0x7FFFFFFFEB40)
    assert first.stack_size == 256 and len(first.stack) == 256
    # the dump is the stack: c's frame record at bp holds b's frame and c's return address
    assert struct.unpack_from("<QQ", first.stack, 0x20) == (0x7FFFFFFFEB60, 0x40173C)


def test_plain_capture_checked(plain):
    r = check_capture(parse_capture(plain))
    assert (r.samples, r.compared, r.compared_kernel_mode, r.failures) == (11, 11, 7, [])
    assert r.expected == {"perf-unchecked-fp": 11}
    assert {d.evidence["check"] for d in r.explained} == {"fp < sp"}
    assert r.ok


def test_deferred_capture_records(deferred):
    cap = parse_capture(deferred)
    assert cap.attr.flag("defer_callchain") and cap.attr.flag("defer_output") and cap.info["defer"] == "on"
    recs = cap.records()
    samples = [r for r in recs if isinstance(r, Sample)]
    records = [r for r in recs if isinstance(r, CallchainDeferred)]
    assert len(samples) == len(records) == 10
    assert all(s.user is None and s.deferred for s in samples)
    # mainline cookies: {u32 cpu + 1; u32 per-CPU counter, odd, +2 per entry}
    assert [s.cookie for s in samples] == [(3 + 2 * i) << 32 | 1 for i in range(10)]
    assert [r.cookie for r in records] == [s.cookie for s in samples]
    assert all(r.ips == CHAIN and r.tid == 104 for r in records)


def test_deferred_capture_checked(deferred):
    r = check_capture(parse_capture(deferred))
    d = r.deferred
    assert (d.samples, d.records, d.cookies, d.joined, d.compared, d.equal) == (10, 10, 10, 10, 10, 10)
    assert d.failures == [] and d.violations == [] and r.ok


def test_a_changed_deferred_ip_is_a_failure(deferred):
    """The check can fail: one return address of one record changed in the file."""
    cap = parse_capture(deferred)
    rec = next(r for r in cap.records() if isinstance(r, CallchainDeferred))
    at = rec.offset + 8 + 16 + 8 * 2  # header, cookie, nr, ips[2]
    data = deferred[:at] + struct.pack("<Q", 0x401773) + deferred[at + 8:]
    d = check_capture(parse_capture(data)).deferred
    assert len(d.failures) == 1 and "a+0x" not in d.failures[0] and "0x401773" in d.failures[0]


def test_a_missing_deferred_record_is_a_violation(deferred):
    cap = parse_capture(deferred)
    recs = cap.records()
    gone = next(r for r in recs[3:] if isinstance(r, CallchainDeferred))
    size = struct.unpack_from("<H", deferred, gone.offset + 6)[0]
    ring = cap.rings[0]
    # cut the record out of the ring section and shrink the section's size to match
    data = deferred[:gone.offset] + deferred[gone.offset + size:]
    hdr = ring.offset - 8 - 16  # {s32 cpu; u32 0} after the section header {name; u64 size}
    old = struct.unpack_from("<Q", data, hdr + 8)[0]
    data = data[:hdr + 8] + struct.pack("<Q", old - size) + data[hdr + 16:]
    d = check_capture(parse_capture(data)).deferred
    assert d.records == 9 and any("never answered" in v for v in d.violations)
    assert any("callback never ran" in v for v in d.violations)
