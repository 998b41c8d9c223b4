"""SFrame decoding against pinned real sections and their objdump text, plus hand-made corruptions.

The PINNED table holds .sframe sections written by each Debian toolchain and the text that same
toolchain's ``objdump --sframe`` printed for them, verbatim (tests/support/sframe_pinned.py;
tests/unit/sframe/test_elf_toolchains.py rebuilds them and re-runs the tools live).  They run
everywhere, without the toolchain roots.
"""

from __future__ import annotations

import pytest

from harness.report.sframe import objdump_sframe
from harness.rule import SAME, UNDEFINED, FrameRule, ValueRule, apply_rule
from harness.sframe import SFrameError, SFrameSection, SFrameTable
from harness.sframe import format as F
from harness.sframe.encode import FDEData, FREData, ctrl_word, encode_section
from tests.support.sframe_pinned import PINNED


def section(name: str) -> SFrameSection:
    p = PINNED[name]
    return SFrameSection.parse(p.data, p.vaddr)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_pinned_section_matches_objdump(name):
    """Decoded and printed in objdump's layout (what ``harness sframe dump`` prints), byte for byte."""
    p = PINNED[name]
    sec = SFrameSection.parse(p.data, p.vaddr).decode_all()
    assert objdump_sframe(SFrameTable(sec, p.file), p.file) == p.objdump


def test_v1_fde_is_17_bytes_and_start_is_section_relative():
    sec = section("v1")
    h = sec.header
    assert (h.version, h.fde_size, h.fres_off) == (1, 17, 6 * 17)
    raw = int.from_bytes(PINNED["v1"].data[28:32], "little", signed=True)
    assert raw == -0x1168 and sec.fdes[0].func_start == 0x2188 + raw == 0x1020


def test_v2_without_pcrel_is_section_relative_not_fde_relative():
    sec = section("v2")
    assert not sec.header.pcrel
    raw = int.from_bytes(PINNED["v2"].data[48:52], "little", signed=True)  # FDE 1 at byte 28 + 20
    assert sec.fdes[1].func_start == 0x2188 + raw == 0x1030  # not 0x2188 + 48 + raw


def test_v3_start_is_relative_to_the_field():
    sec = section("v3")
    assert sec.header.flags == F.F_FDE_SORTED | F.F_FDE_FUNC_START_PCREL
    raw = int.from_bytes(PINNED["v3"].data[28:36], "little", signed=True)
    assert sec.fdes[0].func_start == 0x2198 + 28 + raw == 0x1020
    fde = sec.fdes[0]
    assert fde.attr_offset == sec.header.fres_start + fde.fres_off and fde.fres_start == fde.attr_offset + 5


FP_FRAME = FrameRule(ValueRule("fp", 16), ValueRule("cfa", -8, True), ValueRule("cfa", -16, True))
ENTRY = FrameRule(ValueRule("sp", 8), ValueRule("cfa", -8, True), ValueRule(SAME))


@pytest.mark.parametrize("name", ["v1", "v2", "v3"])
def test_rule_for_in_a_frame_pointer_function(name):
    sec = section(name)
    c = sec.find_fde(0x11fe) if name != "v3" else sec.find_fde(0x11dc)  # b(): 11 bytes
    start = c.func_start
    assert sec.rule_for(start) == ENTRY
    assert sec.rule_for(start + 1) == FrameRule(ValueRule("sp", 16), ValueRule("cfa", -8, True),
                                                ValueRule("cfa", -16, True))
    assert sec.rule_for(start + 4) == FP_FRAME
    assert sec.rule_for(start + 9) == FP_FRAME
    assert sec.rule_for(start + 10) == FrameRule(ValueRule("sp", 8), ValueRule("cfa", -8, True),
                                                 ValueRule("cfa", -16, True))
    assert sec.find_fre(start + 10).fre.start == 10


@pytest.mark.parametrize("name", ["v1", "v2", "v3"])
def test_pcmask_plt_lookup_repeats_every_16_bytes(name):
    sec = section(name)
    plt = sec.find_fde(0x1030)
    assert plt.pcmask and plt.rep_size == 16 and plt.func_size == 64
    for entry in range(4):
        base = 0x1030 + 16 * entry
        assert sec.rule_for(base).cfa == ValueRule("sp", 8)
        assert sec.rule_for(base + 10).cfa == ValueRule("sp", 8)
        assert sec.rule_for(base + 11).cfa == ValueRule("sp", 16)
        assert sec.rule_for(base + 15).cfa == ValueRule("sp", 16)


