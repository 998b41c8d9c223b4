"""harness.kernel.btf: synthetic blobs for every kind and every error, property tests on bad bytes, and the
three real Debian kernels, checked against bpftool's raw dump where bpftool is installed."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.kernel.btf import Btf, BtfAmbiguityError, BtfError, BtfLookupError, Kind
from harness.regs import PT_REGS_FIELDS, PT_REGS_SIZE
from tests.support.gating import require
from tests.support.tiers import DEEP, unit_share

# --- a tiny BTF writer, independent of the reader (formats spelled out from btf.h) ----------------


class Builder:
    def __init__(self, order: str = "<"):
        self.order = order
        self.records: list[bytes] = []
        self.strs = bytearray(b"\0")
        self.str_offs: dict[str, int] = {"": 0}

    def s(self, name: str) -> int:
        if name not in self.str_offs:
            self.str_offs[name] = len(self.strs)
            self.strs += name.encode() + b"\0"
        return self.str_offs[name]

    def add(self, kind: int, name: str = "", vlen: int = 0, kflag: int = 0, sot: int = 0, tail: bytes = b"") -> int:
        info = (kflag << 31) | (kind << 24) | vlen
        self.records.append(struct.pack(self.order + "III", self.s(name), info, sot) + tail)
        return len(self.records)

    def pack(self, fmt: str, *rows) -> bytes:
        return b"".join(struct.pack(self.order + fmt, *r) for r in rows)

    def int_(self, name, size, bits=None, enc=0, off=0):
        return self.add(1, name, sot=size, tail=self.pack("I", ((enc << 24) | (off << 16) | (bits or size * 8),)))

    def ptr(self, t):
        return self.add(2, sot=t)

    def array(self, elem, index, n):
        return self.add(3, tail=self.pack("III", (elem, index, n)))

    def composite(self, kind, name, size, members, kflag=0):
        rows = [(self.s(n), t, (bf << 24 | off) if kflag else off) for n, t, off, bf in members]
        return self.add(kind, name, len(rows), kflag, size, self.pack("III", *rows))

    def struct_(self, name, size, members, kflag=0):
        return self.composite(4, name, size, members, kflag)

    def union(self, name, size, members, kflag=0):
        return self.composite(5, name, size, members, kflag)

    def enum(self, name, values, signed=0, size=4):
        rows = [(self.s(n), v & 0xFFFFFFFF) for n, v in values]
        return self.add(6, name, len(rows), signed, size, self.pack("II", *rows))

    def enum64(self, name, values, signed=0):
        rows = [(self.s(n), v & 0xFFFFFFFF, (v >> 32) & 0xFFFFFFFF) for n, v in values]
        return self.add(19, name, len(rows), signed, 8, self.pack("III", *rows))

    def simple(self, kind, name, t):  # FWD 7, TYPEDEF 8, VOLATILE 9, CONST 10, RESTRICT 11, TYPE_TAG 18
        return self.add(kind, name, sot=t)

    def func(self, name, proto, linkage=1):
        return self.add(12, name, linkage, sot=proto)

    def proto(self, ret, params):
        rows = [(self.s(n), t) for n, t in params]
        return self.add(13, "", len(rows), 0, ret, self.pack("II", *rows))

    def var(self, name, t, linkage=1):
        return self.add(14, name, sot=t, tail=self.pack("I", (linkage,)))

    def datasec(self, name, entries, size):
        return self.add(15, name, len(entries), 0, size, self.pack("III", *entries))

    def float_(self, name, size):
        return self.add(16, name, sot=size)

    def decl_tag(self, name, t, idx):
        return self.add(17, name, sot=t, tail=self.pack("i", (idx,)))

    def build(self, hdr_len: int = 24) -> bytes:
        types = b"".join(self.records)
        hdr = struct.pack(self.order + "HBBIIIII", 0xEB9F, 1, 0, hdr_len, 0, len(types), len(types), len(self.strs))
        return hdr + b"\0" * (hdr_len - 24) + types + bytes(self.strs)


def sample_blob(order: str = "<", hdr_len: int = 24) -> bytes:
    """A task_struct/pt_regs look-alike touching every kind."""
    b = Builder(order)
    u64 = b.int_("long unsigned int", 8)  # 1
    int_ = b.int_("int", 4, enc=1)  # 2
    char = b.int_("char", 1, enc=2)  # 3
    pid_t = b.simple(8, "pid_t", int_)  # 4
    cpid = b.simple(10, "", pid_t)  # 5 const pid_t
    vpid = b.simple(9, "", cpid)  # 6 volatile const pid_t
    comm = b.array(char, int_, 16)  # 7 char[16]
    # pt_regs: cs and ss inside anonymous unions, as on 7.x (FRED)
    u16 = b.int_("short unsigned int", 2)  # 8
    cs_u = b.union("", 8, [("cs", u16, 0, 0), ("csx", u64, 0, 0)])  # 9
    ss_u = b.union("", 8, [("ss", u16, 0, 0), ("ssx", u64, 0, 0)])  # 10
    regs = [(n, u64, 64 * i, 0) for i, n in enumerate(PT_REGS_FIELDS)]
    regs[PT_REGS_FIELDS.index("cs")] = ("", cs_u, 64 * PT_REGS_FIELDS.index("cs"), 0)
    regs[PT_REGS_FIELDS.index("ss")] = ("", ss_u, 64 * PT_REGS_FIELDS.index("ss"), 0)
    b.struct_("pt_regs", 168, regs)  # 11
    thread = b.struct_("thread_struct", 16, [("sp", u64, 0, 0), ("fsbase", u64, 64, 0)])  # 12
    fwd_mm = b.simple(7, "mm_struct", 0)  # 13 FWD struct
    mm_ptr = b.ptr(fwd_mm)  # 14
    void_ptr = b.ptr(0)  # 15
    anon_inner = b.struct_("", 8, [("tgid", vpid, 0, 0), ("bits", int_, 32, 3), ("more", int_, 35, 5)], kflag=1)  # 16
    anon_union = b.union("", 8, [("", anon_inner, 0, 0), ("both", u64, 0, 0)])  # 17
    uint = b.int_("unsigned int", 4)  # 18
    task = b.struct_(  # 19
        "task_struct",
        96,
        [
            ("stack", void_ptr, 0, 0),
            ("flags", uint, 64, 0),
            ("pid", pid_t, 96, 0),
            ("", anon_union, 128, 0),
            ("comm", comm, 192, 0),
            ("mm", mm_ptr, 320, 0),
            ("thread", thread, 384, 0),
            ("onebit", int_, 640, 1),
        ],
        kflag=1,
    )
    assert task == 19
    b.enum("pid_type", [("PIDTYPE_PID", 0), ("PIDTYPE_TGID", 1), ("PIDTYPE_MAX", 4)])  # 20
    b.enum("", [("NEG", -2), ("POS", 7)], signed=1)  # 21
    b.enum64("big", [("HUGE", 1 << 40), ("MINUS", -5)], signed=1)  # 22
    b.enum64("ubig", [("TOP", (1 << 64) - 1)])  # 23
    proto = b.proto(int_, [("regs", b.ptr(11)), ("", 0)])  # 25 (24 is the ptr)
    b.func("do_syscall_64", proto, linkage=1)  # 26
    v1 = b.var("current_task", b.ptr(task), 1)  # 28 (27 ptr)
    v2 = b.var("cpu_number", int_, 1)  # 29
    b.datasec(".data..percpu", [(v2, 0, 4), (v1, 64, 8)], 72)  # 30
    b.float_("double", 8)  # 31
    b.decl_tag("bpf_fastcall", 26, -1)  # 32
    b.simple(18, "address_space(1)", u64)  # 33 TYPE_TAG
    b.simple(11, "", b.ptr(u64))  # 35 RESTRICT (34 ptr)
    # kind_flag=0 struct with an old-style bitfield: the int type carries the width
    b.struct_("oldbits", 4, [("lo", b.int_("int", 4, bits=3, enc=1), 0, 0), ("hi", int_, 3, 0)])  # 37 (36 int:3)
    b.struct_("console", 8, [("a", u64, 0, 0)])  # 38
    b.struct_("console", 16, [("a", u64, 0, 0)])  # 39: a duplicate name, as real vmlinux BTF has
    return b.build(hdr_len)


@pytest.fixture(scope="module")
def sample() -> Btf:
    return Btf(sample_blob())


def test_header_and_index(sample):
    assert len(sample) == 40
    assert sample.byte_order == "little"
    assert sample.header["hdr_len"] == 24
    assert sample.type(0).kind == Kind.UNKN
    kinds = {t.kind for t in sample.types()}
    assert kinds == set(Kind) - {Kind.UNKN}, "the sample should cover every kind"


def test_pt_regs_layout_through_anonymous_unions(sample):
    assert sample.sizeof("pt_regs") == PT_REGS_SIZE == 168
    for i, name in enumerate(PT_REGS_FIELDS):
        assert sample.member_offset("pt_regs", name) == 8 * i, name
    assert sample.member_size("pt_regs", "cs") == 2
    assert sample.member_size("pt_regs", "ss") == 2


def test_members_offsets_and_paths(sample):
    t = sample.find("task_struct")
    assert t.kind == Kind.STRUCT and t.size == 96 and t.kind_flag
    assert sample.member_offset(t, "stack") == 0
    assert sample.member_offset("task_struct", "flags") == 8
    assert sample.member_offset("struct task_struct", "pid") == 12
    assert sample.member_offset("task_struct", "tgid") == 16  # in an anonymous struct in an anonymous union
    assert sample.member_offset("task_struct", "both") == 16
    assert sample.member_offset("task_struct", "comm") == 24
    assert sample.member_size("task_struct", "comm") == 16
    assert sample.member_offset("task_struct", "mm") == 40
    assert sample.member_offset("task_struct", "thread.sp") == 48
    assert sample.member_offset("task_struct", "thread.fsbase") == 56
    bits = sample.member("task_struct", "bits")
    assert (bits.bit_offset, bits.bitfield_size) == (128 + 32, 3)
    assert sample.member("task_struct", "more").bit_offset == 128 + 35
    with pytest.raises(BtfError, match="bitfield at bit 163"):
        sample.member_offset("task_struct", "more")
    assert sample.member("task_struct", "onebit").bitfield_size == 1
    assert sample.member_offset("task_struct", "onebit") == 80  # a bitfield, but on a byte
    # member types, resolved or not
    assert sample.member_type("task_struct", "pid").name == "pid_t"
    assert sample.resolved(sample.member_type("task_struct", "pid").id).name == "int"
    assert sample.member_type("task_struct", "tgid").kind == Kind.VOLATILE
    assert sample.resolve(sample.member("task_struct", "tgid").type_id) == 2
    assert sample.member_size("task_struct", "tgid") == 4
    assert sample.member_size("task_struct", "mm") == 8
    assert sample.resolved(sample.member_type("task_struct", "mm").ref).kind == Kind.FWD
    names = [m.name for m in sample.members("task_struct")]
    assert names == ["stack", "flags", "pid", "", "comm", "mm", "thread", "onebit"]


def test_old_style_bitfields_without_kind_flag(sample):
    lo, hi = sample.members("oldbits")
    assert (lo.bit_offset, lo.bitfield_size) == (0, 3)
    assert (hi.bit_offset, hi.bitfield_size) == (3, 0)


def test_lookup_errors_are_key_errors_with_clear_messages(sample):
    with pytest.raises(BtfLookupError, match=r"has no member 'nope'") as e:
        sample.member_offset("task_struct", "nope")
    assert isinstance(e.value, KeyError)
    assert "'" not in str(e.value)[:1], "message is not repr()-quoted like a plain KeyError"
    with pytest.raises(BtfLookupError, match=r"task_struct\.thread .*has no member 'ip'"):
        sample.member_offset("task_struct", "thread.ip")
    with pytest.raises(BtfLookupError,
                       match=r"member pid is of type \[2\] INT int, not a struct or union, so it has no member 'x'"):
        sample.member_offset("task_struct", "pid.x")
    with pytest.raises(BtfLookupError, match="no member ''"):
        sample.member_offset("task_struct", "thread..sp")
    with pytest.raises(BtfLookupError, match="no BTF struct 'mm'"):
        sample.find("mm")
    with pytest.raises(BtfLookupError, match="there is a fwd of that name"):
        sample.find("mm_struct")
    assert sample.find("mm_struct", "fwd").kind_flag is False
    with pytest.raises(BtfAmbiguityError, match=r"2 types struct 'console'.*size=8.*size=16"):
        sample.sizeof("console")
    assert [t.size for t in sample.find_all("console", "struct")] == [8, 16]
    with pytest.raises(BtfLookupError, match="no BTF type id 999"):
        sample.type(999)
    with pytest.raises(ValueError, match="unknown BTF kind"):
        sample.find("x", "klass")


def test_sizeof_and_resolve(sample):
    assert sample.sizeof("int") == 4
    assert sample.sizeof("pid_t") == 4
    assert sample.sizeof(7) == 16  # char[16]
    assert sample.sizeof(sample.find("current_task", "var")) == 8
    assert sample.sizeof("double") == 8
    assert sample.sizeof("enum pid_type") == 4
    assert sample.sizeof("enum big") == 8
    assert sample.sizeof(sample.find(".data..percpu", "datasec")) == 72
    assert sample.sizeof(33) == 8  # type tag over u64
    assert sample.sizeof(35) == 8  # restrict pointer
    assert sample.resolve(6) == 2
    assert sample.resolve(33) == 1
    for no_size in ("do_syscall_64", 25, 0, sample.find("mm_struct", "fwd")):
        with pytest.raises(BtfError, match="has no size"):
            sample.sizeof(no_size)
    assert sample.pointer_size() == 8
    assert sample.int_info("int") == (1, 0, 32)
    assert sample.array_info(7) == (3, 2, 16)


def test_enums(sample):
    assert sample.enum_value("pid_type", "PIDTYPE_TGID") == 1
    assert sample.enum_value("enum pid_type", "PIDTYPE_MAX") == 4
    assert sample.enum_values(21) == {"NEG": -2, "POS": 7}
    assert sample.enum_value(None, "NEG") == -2  # anonymous enum, searched by enumerator
    assert sample.enum_values("big") == {"HUGE": 1 << 40, "MINUS": -5}
    assert sample.enum_value("ubig", "TOP") == (1 << 64) - 1
    with pytest.raises(BtfLookupError, match="enum 'pid_type' has no enumerator 'PIDTYPE_XXX'"):
        sample.enum_value("pid_type", "PIDTYPE_XXX")
    with pytest.raises(BtfLookupError, match="no BTF enum has an enumerator 'NOPE'"):
        sample.enum_value(None, "NOPE")
    with pytest.raises(BtfLookupError, match="no BTF enum 'nope'"):
        sample.enum_values("nope")


def test_functions_vars_datasec_tags(sample):
    f = sample.find("do_syscall_64", "func")
    assert f.vlen == 1  # linkage: global
    params = sample.params(f)
    assert [p.name for p in params] == ["regs", ""]
    assert params[1].type_id == 0  # variadic
    assert sample.var_linkage(sample.find("current_task", "var")) == 1
    assert sample.var_datasec_offset("current_task") == 64
    assert sample.var_datasec_offset("cpu_number") == 0
    assert [e.name for e in sample.datasec(".data..percpu")] == ["cpu_number", "current_task"]
    with pytest.raises(BtfLookupError, match=r"no variable 'pcpu_hot' in BTF DATASEC '.data..percpu' \(2 variables\)"):
        sample.var_datasec_offset("pcpu_hot")
    with pytest.raises(BtfLookupError, match="no DATASEC '.bss'"):
        sample.var_datasec_offset("x", ".bss")
    assert sample.decl_tag_component(32) == -1
    assert sample.type(32).ref == 26


def test_big_endian_and_longer_header_read_the_same():
    le, be, long_hdr = Btf(sample_blob("<")), Btf(sample_blob(">")), Btf(sample_blob("<", hdr_len=32))
    assert be.byte_order == "big"
    for other in (be, long_hdr):
        assert len(other) == len(le)
        for i in range(len(le)):
            a, b = le.type(i), other.type(i)
            assert ((a.kind, a.name, a.size, a.ref, a.vlen, a.kind_flag)
                    == (b.kind, b.name, b.size, b.ref, b.vlen, b.kind_flag))
        assert other.members("task_struct") == le.members("task_struct")
        assert other.enum_values("big") == le.enum_values("big")
        assert other.member_offset("task_struct", "thread.sp") == 48


# --- malformed bytes: typed errors naming the field and the byte offset ------------------------------


def _patch(blob: bytes, offset: int, fmt: str, *values) -> bytes:
    out = bytearray(blob)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b[:5], r"truncated: 5 bytes.*at byte 0"),
        (lambda b: b[:20], r"header truncated: 20 bytes"),
        (lambda b: b"\x00\x00" + b[2:], r"bad BTF magic 0x0000 at byte 0"),
        (lambda b: _patch(b, 2, "<B", 2), r"unsupported BTF version 2 at byte 2"),
        (lambda b: _patch(b, 4, "<I", 12), r"hdr_len 12 at byte 4 is shorter"),
        (lambda b: _patch(b, 4, "<I", 1 << 30), r"hdr_len \d+ at byte 4 is past the end"),
        (lambda b: b[:-3], r"str_off/str_len at bytes 16/20.*runs past the end"),
        (lambda b: _patch(b, 8, "<I", 1 << 20), r"type_off/type_len at bytes 8/12.*runs past the end"),
        (lambda b: _patch(b, 24 + 4, "<I", 25 << 24), r"type \[1\] at byte 24: unknown kind 25"),
        (lambda b: _patch(b, 12, "<I", 26), r"type \[2\] at byte 40.*btf_type record truncated"),
        (lambda b: _patch(b, 12, "<I", 44), r"type \[3\] at byte 56.*runs 4 bytes past the end"),
        (lambda b: _patch(b, len(b) - 1, "<B", 0x41), r"must start with the empty string and end with a NUL"),
    ],
)
def test_malformed_header_and_index(mutate, message):
    with pytest.raises(BtfError, match=message) as e:
        Btf(mutate(sample_blob()))
    assert isinstance(e.value, ValueError)


def test_bad_references_found_lazily_name_their_bytes():
    blob = sample_blob()
    # type [4] pid_t: a typedef whose target (its 3rd word) now points past the last type
    off4 = 24 + 16 + 16 + 16
    bad = Btf(_patch(blob, off4 + 8, "<I", 5000))
    with pytest.raises(BtfError, match=rf"\[4\] TYPEDEF pid_t at byte {off4}: refers to type id 5000"):
        bad.sizeof("pid_t")
    # a typedef that refers to itself
    loop = Btf(_patch(blob, off4 + 8, "<I", 4))
    with pytest.raises(BtfError, match="cycle"):
        loop.resolve("pid_t")
    with pytest.raises(BtfError, match="cycle"):
        loop.sizeof(4)
    # a name offset past the string section
    named = Btf(_patch(blob, off4, "<I", 1 << 20))
    with pytest.raises(BtfError, match=rf"type \[4\] name_off at byte {off4}: 1048576 is past the end"):
        named.find("int")


def test_from_elf_without_btf(tmp_path):
    import sys

    with pytest.raises(BtfError, match="no .BTF section"):
        Btf.from_elf(sys.executable)
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x7fELF" + b"\xff" * 60)
    with pytest.raises(BtfError, match="not a readable ELF"):
        Btf.from_elf(junk)


def _exercise(btf: Btf) -> int:
    """Touch every query on every type: only BtfError/BtfLookupError may come out.  A type that
    is answered is the one asked for, and a size is never negative; returns the answers."""
    answered = 0
    for i in range(len(btf)):
        for query in (btf.type, btf.sizeof, btf.resolve, btf.members, btf.enum_values, btf.params,
                      btf.array_info, btf.int_info, btf.var_linkage, btf.decl_tag_component):
            try:
                answer = query(i)
            except (BtfError, BtfLookupError):
                continue
            answered += 1
            if query == btf.type:
                assert answer.id == i, f"type({i}) answered type {answer.id}"
            elif query == btf.sizeof:
                assert answer >= 0, f"sizeof({i}) = {answer}"
    for call in (
        lambda: btf.member_offset("task_struct", "thread.sp"),
        lambda: btf.member_offset("pt_regs", "cs"),
        lambda: btf.enum_value("pid_type", "PIDTYPE_TGID"),
        lambda: btf.enum_value(None, "NEG"),
        lambda: btf.var_datasec_offset("current_task"),
        lambda: btf.find("console"),
        lambda: btf.pointer_size(),
    ):
        try:
            call()
        except (BtfError, BtfLookupError):
            pass
        else:
            answered += 1
    return answered


SAMPLE = sample_blob()
BTF_MAGIC = (b"\x9f\xeb", b"\xeb\x9f")  # 0xeB9F, little and big endian


def _parses_only_with_magic(data: bytes) -> Btf | None:
    """``Btf(data)``, or None where it raised BtfError; bytes without the magic must raise."""
    try:
        btf = Btf(data)
    except BtfError as exc:
        assert str(exc), "a BtfError without a message"
        return None
    assert data[:2] in BTF_MAGIC, f"parsed without the BTF magic: {data[:2].hex()}"
    return btf


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_btf_error(data):
    btf = _parses_only_with_magic(data)
    if btf is not None:
        _exercise(btf)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(SAMPLE)))
def test_truncated_sample_raises_only_btf_error(n):
    # the sample's string section ends it: every cut loses what the header promises
    btf = _parses_only_with_magic(SAMPLE[:n])
    if n < len(SAMPLE):
        assert btf is None, f"cut to {n} of {len(SAMPLE)} bytes and still parsed"
    else:
        assert btf is not None and _exercise(btf) > len(btf)


@DEEP  # 500 examples over BTF parsing: the deep tier (tests/support/tiers.py)
@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(SAMPLE) - 1), st.integers(0, 255)), min_size=1, max_size=8), st.booleans())
def test_mutated_sample_raises_only_btf_error(edits, magic_too):
    data = bytearray(SAMPLE)
    for pos, val in edits:
        if pos >= 2 or magic_too:
            data[pos] = val
    btf = _parses_only_with_magic(bytes(data))
    if btf is not None:
        _exercise(btf)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, (len(SAMPLE) - 4) // 4),
       st.integers(0, 0xFFFFFFFF) | st.sampled_from([0, 1, 0xFFFF, 0x80000000, 0xFFFFFFFF]))
def test_mutated_words_raise_only_btf_error(index, word):
    data = bytearray(SAMPLE)
    pos = 4 * index
    struct.pack_into("<I", data, pos, word)
    btf = _parses_only_with_magic(bytes(data))
    if btf is not None:
        _exercise(btf)


# --- the real kernels -------------------------------------------------------------------------------

KERNEL_NAMES = ("default", "trixie", "bookworm")


@pytest.fixture(scope="session")
def real_kernels():
    """name -> (Kernel, Btf, seconds to build the index) for the three Debian kernels."""
    from harness.images.kernel import get_kernel

    out = {}
    for name in KERNEL_NAMES:
        k = get_kernel(name)
        t0 = time.perf_counter()
        btf = Btf.from_elf(k.vmlinux)
        out[name] = (k, btf, time.perf_counter() - t0)
    return out


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_real_pt_regs_matches_regs_py(real_kernels, name):
    _, btf, _ = real_kernels[name]
    assert btf.sizeof("pt_regs") == PT_REGS_SIZE == 168
    for field in ("ip", "sp", "cs", "bp", "ss", "flags"):
        assert btf.member_offset("pt_regs", field) == 8 * PT_REGS_FIELDS.index(field), field
    for i, field in enumerate(PT_REGS_FIELDS):
        assert btf.member_offset("pt_regs", field) == 8 * i, field


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_real_task_struct(real_kernels, name):
    _, btf, _ = real_kernels[name]
    size = btf.sizeof("task_struct")
    assert 2048 <= size <= 16384 and size % 64 == 0, size  # ____cacheline_aligned
    offs = {m: btf.member_offset("task_struct", m) for m in ("pid", "tgid", "comm", "flags", "stack", "mm")}
    assert all(0 <= o < size for o in offs.values()), offs
    assert offs["stack"] < offs["flags"] < 64  # at the head: thread_info/__state, stack, usage, flags
    assert offs["tgid"] == offs["pid"] + 4 and offs["pid"] % 4 == 0
    assert offs["mm"] % 8 == 0 and offs["stack"] % 8 == 0
    assert btf.member_size("task_struct", "comm") == 16
    assert btf.member_size("task_struct", "pid") == 4
    assert btf.member_size("task_struct", "stack") == 8
    assert btf.sizeof(btf.member_type("task_struct", "mm").id) == 8
    assert btf.resolved(btf.member_type("task_struct", "mm").ref).name == "mm_struct"
    assert btf.member_offset("task_struct", "thread.sp") > offs["comm"]
    assert btf.enum_value("pid_type", "PIDTYPE_TGID") == 1


def test_real_task_struct_layout_differs_across_kernels(real_kernels):
    layouts = {
        name: (btf.sizeof("task_struct"), btf.member_offset("task_struct", "pid"),
               btf.member_offset("task_struct", "comm"))
        for name, (_, btf, _) in real_kernels.items()
    }
    assert len(set(layouts.values())) == len(layouts), layouts
    assert len({pid for _, pid, _ in layouts.values()}) == len(layouts), layouts


def test_real_percpu_variables(real_kernels):
    for _, btf, _ in real_kernels.values():
        entries = btf.datasec(".data..percpu")
        assert len(entries) > 100
        names = {e.name for e in entries}
        # current_task: a per-CPU variable of its own before 6.2 and again since 6.15; in pcpu_hot between
        holder = "current_task" if "current_task" in names else "pcpu_hot"
        off = btf.var_datasec_offset(holder)
        assert 0 < off < btf.sizeof(btf.find(".data..percpu", "datasec"))


def test_real_index_and_first_lookup(real_kernels):
    """~121k types: the index of the raw blob and of the vmlinux file agree on a lookup.  Their speed
    is printed by benchmarks/parsers.py, not asserted here: a timed test fails on a loaded machine."""
    k, btf, _ = real_kernels["default"]
    assert len(btf) > 100_000
    fresh = Btf(btf._data)
    assert len(fresh) == len(btf)
    assert fresh.member_offset("task_struct", "pid") == Btf.from_elf(k.vmlinux).member_offset("task_struct", "pid")


# --- independent check: bpftool's raw dump ----------------------------------------------------------


def _bpftool() -> str | None:
    tool = shutil.which("bpftool") or next((p for p in ("/usr/sbin/bpftool", "/sbin/bpftool")
                                            if os.access(p, os.X_OK)), None)
    require(tool is not None,
            "bpftool is missing (Debian package 'bpftool', ./dev installs it): it checks harness.kernel.btf")
    return tool


_HEAD = re.compile(r"^\[(\d+)\] (\w+) '([^']*)'(.*)$")
_KV = re.compile(r"(\w+)=(\S+?),?(?=\s|$)")
_SUB_NAMED = re.compile(r"^\t'([^']*)'(.*)$")
_SUB_SECINFO = re.compile(r"^\ttype_id=(\d+) offset=(\d+) size=(\d+) \(VAR '([^']*)'\)$")


def parse_bpftool_raw(text: str) -> dict[int, tuple]:
    """{id: (KIND, name, {key: value}, [sub-entries])} from `bpftool btf dump file F format raw`."""
    out: dict[int, tuple] = {}
    cur = None
    for line in text.splitlines():
        m = _HEAD.match(line)
        if m:
            cur = (m[2], m[3], dict(_KV.findall(m[4])), [])
            out[int(m[1])] = cur
            continue
        s = _SECINFO_OR_NAMED(line)
        assert cur is not None and s is not None, line
        cur[3].append(s)
    return out


def _SECINFO_OR_NAMED(line: str):
    m = _SUB_SECINFO.match(line)
    if m:
        return (m[4], {"type_id": m[1], "offset": m[2], "size": m[3]})
    m = _SUB_NAMED.match(line)
    if m:
        kv = dict(_KV.findall(m[2]))
        if "val" in kv:  # ENUM64 values carry a C suffix: 2017612633061982208ULL, -5LL
            kv["val"] = kv["val"].rstrip("UL")
        return (m[1], kv)
    return None


_INT_ENC = {0: "(none)", 1: "SIGNED", 2: "CHAR", 4: "BOOL"}
_LINKAGE = {0: "static", 1: "global", 2: "extern"}


def as_bpftool(btf: Btf, tid: int) -> tuple:
    """Our reading of type ``tid`` in the shape parse_bpftool_raw() gives."""
    t = btf.type(tid)
    kv: dict[str, str] = {}
    subs: list = []
    k = t.kind
    if k == Kind.INT:
        enc, off, bits = btf.int_info(t)
        kv = {"size": t.size, "bits_offset": off, "nr_bits": bits, "encoding": _INT_ENC[enc]}
    elif k in (Kind.PTR, Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST, Kind.RESTRICT, Kind.TYPE_TAG):
        kv = {"type_id": t.ref}
    elif k == Kind.ARRAY:
        elem, index, n = btf.array_info(t)
        kv = {"type_id": elem, "index_type_id": index, "nr_elems": n}
    elif k in (Kind.STRUCT, Kind.UNION):
        kv = {"size": t.size, "vlen": t.vlen}
        for m in btf.members(t):
            d = {"type_id": m.type_id, "bits_offset": m.bit_offset}
            if m.bitfield_size:
                d["bitfield_size"] = m.bitfield_size
            subs.append((m.name or "(anon)", d))
    elif k in (Kind.ENUM, Kind.ENUM64):
        kv = {"encoding": "SIGNED" if t.kind_flag else "UNSIGNED", "size": t.size, "vlen": t.vlen}
        subs = [(n, {"val": v}) for n, v in btf.enum_values(t).items()]
    elif k == Kind.FWD:
        kv = {"fwd_kind": "union" if t.kind_flag else "struct"}
    elif k == Kind.FUNC:
        kv = {"type_id": t.ref, "linkage": _LINKAGE[t.vlen]}
    elif k == Kind.FUNC_PROTO:
        kv = {"ret_type_id": t.ref, "vlen": t.vlen}
        subs = [(p.name or "(anon)", {"type_id": p.type_id}) for p in btf.params(t)]
    elif k == Kind.VAR:
        kv = {"type_id": t.ref, "linkage": _LINKAGE[btf.var_linkage(t)]}
    elif k == Kind.DATASEC:
        kv = {"size": t.size, "vlen": t.vlen}
        subs = [(e.name, {"type_id": e.var_id, "offset": e.offset, "size": e.size}) for e in btf.datasec(t.name)]
    elif k == Kind.FLOAT:
        kv = {"size": t.size}
    elif k == Kind.DECL_TAG:
        kv = {"type_id": t.ref, "component_idx": btf.decl_tag_component(t)}
    stringify = lambda d: {a: str(b) for a, b in d.items()}  # noqa: E731
    return (k.name, t.name or "(anon)", stringify(kv), [(n, stringify(d)) for n, d in subs])


@pytest.fixture(scope="session")
def bpftool_dumps(real_kernels):
    tool = _bpftool()
    dumps = {}
    for name, (k, _, _) in real_kernels.items():
        text = subprocess.run([tool, "btf", "dump", "file", str(k.vmlinux), "format", "raw"],
                              check=True, capture_output=True, text=True).stdout
        dumps[name] = parse_bpftool_raw(text)
    return dumps


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_matches_bpftool_for_key_structs(real_kernels, bpftool_dumps, name):
    _, btf, _ = real_kernels[name]
    dump = bpftool_dumps[name]
    assert len(dump) == len(btf) - 1
    for sname in ("task_struct", "pt_regs", "thread_struct", "mm_struct", "pid_type"):
        t = btf.find(sname, "enum" if sname == "pid_type" else "struct")
        assert as_bpftool(btf, t.id) == dump[t.id], sname
        assert dump[t.id][1] == sname
    # sizeof and the offsets of task_struct's members, computed by bpftool's numbers alone
    ts = btf.find("task_struct")
    kind, _, kv, members = dump[ts.id]
    assert int(kv["size"]) == btf.sizeof("task_struct")
    by_name = {n: int(d["bits_offset"]) // 8 for n, d in members}
    for m in ("pid", "tgid", "comm", "flags", "stack", "mm"):
        assert btf.member_offset("task_struct", m) == by_name[m], m


# the default kernel in the unit tier, the other two in the deep tier (tests/support/tiers.py)
@pytest.mark.parametrize("name", unit_share(KERNEL_NAMES, len(KERNEL_NAMES)))
def test_matches_bpftool_for_every_type(real_kernels, bpftool_dumps, name):
    """Every type (every kind, all members, enumerators, params, DATASEC entries), ~1.5 s a kernel."""
    _, btf, _ = real_kernels[name]
    dump = bpftool_dumps[name]
    mismatches = [tid for tid in range(1, len(btf)) if as_bpftool(btf, tid) != dump[tid]]
    assert not mismatches, [(tid, as_bpftool(btf, tid), dump[tid]) for tid in mismatches[:3]]
