"""harness.unwind.ehframe, the reader of ``.eh_frame``, held equal to pyelftools (the reference).

* Every CIE and FDE of real binaries -- catalog programs of three toolchains (static, dynamic,
  i386), Debian's libc, libstdc++, libgcc_s and libcrypto -- has the header fields, augmentation
  data, LSDA pointer and decoded table (``get_decoded().table``, ``reg_order``) pyelftools gives.
  Where pyelftools decodes no table, the one cause it may have is named: ``DW_CFA_GNU_args_size``
  (no rule; the table then equals pyelftools' of the same instructions without it).
* ``CFITable`` reads .eh_frame with it and .debug_frame (a Go binary's) with pyelftools.
* Pointer encodings and instructions on hand-made sections; corrupt sections (truncated, a bad
  CIE pointer, an unknown opcode, random bytes) raise :class:`EhFrameError`, never another error.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from elftools.dwarf.callframe import CIE as PyCIE
from elftools.dwarf.callframe import FDE as PyFDE
from elftools.dwarf.callframe import CFARule, DecodedCallFrameTable, RegisterRule
from elftools.dwarf.constants import DW_CFA
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.images.programs import Variant
from harness.unwind.cfi import CFITable, CorruptCFI
from harness.unwind.ehframe import CIE, FDE, EhFrameError, parse_eh_frame
from harness.unwind.maps import ElfImage
from tests.support.gating import require
from tests.support.paths import TEST_DATA
from tests.support.tiers import unit_share
from tests.support.toolchains import program

LIBS = "/usr/lib/x86_64-linux-gnu"
SYSTEM = ("libc.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libcrypto.so.3")
# (program, toolchain, variant): gcc 12, 14 and 16 static (about 1,000-3,000 FDEs each), a
# dynamic one (the PLT's CFA expression) and an i386 one (version-1 CIEs, 4-byte pointers)
CATALOG = (
    ("callchain", "host", Variant()),
    ("sframe_many", "trixie", Variant(frame_pointers=False)),
    ("signal", "sid", Variant()),
    ("callchain", "host", Variant(static=False)),
    ("callchain", "host", Variant(bits=32, frame_pointers=False)),
)


def _rows(decoded) -> list[dict]:
    """A table's rows with each rule as its attributes (``type``, ``arg``; ``reg``, ``offset``,
    ``expr``): pyelftools' rule classes compare by identity.  An expression is a list of bytes in
    both (pyelftools' a ListContainer, a list)."""
    return [{k: v if k == "pc" else vars(v) for k, v in row.items()} for row in decoded.table]


def _rule(rule: dict) -> tuple:
    """A rule of :func:`_rows` as a tuple, for the hand-made sections' expected rows."""
    return ("rule", rule["type"], rule["arg"]) if "type" in rule else ("cfa", rule["reg"], rule["offset"], rule["expr"])


def _tuples(decoded) -> list[dict]:
    return [{k: v if k == "pc" else _rule(v) for k, v in row.items()} for row in _rows(decoded)]


def _pyelftools_without_args_size(fde: PyFDE) -> list[dict]:
    """pyelftools' table of ``fde`` with its DW_CFA_GNU_args_size instructions left out."""
    fde.instructions = [i for i in fde.instructions if i.opcode != DW_CFA.GNU_args_size]
    fde.__dict__.pop("_decode_CFI_table", None)
    return _rows(fde.get_decoded())


def _sections(data: bytes):
    elf = ELFFile(io.BytesIO(data))
    return elf, elf.get_section_by_name(".eh_frame")


def assert_same_as_pyelftools(path: str) -> tuple[int, list[int]]:
    """Every entry of ``path``'s .eh_frame read by both; returns the number of FDEs compared and
    the starts of those with DW_CFA_GNU_args_size (pyelftools decodes no table for them)."""
    elf, sec = _sections(Path(path).read_bytes())
    assert sec is not None, f"{path}: no .eh_frame"
    ours = parse_eh_frame(sec.data(), sec["sh_addr"], address_size=elf.elfclass // 8)
    theirs = [e for e in elf.get_dwarf_info(follow_links=False).EH_CFI_entries() if isinstance(e, (PyCIE, PyFDE))]
    assert [(type(e).__name__, e.offset) for e in ours] == [(type(e).__name__, e.offset) for e in theirs]
    n, args_size = 0, []
    for a, b in zip(ours, theirs, strict=True):
        where = f"{path}: {a!r}"
        assert a.header == dict(b.header), where
        assert a.augmentation_bytes == b.augmentation_bytes, where
        if isinstance(a, CIE):
            aug = {k: v for k, v in b.augmentation_dict.items() if k is not True}
            if "personality" in aug:
                aug["personality"] = {"encoding": aug["personality"].encoding,
                                      "function": aug["personality"].function}
            assert {k: v for k, v in a.augmentation_dict.items() if k != "S"} == aug, where
            assert ("S" in a.augmentation_dict) == (True in b.augmentation_dict), where
            continue
        assert a.cie.offset == b.cie.offset and a.lsda_pointer == b.lsda_pointer, where
        mine = a.get_decoded()
        try:
            want = _rows(b.get_decoded())
        except Exception:  # noqa: BLE001 -- the one cause is named next
            assert DW_CFA.GNU_args_size in {i.opcode for i in b.instructions}, where
            want = _pyelftools_without_args_size(b)
            args_size.append(a["initial_location"])
        else:
            assert mine.reg_order == b.get_decoded().reg_order, where
        assert _rows(mine) == want, where
        n += 1
    return n, args_size


@pytest.mark.parametrize("name,tc,variant", CATALOG, ids=[f"{n}-{t}-{v.tag}" for n, t, v in CATALOG])
def test_catalog_programs_read_as_pyelftools_reads_them(name, tc, variant):
    assert assert_same_as_pyelftools(str(program(name, tc, variant).path))[0] > 0


# libc in the unit tier; libstdc++, libgcc_s and libcrypto (4 s of CPU) in the deep tier
@pytest.mark.parametrize("lib", unit_share(SYSTEM, len(SYSTEM)))
def test_debian_libraries_read_as_pyelftools_reads_them(lib):
    """libstdc++'s C++ code has DW_CFA_GNU_args_size, where pyelftools decodes no table (its
    decoder knows no such case): the CFI table reads those FDEs."""
    path = f"{LIBS}/{lib}"
    require(os.path.exists(path), f"{path} is not installed (./dev installs it)")
    n, args_size = assert_same_as_pyelftools(path)
    assert n > 100
    if lib.startswith("libstdc++"):
        assert args_size
        table = CFITable(ElfImage.from_path(path))
        assert table.error is None
        assert all(table.row_for(start) is not None for start in args_size)


def test_cfi_table_indexes_every_fde_with_a_range():
    prog = program("callchain", "host", Variant())
    table = CFITable(ElfImage.from_path(prog.path))
    elf, _sec = _sections(Path(prog.path).read_bytes())
    theirs = [e for e in elf.get_dwarf_info(follow_links=False).EH_CFI_entries()
              if isinstance(e, PyFDE) and e["address_range"]]
    assert table.error is None
    assert [(f["initial_location"], f["address_range"]) for f in table.fdes()] == sorted(
        (f["initial_location"], f["address_range"]) for f in theirs)
    assert all(isinstance(f, FDE) for f in table.fdes())


def test_go_binary_debug_frame_stays_on_pyelftools(tmp_path):
    """Go writes .debug_frame, no .eh_frame: the table holds pyelftools' FDEs of it."""
    go = shutil.which("go") or ("/usr/bin/go" if os.path.exists("/usr/bin/go") else None)
    require(go is not None, "golang-go is not installed (./dev installs it)")
    env = {**os.environ, "GOCACHE": str(tmp_path / "cache"), "GOPATH": str(tmp_path / "gopath"),
           "GO111MODULE": "off", "CGO_ENABLED": "0"}
    shutil.copy(TEST_DATA / "gospin.go", tmp_path / "main.go")
    subprocess.run([go, "build", "-o", str(tmp_path / "gospin"), "main.go"], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=300)
    table = CFITable(ElfImage.from_path(tmp_path / "gospin"))
    assert table.error is None and len(table) > 100
    assert all(isinstance(f, PyFDE) for f in table.fdes())


# ------------------------------------------------------------------------------ hand-made sections


def _entry(body: bytes, pad: bool = True) -> bytes:
    if pad:
        body += b"\0" * (-(len(body) + 4) % 4)  # padding: DW_CFA_nop
    return struct.pack("<I", len(body)) + body


def _uleb(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def cie(insns: bytes = b"\x0c\x07\x08\x90\x01", *, aug: bytes = b"zR", data: bytes = b"\x1b",
        version: int = 1) -> bytes:
    """A CIE (code factor 1, data factor -8, RA column 16); default: CFA = rsp + 8, RA at CFA-8."""
    body = struct.pack("<IB", 0, version) + aug + b"\0" + b"\x01\x78" + (b"\x10" if version == 1 else _uleb(16))
    if aug:
        body += _uleb(len(data)) + data
    return _entry(body + insns)


def fde(at: int, cie_at: int, pointers: bytes, insns: bytes = b"", aug: bytes | None = b"",
        pad: bool = True) -> bytes:
    """An FDE at section offset ``at`` whose CIE is at ``cie_at``."""
    body = struct.pack("<I", at + 4 - cie_at) + pointers + (b"" if aug is None else _uleb(len(aug)) + aug)
    return _entry(body + insns, pad)


BASE = 0x401000  # the section's address
PROLOGUE = b"\x41\x0e\x10\x86\x02\x43\x0d\x06"  # advance 1; cfa+16; rbp at cfa-16; advance 3; cfa=rbp


def _one(section: bytes, **kw) -> FDE:
    fdes = [e for e in parse_eh_frame(section, BASE, **kw) if isinstance(e, FDE)]
    assert len(fdes) == 1
    return fdes[0]


def test_pcrel_sdata4_and_the_rows_of_a_prologue():
    c = cie()
    at = len(c)
    f = _one(c + fde(at, 0, struct.pack("<ii", 0x1000 - (BASE + at + 8), 0x20), PROLOGUE))
    assert (f["initial_location"], f["address_range"]) == (0x1000, 0x20)
    decoded = f.get_decoded()
    assert isinstance(decoded, DecodedCallFrameTable)  # pyelftools' own shape and classes
    assert all(isinstance(row["cfa"], CFARule) and isinstance(row[16], RegisterRule) for row in decoded.table)
    rows = _tuples(decoded)
    assert [r["pc"] for r in rows] == [0x1000, 0x1001, 0x1004]
    assert rows[-1] == {"pc": 0x1004, "cfa": ("cfa", 6, 16, None), 16: ("rule", "OFFSET", -8),
                        6: ("rule", "OFFSET", -16)}


ENCODINGS = [
    (0x00, struct.pack("<QQ", 0x1234, 0x10), 0x1234),   # absptr
    (0x03, struct.pack("<II", 0x1234, 0x10), 0x1234),   # udata4
    (0x02, struct.pack("<HH", 0x1234, 0x10), 0x1234),   # udata2
    (0x04, struct.pack("<QQ", 0x1234, 0x10), 0x1234),   # udata8
    (0x01, _uleb(0x1234) + _uleb(0x10), 0x1234),         # uleb128
    (0x09, b"\xb4\x24" + b"\x10", 0x1234),              # sleb128
    (0x0A, struct.pack("<hh", 0x1234, 0x10), 0x1234),   # sdata2
    (0x0C, struct.pack("<qq", 0x1234, 0x10), 0x1234),   # sdata8
    (0x30 | 0x03, struct.pack("<II", 0x34, 0x10), 0x601034),  # datarel: from the base given
    (0x80 | 0x03, struct.pack("<II", 0x5000, 0x10), 0x5008),  # indirect: the word at 0x5000
]


@pytest.mark.parametrize("enc,raw,want", ENCODINGS, ids=[f"{e[0]:#04x}" for e in ENCODINGS])
def test_pointer_encodings(enc, raw, want):
    c = cie(data=bytes([enc]))
    f = _one(c + fde(len(c), 0, raw), datarel_base=0x601000, deref=lambda addr: addr + 8)
    assert (f["initial_location"], f["address_range"]) == (want, 0x10)


def test_an_encoding_without_its_base_is_typed():
    for enc in (0x33, 0x83, 0x23):  # datarel, indirect, textrel: nothing given
        c = cie(data=bytes([enc]))
        with pytest.raises(EhFrameError, match="no (base|memory) was given"):
            parse_eh_frame(c + fde(len(c), 0, struct.pack("<II", 0x34, 0x10)), BASE)
    c = cie(data=b"\xff")  # omit: an FDE without a location
    with pytest.raises(EhFrameError, match="omit"):
        parse_eh_frame(c + fde(len(c), 0, struct.pack("<II", 0x34, 0x10)), BASE)


def test_augmentations_lsda_personality_signal():
    c = cie(aug=b"zPLRS", data=b"\x00" + struct.pack("<Q", 0xABC) + b"\x1b\x1b")
    at = len(c)
    lsda = struct.pack("<i", 0x100)
    f = _one(c + fde(at, 0, struct.pack("<ii", 0, 8), aug=lsda))
    assert f.cie.augmentation_dict == {"length": 11, "personality": {"encoding": 0, "function": 0xABC},
                                       "LSDA_encoding": 0x1B, "FDE_encoding": 0x1B, "S": True}
    assert f.cie.signal_frame and f.augmentation_bytes == lsda
    assert f.lsda_pointer == BASE + at + 4 + 4 + 8 + 1 + 0x100  # pcrel: from the LSDA field itself
    assert f["initial_location"] == BASE + at + 8


def test_terminators_between_entries_are_skipped():
    """A zero length ends libgcc's walk of one object's section; pyelftools reads on, so does
    this reader (the entries of a section that several inputs' terminators split)."""
    c = cie()
    section = c + b"\0\0\0\0" + fde(len(c) + 4, 0, struct.pack("<ii", 0, 4)) + b"\0\0\0\0"
    entries = parse_eh_frame(section, BASE)
    assert [type(e).__name__ for e in entries] == ["CIE", "FDE"]
    assert entries[1].cie is entries[0]


def test_gnu_args_size_and_def_cfa_sf():
    c = cie()
    insns = b"\x2e\x10" + b"\x12\x07\x7e" + b"\x41"  # args_size 16; def_cfa_sf rsp, -2 * -8; advance 1
    f = _one(c + fde(len(c), 0, struct.pack("<ii", 0, 8), insns))
    assert _tuples(f.get_decoded())[-1]["cfa"] == ("cfa", 7, 16, None)


def test_remember_restore_state_and_restore():
    c = cie()
    insns = b"\x0a" + b"\x41\x0e\x10\x86\x02" + b"\x41\x0b" + b"\x41\xc6\xd0"  # ...; restore rbp, r16
    f = _one(c + fde(len(c), 0, struct.pack("<ii", 0, 8), insns))
    rows = _tuples(f.get_decoded())
    assert rows[2] == {"pc": rows[0]["pc"] + 2, "cfa": ("cfa", 7, 8, None), 16: ("rule", "OFFSET", -8)}
    assert 6 not in rows[3] and rows[3][16] == ("rule", "OFFSET", -8)


# ------------------------------------------------------------------------------ corrupt input


def test_truncated_sections_are_typed():
    c = cie()
    section = c + fde(len(c), 0, struct.pack("<ii", 0, 8), PROLOGUE)
    for n in range(1, len(section)):
        if n == len(c):
            assert [type(e) for e in parse_eh_frame(section[:n], BASE)] == [CIE]
            continue
        with pytest.raises(EhFrameError):
            parse_eh_frame(section[:n], BASE)


def test_a_bad_cie_pointer_is_typed():
    """The pointer (back from its own field) to an FDE, before the section, or into a CIE."""
    c = cie()
    good = fde(len(c), 0, struct.pack("<ii", 0, 8))
    field = len(c) + len(good) + 4  # the second FDE's CIE pointer
    for target, match in ((len(c), "which is not a CIE"), (-100, "outside the section"),
                          (2, "cannot hold|not a CIE|runs past")):
        bad = good[:4] + struct.pack("<I", field - target) + good[8:]
        with pytest.raises(EhFrameError, match=match):
            parse_eh_frame(c + good + bad, BASE)


def test_an_unknown_opcode_is_typed_when_the_fde_is_decoded():
    c = cie()
    f = _one(c + fde(len(c), 0, struct.pack("<ii", 0, 8), b"\x41\x3f"))  # 0x3f: no DW_CFA
    with pytest.raises(EhFrameError, match="unknown CFA opcode 0x3f"):
        f.get_decoded()
    # restore_state with nothing remembered; instructions cut short by their entry's end
    for insns in (b"\x0b", b"\x0c\x07\x88", b"\x0f\x05\x77", b"\x03\x01", b"\x01\x00\x00"):
        g = _one(c + fde(len(c), 0, struct.pack("<ii", 0, 8), insns, pad=False))
        with pytest.raises(EhFrameError):
            g.get_decoded()


def test_an_undecodable_fde_is_corrupt_cfi_in_the_table(tmp_path):
    """A bad opcode in one FDE of a real binary: that FDE's lookups raise CorruptCFI (typed), the
    others still answer."""
    path = program("callchain", "host", Variant(static=False)).path
    raw = bytearray(Path(path).read_bytes())
    elf, sec = _sections(bytes(raw))
    fdes = [e for e in parse_eh_frame(sec.data(), sec["sh_addr"]) if isinstance(e, FDE) and e._end > e._insns]
    victim, other = fdes[-1], fdes[0]
    raw[sec["sh_offset"] + victim._insns] = 0x3F
    table = CFITable(ElfImage("patched", bytes(raw)))
    assert table.error is None
    with pytest.raises(CorruptCFI, match="unknown CFA opcode"):
        table.rule_for_link(victim["initial_location"])
    assert table.row_for(other["initial_location"]) is not None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6),
       cut=st.integers(0, 10**6))
def test_random_corruption_is_typed_or_decodes(flips, cut):
    c = cie(aug=b"zPLR", data=b"\x9b\0\0\0\0\x1b\x1b")
    section = bytearray(c + fde(len(c), 0, struct.pack("<ii", 0, 8), PROLOGUE + b"\x0a\x2e\x08\x0b",
                                aug=b"\0\0\0\0") + cie(b"\x0c\x07\x08") + b"\0\0\0\0")
    for at, value in flips:
        section[at % len(section)] = value
    section = section[:len(section) - cut % 8]
    try:
        entries = parse_eh_frame(bytes(section), BASE)
        for e in entries:
            e.get_decoded()
            if isinstance(e, FDE):
                e.lsda_pointer  # noqa: B018
    except EhFrameError:
        pass