@pytest.mark.parametrize("name", ["v1", "v2", "v3", "v3odd"])
def test_no_rule_outside_every_fde(name):
    sec = section(name)
    assert sec.rule_for(0) is None and sec.find_fre(0) is None
    last = max(sec.fdes, key=lambda f: f.func_end)
    assert sec.rule_for(last.func_end) is None
    assert sec.rule_for(last.func_end - 1) is not None
    covered = set()
    for fde in sec.fdes:
        covered.update(range(fde.func_start, fde.func_end))
    for pc in range(0x1000, last.func_end + 16):
        assert (sec.find_fde(pc) is not None) == (pc in covered), hex(pc)


def test_v3_flex_fde_rules():
    sec = section("v3odd")
    flex = sec.find_fde(0x132f)
    assert flex.flex and not flex.signal_frame and flex.fde_type == F.FDE_TYPE_FLEX
    fres = sec.fres(flex)
    assert fres[2].ra_padding and fres[2].ra is None
    assert fres[2].datawords == (ctrl_word(10), 0, 0, ctrl_word(6, deref=True), 0)
    ra = ValueRule("cfa", -8, True)
    assert sec.rule_for(0x1334) == FrameRule(ValueRule("r10", 0), ra, ValueRule(SAME))
    assert sec.rule_for(0x1340) == FrameRule(ValueRule("r10", 0), ra, ValueRule("fp", 0, True))
    assert sec.rule_for(0x1344) == FrameRule(ValueRule("fp", -16, True), ra, ValueRule("fp", 0, True))
    assert sec.rule_for(0x13c5) == FrameRule(ValueRule("sp", 8), ra, ValueRule("fp", 0, True))
    # apply it: CFA = *(rbp - 16), fp' = *rbp, ra = *(CFA - 8)
    mem = {0x7000 - 16: 0x8000, 0x7000: 0x7100, 0x8000 - 8: 0x401234, 0x7FF0 - 8: 0x401000}
    assert apply_rule(sec.rule_for(0x1350), sp=0x6000, fp=0x7000, read_word=mem.__getitem__) == \
        (0x8000, 0x401234, 0x7100)
    # r10 is only known in the topmost frame
    assert apply_rule(sec.rule_for(0x1334), 0x6000, 0x7000, mem.__getitem__, {"r10": 0x7ff0})[0] == 0x7ff0


def test_v3_signal_frame_and_outermost():
    sec = section("v3odd")
    sig = sec.find_fde(0x1200)
    assert sig.signal_frame and not sig.flex
    assert sec.rule_for(0x1201).signal_frame
    outer = sec.find_fde(0x1206)
    first, second = sec.fres(outer)
    assert not first.ra_undefined and second.ra_undefined and second.datawords == ()
    rule = sec.rule_for(0x1207)
    assert rule.cfa.base == UNDEFINED and rule.ra.base == UNDEFINED
    assert apply_rule(rule, sp=0x1000, fp=0x2000, read_word=lambda a: pytest.fail("no read")) == \
        (0x1000, None, 0x2000)


def test_trailing_bytes_past_the_fre_subsection_are_ignored():
    p = PINNED["v3"]
    longer = SFrameSection.parse(p.data + bytes(0x3a), p.vaddr)  # the PT_GNU_SFRAME size ld writes
    assert longer.header.end == len(p.data)
    assert [f.func_start for f in longer.fdes] == [f.func_start for f in section("v3").fdes]


def test_from_bytes_at_places_the_section():
    p = PINNED["v3"]
    t = SFrameTable.from_bytes_at(p.data, p.vaddr + 0x7F0000000000)
    assert t.fdes[0].func_start == 0x7F0000001020
    assert t.rule_for(0x7F0000001020) is not None and t.rule_for(0x1020) is None


def test_rule_for_is_amd64_only():
    data = encode_section([FDEData(0x1000, 16, [FREData(0, [16])])], abi=F.ABI_AARCH64_ENDIAN_BIG, fixed_ra=0)
    sec = SFrameSection.parse(data, 0)
    assert sec.header.byte_order == ">" and sec.fres(sec.fdes[0])[0].cfa.offset == 16
    with pytest.raises(SFrameError) as e:
        sec.rule_for(0x1000)
    assert e.value.field == "abi_arch"


