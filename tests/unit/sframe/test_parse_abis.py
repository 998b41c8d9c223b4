"""SFrame of every ABI: aarch64 (little and big endian) and s390x decoded as binutils' libsframe
decodes them, against ``objdump --sframe`` of binutils 2.47.

The sections are written by tests/support/sframe_abi_sections.py with the encoding formulas of
binutils' include/sframe.h.  tests/data/sframe-abi/NAME.objdump is what the sid toolchain's
objdump (binutils 2.47) printed for each, wrapped in a minimal ELF file (captured once, like
tests/unit/sframe/test_parse_pinned.py's texts); ``test_live_objdump_agrees`` re-runs that objdump where the
toolchain root is in the image cache.  Our decoding printed in objdump's layout equals those texts
byte for byte but for the file line, which names x86-64's file format (the one difference,
pinned by its own test).

What differs from AMD64 (include/sframe.h, libsframe sframe.c and sframe-dump.c):

* aarch64 tracks the RA: FREs carry CFA, RA, FP offsets; bit 7 of the FRE info marks a mangled
  (PAC-signed) RA, objdump's ``[s]``;
* s390x stores the CFA offset as ``(offset - 160) / 8`` (SFRAME_V2_S390X_CFA_OFFSET_ENCODE), in
  default and flexible FDEs: ``sp+0`` as stored is ``sp+160``; an RA offset of 0 is padding
  (SFRAME_FRE_RA_OFFSET_INVALID: FP saved, RA not; objdump's ``U``); in V2 an odd RA/FP offset is a
  DWARF register number shifted left by one (the value is in that register, objdump's ``r16``), in
  V3 it is a plain offset and registers go in flexible FDEs; s390x does not exist in V1.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.report.sframe import objdump_sframe
from harness.sframe import Location, SFrameError, SFrameSection, SFrameTable
from harness.sframe import format as F
from harness.sframe.encode import FDEData, FREData, encode_section
from tests.support.gating import require
from tests.support.paths import TEST_DATA
from tests.support.sframe_abi_sections import SECTION_NAMES, elf_with_sframe, s390x_cfa, s390x_reg, sections

DATA = TEST_DATA / "sframe-abi"
SECTIONS = sections()


def decode(name: str) -> SFrameSection:
    sec = SECTIONS[name]
    return SFrameSection.parse(sec.data, sec.vaddr).decode_all()


def file_format(name: str) -> str:
    """objdump's file line for these objects: its generic BFD targets, no ABI named."""
    return f"{name}.o:     file format elf64-{'little' if '-le-' in name else 'big'}"


def printed(name: str) -> list[str]:
    """Our decoding of ``name`` in objdump's layout, what ``harness sframe dump`` prints."""
    return objdump_sframe(SFrameTable(decode(name), f"{name}.o"), f"{name}.o").splitlines(keepends=True)


@pytest.mark.parametrize("name", SECTION_NAMES)
def test_decoding_equals_pinned_objdump(name):
    """Every line objdump printed, byte for byte, but its file line (next test)."""
    theirs = (DATA / f"{name}.objdump").read_text().splitlines(keepends=True)
    ours = printed(name)
    assert theirs[1] == file_format(name) + "\n"
    assert ours[:1] + ours[2:] == theirs[:1] + theirs[2:]


def test_s390x_cfa_offset_is_scaled_and_adjusted():
    for name in ("s390x-v2", "s390x-v3"):
        sec = decode(name)
        fres = sec.fres(sec.fdes[0])
        assert fres[0].datawords[0] == 0 and fres[0].cfa == Location("sp", 160)
        assert fres[2].datawords[0] == 20 and fres[2].cfa == Location("sp", 320)
        assert fres[3].cfa == Location("fp", 320)


def test_s390x_ra_padding_and_saved_registers():
    sec = decode("s390x-v2")
    fres = sec.fres(sec.fdes[0])
    assert fres[1].ra == Location("cfa", -48, True) and fres[1].fp == Location("cfa", -72, True)
    assert fres[3].ra is None and fres[3].ra_padding and fres[3].fp == Location("cfa", -72, True)
    assert fres[5].ra_undefined
    leaf = sec.fres(sec.fdes[1])
    assert leaf[1].ra == Location("r16", 0) and leaf[1].fp is None
    assert leaf[2].ra == Location("r16", 0) and leaf[2].fp == Location("r17", 0)


def test_s390x_v3_has_no_register_encoding_and_flex_cfa_is_adjusted_too():
    sec = decode("s390x-v3")
    odd = sec.fres(sec.fdes[2])[0]
    assert odd.cfa == Location("sp", 168) and odd.ra == Location("cfa", 3, True) and odd.fp == Location("cfa", 1, True)
    flex = sec.fres(sec.fdes[1])
    assert sec.fdes[1].flex
    assert flex[0].cfa == Location("sp", 160)
    assert flex[2].ra == Location("r16", 0) and flex[2].fp == Location("r17", 0)
    assert flex[3].ra is None and flex[3].ra_padding and flex[3].fp == Location("r17", 0)
    assert flex[5].cfa == Location("fp", 176) and flex[5].ra == Location("r14", 0)


