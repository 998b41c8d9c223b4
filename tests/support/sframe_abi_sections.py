"""SFrame sections of the other ABIs (aarch64 LE/BE, s390x), written byte by byte as gas writes them,
and a minimal ELF file around one (what ``objdump --sframe`` needs to dump it).

The data words are given as stored, encoded with the formulas of binutils' include/sframe.h (not
with the harness's decoder): s390x CFA offsets ``(offset - 160) / 8``
(SFRAME_V2_S390X_CFA_OFFSET_ENCODE), V2 register numbers ``(regnum << 1) | 1``
(SFRAME_V2_S390X_OFFSET_ENCODE_REGNUM), RA padding 0 (SFRAME_FRE_RA_OFFSET_INVALID), flexible
control words ``regnum << 3 | deref << 1 | reg_p``.  The rows follow binutils' own tests
(gas/testsuite/gas/cfi-sframe/cfi-sframe-s390x-*.d, cfi-sframe-aarch64-*.d): a prologue that saves
RA and FP, a CFA growing to 320, a leaf keeping RA and FP in floating-point registers
(s390x-fpra-register), FP saved without RA (the padding), the outermost frame.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from harness.sframe import format as F
from harness.sframe.encode import FDEData, FREData, ctrl_word, encode_section

SP, FP = F.BASE_REG_SP, F.BASE_REG_FP


def s390x_cfa(offset: int) -> int:
    """SFRAME_V2_S390X_CFA_OFFSET_ENCODE (the V3 macro is the same)."""
    return (offset - 160) // 8


def s390x_reg(regnum: int) -> int:
    """SFRAME_V2_S390X_OFFSET_ENCODE_REGNUM."""
    return (regnum << 1) | 1


class AbiSection(NamedTuple):
    abi: int
    version: int
    data: bytes
    vaddr: int
    machine: int  # ELF e_machine of the wrapper: EM_S390 22, EM_AARCH64 183


VADDR = 0x1000


def _s390x_fdes(version: int) -> list[FDEData]:
    fdes = [
        # cfi-sframe-s390x-1: stmg %r6,%r15,48(%r15); aghi %r15,-160; ... lmg; br %r14
        FDEData(VADDR, 40, [
            FREData(0, [s390x_cfa(160)]),                      # sp+160, RA and FP in their registers
            FREData(6, [s390x_cfa(160), -48, -72]),            # RA at CFA-48, FP at CFA-72
            FREData(10, [s390x_cfa(320), -48, -72]),           # CFA grew by 160
            FREData(20, [s390x_cfa(320), 0, -72], base_reg=FP),  # FP saved, RA not: padding; CFA fp-based
            FREData(30, [s390x_cfa(160)]),
            FREData(36, []),                                   # RA undefined: the outermost frame
        ]),
    ]
    if version == F.SFRAME_VERSION_2:
        # cfi-sframe-s390x-fpra-register-1 (V2): RA in f0 (DWARF 16), then FP in f1 (17)
        fdes.append(FDEData(VADDR + 0x40, 26, [
            FREData(0, [s390x_cfa(160)]),
            FREData(4, [s390x_cfa(160), s390x_reg(16)]),
            FREData(8, [s390x_cfa(160), s390x_reg(16), s390x_reg(17)]),
            FREData(20, [s390x_cfa(160), s390x_reg(16)]),
            FREData(24, [s390x_cfa(160)]),
        ]))
    else:
        # the same in V3: a flexible FDE, (control word, offset) per CFA, RA, FP
        cfa = [ctrl_word(15), s390x_cfa(160)]
        fdes.append(FDEData(VADDR + 0x40, 26, [
            FREData(0, cfa),
            FREData(4, cfa + [ctrl_word(16), 0]),
            FREData(8, cfa + [ctrl_word(16), 0, ctrl_word(17), 0]),
            FREData(12, cfa + [0, ctrl_word(17), 0]),         # RA padding word, FP in f1
            FREData(20, cfa + [ctrl_word(16), 0]),
            FREData(24, [ctrl_word(11), s390x_cfa(176), ctrl_word(14), 0]),  # CFA from r11, RA in r14
        ], flex=True))
        # an odd stored offset is a plain stack offset in V3 (no register encoding)
        fdes.append(FDEData(VADDR + 0x80, 16, [FREData(0, [s390x_cfa(168), 3, 1])]))
    return fdes


def _aarch64_fdes(version: int) -> list[FDEData]:
    fdes = [
        # cfi-sframe-aarch64-1: stp x29, x30, [sp, -16]!; mov x29, sp; ... ldp; ret
        FDEData(VADDR, 32, [
            FREData(0, [0]),
            FREData(4, [16, -8, -16]),
            FREData(8, [16, -8, -16], base_reg=FP),
            FREData(24, [0]),
        ]),
        # cfi-sframe-aarch64-pac-ab-key-1: paciasp / autiasp around the frame record
        FDEData(VADDR + 0x20, 40, [
            FREData(0, [0]),
            FREData(4, [0], mangled_ra=True),
            FREData(8, [32, -24, -32], mangled_ra=True),
            FREData(36, [0]),
        ]),
        # a PLT-like block (PCMASK) of 16 bytes
        FDEData(VADDR + 0x60, 64, [FREData(0, [0]), FREData(8, [16])], pcmask=True, rep_size=16),
    ]
    if version >= F.SFRAME_VERSION_2:
        fdes[0].fres.append(FREData(28, []))  # RA undefined (V2+)
    return fdes


def sections() -> dict[str, AbiSection]:
    out = {}
    for version in (F.SFRAME_VERSION_2, F.SFRAME_VERSION_3):
        flags = F.F_FDE_SORTED | F.F_FDE_FUNC_START_PCREL
        out[f"s390x-v{version}"] = AbiSection(F.ABI_S390X_ENDIAN_BIG, version, encode_section(
            _s390x_fdes(version), version=version, vaddr=VADDR, flags=flags, abi=F.ABI_S390X_ENDIAN_BIG,
            fixed_fp=0, fixed_ra=0), VADDR, 22)
        for abi, tag in ((F.ABI_AARCH64_ENDIAN_LITTLE, "le"), (F.ABI_AARCH64_ENDIAN_BIG, "be")):
            out[f"aarch64-{tag}-v{version}"] = AbiSection(abi, version, encode_section(
                _aarch64_fdes(version), version=version, vaddr=VADDR, flags=flags, abi=abi, fixed_fp=0,
                fixed_ra=0), VADDR, 183)
    return out


def elf_with_sframe(sec: AbiSection) -> bytes:
    """An ELF64 relocatable file of the section's byte order holding only ``.sframe`` (at
    ``sec.vaddr``) and ``.shstrtab``: objdump reads it as ``elf64-big``/``elf64-little``."""
    order = F.ABI_BYTE_ORDER[sec.abi]
    shstr = b"\0.sframe\0.shstrtab\0"
    off_sframe = 64
    off_shstr = off_sframe + len(sec.data)
    off_sh = (off_shstr + len(shstr) + 7) & ~7
    ident = b"\x7fELF" + bytes([2, 2 if order == ">" else 1, 1, 0]) + b"\0" * 8
    eh = ident + struct.pack(order + "HHIQQQIHHHHHH", 1, sec.machine, 1, 0, 0, off_sh, 0, 64, 0, 0, 64, 3, 2)
    sh = b"\0" * 64
    sh += struct.pack(order + "IIQQQQIIQQ", 1, 0x6FFFFFF4, 2, sec.vaddr, off_sframe, len(sec.data), 0, 0, 8, 0)
    sh += struct.pack(order + "IIQQQQIIQQ", 9, 3, 0, 0, off_shstr, len(shstr), 0, 0, 1, 0)
    body = eh + sec.data + shstr
    return body + b"\0" * (off_sh - len(body)) + sh


SECTION_NAMES = ("s390x-v2", "s390x-v3", "aarch64-le-v2", "aarch64-be-v2", "aarch64-le-v3", "aarch64-be-v3")