# --------------------------------------------------------------------------- corruptions

def _patch(data: bytes, off: int, new: bytes) -> bytes:
    return data[:off] + new + data[off + len(new):]


V3 = PINNED["v3"].data
V2 = PINNED["v2"].data
V1 = PINNED["v1"].data
HDR = 28


CORRUPTIONS = [
    ("empty", b"", "preamble", 0),
    ("bad magic", _patch(V3, 0, b"\x12\x34"), "magic", 0),
    ("unknown version", _patch(V3, 2, b"\x04"), "version", 2),
    ("truncated header", V3[:20], "header", 20),
    ("V3 frame-pointer flag", _patch(V3, 3, b"\x07"), "flags", 3),
    ("unknown flag", _patch(V2, 3, b"\x09"), "flags", 3),
    ("unknown ABI", _patch(V3, 4, b"\x09"), "abi_arch", 4),
    ("big-endian ABI in a little-endian section", _patch(V3, 4, b"\x01"), "abi_arch", 4),
    ("auxhdr past the end", _patch(V3, 7, b"\xff"), "auxhdr_len", 7),
    ("FDEs overlap FREs", _patch(V3, 8, (100).to_bytes(4, "little")), "num_fdes", 8),
    ("fre_len past the end", _patch(V3, 0x10, (0x1000).to_bytes(4, "little")), "fre_len", 0x10),
    ("fres_off past the end", _patch(V3, 0x18, (0x10000).to_bytes(4, "little")), "fres_off", 0x18),
    ("fdes_off after fres_off", _patch(V3, 0x14, (0x200).to_bytes(4, "little")), "fdes_off", 0x14),
    ("header FRE count", _patch(V3, 0xC, (26).to_bytes(4, "little")), "num_fres", 0xC),
    ("truncated FRE data", V3[:-3], "fre_len", 0x10),
    ("V3 attr record past the FREs", _patch(V3, HDR + 12, (0x7C).to_bytes(4, "little")), "fde.fres_off", HDR + 12),
    ("V2 FRE offset past the FREs", _patch(V2, HDR + 8, (0x100).to_bytes(4, "little")), "fde.fres_off", HDR + 8),
    ("unknown FRE type", _patch(V2, HDR + 16, b"\x03"), "fde.info", HDR + 16),
    ("PCMASK with rep_size 0", _patch(V2, HDR + 20 + 17, b"\x00"), "fde.rep_size", HDR + 20 + 17),
    ("FRE count beyond the section", _patch(V1, HDR + 12, (0x1000).to_bytes(4, "little")), "fde.num_fres",
     HDR + 12),
    ("unsorted FDEs", _patch(V2, HDR + 20, (-0x2000).to_bytes(4, "little", signed=True)), "fde.func_start",
     HDR + 20),
]


@pytest.mark.parametrize("data,field,offset", [c[1:] for c in CORRUPTIONS], ids=[c[0] for c in CORRUPTIONS])
def test_corruption_names_field_and_offset(data, field, offset):
    with pytest.raises(SFrameError) as e:
        SFrameSection.parse(data, 0x2000).decode_all()
    assert (e.value.field, e.value.offset) == (field, offset), str(e.value)
    assert isinstance(e.value, ValueError)


def _fre_corruption(name: str, fde_idx: int, mutate) -> tuple[bytes, SFrameSection]:
    p = PINNED[name]
    sec = SFrameSection.parse(p.data, p.vaddr)
    fde = sec.fdes[fde_idx]
    return mutate(p.data, fde), fde


def test_fres_out_of_order():
    # v2 FDE 3 (a()): FREs at 0, 10, 13, ...; make the second start at 0
    data, fde = _fre_corruption("v2", 3, lambda d, fde: _patch(d, fde.fres_start + 3, b"\x00"))
    with pytest.raises(SFrameError) as e:
        SFrameSection.parse(data, 0x2188).decode_all()
    assert (e.value.field, e.value.offset) == ("fre.start", fde.fres_start + 3)


def test_fre_start_past_function_end():
    sec = section("v3")
    fde = sec.fdes[4]
    last = sec.fres(fde)[-1]  # starts at 10 of 11 bytes
    data = _patch(PINNED["v3"].data, last.offset, b"\x0c")
    with pytest.raises(SFrameError) as e:
        SFrameSection.parse(data, 0x2198).decode_all()
    assert (e.value.field, e.value.offset) == ("fre.start", last.offset)