@pytest.mark.parametrize("name", ["aarch64-le-v2", "aarch64-be-v2", "aarch64-le-v3", "aarch64-be-v3"])
def test_aarch64_tracks_ra_and_its_signature(name):
    sec = decode(name)
    assert sec.header.byte_order == ("<" if "-le-" in name else ">")
    rec = sec.fres(sec.fdes[0])[1]
    assert rec.cfa == Location("sp", 16)
    assert rec.ra == Location("cfa", -8, True) and rec.fp == Location("cfa", -16, True)
    signed = sec.fres(sec.fdes[1])
    assert not signed[0].mangled_ra and signed[1].mangled_ra and signed[2].ra == Location("cfa", -24, True)
    m = sec.find_fre(0x1060 + 16 * 3 + 9)  # PCMASK: the second row of the fourth 16-byte block
    assert m is not None and m.fre.cfa == Location("sp", 16)


def test_both_byte_orders_decode_alike():
    for v in (2, 3):
        le, be = decode(f"aarch64-le-v{v}"), decode(f"aarch64-be-v{v}")
        assert [[(f.start, f.cfa, f.ra, f.fp, f.mangled_ra) for f in le.fres(d)] for d in le.fdes] == \
               [[(f.start, f.cfa, f.ra, f.fp, f.mangled_ra) for f in be.fres(d)] for d in be.fdes]


@pytest.mark.parametrize("name", SECTION_NAMES)
def test_frame_rules_are_refused_outside_amd64(name):
    sec = decode(name)
    with pytest.raises(SFrameError, match="AMD64 only") as exc:
        sec.rule_for(sec.fdes[0].func_start + 6)
    assert exc.value.field == "abi_arch"


def test_s390x_does_not_exist_in_v1():
    data = encode_section([FDEData(0x1000, 8, [FREData(0, [s390x_cfa(160)])])], version=1, vaddr=0x1000,
                          flags=F.F_FDE_SORTED, abi=F.ABI_S390X_ENDIAN_BIG, fixed_ra=0)
    with pytest.raises(SFrameError, match="not defined in SFrame version 1") as exc:
        SFrameSection.parse(data, 0x1000)
    assert exc.value.field == "abi_arch" and exc.value.offset == 4


def test_s390x_v2_register_encoding_round_trip():
    for regnum in (0, 14, 16, 31, 63):
        assert F.s390x_v2_offset_is_regnum(s390x_reg(regnum)) and F.s390x_v2_offset_regnum(s390x_reg(regnum)) == regnum
    assert F.s390x_cfa_offset_decode(s390x_cfa(160)) == 160 and F.s390x_cfa_offset_decode(-20) == 0


@pytest.mark.parametrize("name", SECTION_NAMES)
def test_live_objdump_agrees(name, tmp_path):
    """binutils 2.47's objdump (the sid toolchain root) on the section wrapped in an ELF file."""
    from harness.images.toolchain import Toolchain, get_toolchain

    try:
        tc = get_toolchain("sid")
    except Exception as exc:  # no cache, no root: the pinned texts above still ran
        tc = exc
    require(isinstance(tc, Toolchain), f"toolchain sid unavailable: {tc}")
    outer, inner = tc.workdir(f"sframe-abi-{name}")
    try:
        (Path(outer) / f"{name}.o").write_bytes(elf_with_sframe(SECTIONS[name]))
        text = tc.run(["objdump", "--sframe", f"{name}.o"], cwd=inner).stdout
    finally:  # the root's /tmp: what is left there is in every later `sframe check --tree` of it
        shutil.rmtree(outer, ignore_errors=True)
    assert text == (DATA / f"{name}.objdump").read_text()  # so the pinned tests above hold live


@pytest.mark.parametrize("name", SECTION_NAMES)
def test_dump_differs_from_objdump_only_in_the_file_format_it_names(name):
    """Where ``harness sframe dump`` differs from objdump on these ABIs: its file line names
    x86-64's file format whatever the ELF header says (harness/report/sframe.py writes
    ``elf64-x86-64``); objdump names the format of the file, here ``elf64-little``/``elf64-big``.
    This is that one line and nothing else; a dump that names the file's format fails here and
    makes this test go."""
    theirs = (DATA / f"{name}.objdump").read_text().splitlines(keepends=True)
    ours = printed(name)
    assert len(ours) == len(theirs)
    diff = [(k, t, o) for k, (t, o) in enumerate(zip(theirs, ours, strict=True)) if t != o]
    assert diff == [(1, file_format(name) + "\n", f"{name}.o:     file format elf64-x86-64\n")]