@pytest.mark.parametrize("info,what", [(0x63, "size code 3"), (0x0B, "5 data words")])
def test_invalid_fre_info(info, what):
    data, fde = _fre_corruption("v3", 4, lambda d, fde: _patch(d, fde.fres_start + 1, bytes([info])))
    with pytest.raises(SFrameError) as e:
        SFrameSection.parse(data, 0x2198).decode_all()
    assert (e.value.field, e.value.offset) == ("fre.info", fde.fres_start + 1), what


def test_lazy_decoding_reports_at_first_lookup():
    data, fde = _fre_corruption("v3", 4, lambda d, fde: _patch(d, fde.fres_start + 1, b"\x63"))
    sec = SFrameSection.parse(data, 0x2198)  # FDEs are fine
    assert sec.rule_for(0x1020) is not None
    with pytest.raises(SFrameError):
        sec.rule_for(fde.func_start)


def test_flex_errors():
    def one(words):
        return encode_section([FDEData(0x1000, 16, [FREData(0, words)], flex=True)])

    with pytest.raises(SFrameError, match="control word and an offset"):
        SFrameSection.parse(one([ctrl_word(7)]), 0).decode_all()
    with pytest.raises(SFrameError, match="without its offset") as e:
        SFrameSection.parse(one([ctrl_word(7), 8, ctrl_word(6, deref=True)]), 0).decode_all()
    assert e.value.field == "fre.datawords"
    with pytest.raises(SFrameError, match="left over"):
        SFrameSection.parse(one([ctrl_word(7), 8, 0, ctrl_word(6), 0, 5]), 0).decode_all()
    with pytest.raises(SFrameError, match="based on itself") as e:
        SFrameSection.parse(one([ctrl_word(0, reg_p=False), 8]), 0).rule_for(0x1000)
    assert e.value.field == "fre.cfa"
    # RA padding then the FP pair; FP padding alone; RA in a register
    sec = SFrameSection.parse(one([ctrl_word(7), 8, ctrl_word(16), 0, ctrl_word(6, deref=True), -16]), 0)
    assert sec.rule_for(0x1000) == FrameRule(ValueRule("sp", 8), ValueRule("r16", 0), ValueRule("fp", -16, True))
    sec = SFrameSection.parse(one([ctrl_word(7), 8, 0, 0]), 0)
    fre = sec.fres(sec.fdes[0])[0]
    assert fre.ra_padding and fre.fp_padding and sec.rule_for(0x1000).fp == ValueRule(SAME)


def test_v1_fre_without_data_words_is_corrupt():
    data = encode_section([FDEData(0x1000, 16, [FREData(0, [])])], version=1)
    with pytest.raises(SFrameError) as e:
        SFrameSection.parse(data, 0).decode_all()
    assert e.value.field == "fre.info"
    assert SFrameSection.parse(encode_section([FDEData(0x1000, 16, [FREData(0, [])])], version=2), 0) \
        .rule_for(0x1000).ra == ValueRule(UNDEFINED)


def test_unsorted_without_the_flag_is_sorted_for_lookup():
    fdes = [FDEData(0x2000, 16, [FREData(0, [8])]), FDEData(0x1000, 16, [FREData(0, [16])])]
    sec = SFrameSection.parse(encode_section(fdes, flags=F.F_FDE_FUNC_START_PCREL), 0)
    assert [f.func_start for f in sec.fdes] == [0x2000, 0x1000]
    assert sec.rule_for(0x1008).cfa == ValueRule("sp", 16) and sec.rule_for(0x2008).cfa == ValueRule("sp", 8)
    with pytest.raises(SFrameError):
        SFrameSection.parse(encode_section(fdes), 0)


def test_error_message_names_field_and_offset():
    e = SFrameError("boom", field="fde.info", offset=0x2c)
    assert str(e) == "fde.info at byte 0x2c: boom" and e.field == "fde.info" and e.offset == 0x2C


def test_layering_no_processes_or_sockets():
    """harness/sframe is pure: it never imports subprocess or socket (tests may)."""
    import ast
    from pathlib import Path

    import harness.sframe

    for path in Path(harness.sframe.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert name.split(".")[0] not in ("subprocess", "socket"), f"{path.name} imports {name}"
