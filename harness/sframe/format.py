"""SFrame binary layouts and bit fields, each declared once beside the specification it implements.

Sources (read for this module; the section names are those of the SFrame specification,
``libsframe/doc/sframe-spec.texi``, and the C names those of binutils ``include/sframe.h``):

* V1 -- binutils 2.40 (``as --gsframe`` on Debian 12).  Spec "Version 1".
* V2 -- binutils 2.41-2.45.  Spec "Version 2" and "Version 2 (Errata 1)" (2.45: the
  ``SFRAME_F_FDE_FUNC_START_PCREL`` flag).
* V3 -- binutils 2.46+.  Spec "Version 3" (February 2026): the FDE split into an index entry
  and an attribute record, FDE types (default / flexible), PC types (INC / MASK).

All multi-byte fields are in the target's byte order; the magic number tells which
(``0xdee2`` read little-endian means a little-endian section).  Every structure is packed.
"""

from __future__ import annotations

import struct

# --- Spec 2.1 "SFrame Preamble" -------------------------------------------------------------
SFRAME_MAGIC = 0xDEE2

# Spec 2.1.2 "SFrame Version"
SFRAME_VERSION_1 = 1
SFRAME_VERSION_2 = 2
SFRAME_VERSION_3 = 3
VERSIONS = (SFRAME_VERSION_1, SFRAME_VERSION_2, SFRAME_VERSION_3)

# Spec 2.1.3 "SFrame Flags"
F_FDE_SORTED = 0x1
F_FRAME_POINTER = 0x2  # V1, V2 only: removed from V3 (SFRAME_V3_F_ALL_FLAGS lacks it)
F_FDE_FUNC_START_PCREL = 0x4  # V2 errata 1 (binutils 2.45) and V3
FLAG_NAMES = {
    F_FDE_SORTED: "SFRAME_F_FDE_SORTED",
    F_FRAME_POINTER: "SFRAME_F_FRAME_POINTER",
    F_FDE_FUNC_START_PCREL: "SFRAME_F_FDE_FUNC_START_PCREL",
}
# Flags a section of each version may carry (libsframe sframe_header_sanity_check_p).
# binutils 2.40 defined only SORTED and FRAME_POINTER for V1.
VALID_FLAGS = {
    SFRAME_VERSION_1: F_FDE_SORTED | F_FRAME_POINTER,
    SFRAME_VERSION_2: F_FDE_SORTED | F_FRAME_POINTER | F_FDE_FUNC_START_PCREL,
    SFRAME_VERSION_3: F_FDE_SORTED | F_FDE_FUNC_START_PCREL,
}

# --- Spec 2.2.1 "SFrame ABI/arch Identifier" ------------------------------------------------
ABI_AARCH64_ENDIAN_BIG = 1
ABI_AARCH64_ENDIAN_LITTLE = 2
ABI_AMD64_ENDIAN_LITTLE = 3
ABI_S390X_ENDIAN_BIG = 4
# struct byte-order prefix of each ABI
ABI_BYTE_ORDER = {
    ABI_AARCH64_ENDIAN_BIG: ">",
    ABI_AARCH64_ENDIAN_LITTLE: "<",
    ABI_AMD64_ENDIAN_LITTLE: "<",
    ABI_S390X_ENDIAN_BIG: ">",
}
ABI_NAMES = {
    ABI_AARCH64_ENDIAN_BIG: "aarch64-be",
    ABI_AARCH64_ENDIAN_LITTLE: "aarch64-le",
    ABI_AMD64_ENDIAN_LITTLE: "amd64",
    ABI_S390X_ENDIAN_BIG: "s390x",
}

# SFRAME_CFA_FIXED_FP_INVALID / SFRAME_CFA_FIXED_RA_INVALID: "not fixed, FREs carry it"
CFA_FIXED_OFFSET_INVALID = 0

# The ABIs each version defines: s390x came as an erratum to V2 (spec "Changes from Version 1 to
# Version 2", Errata 1); binutils 2.40's V1 knew AArch64 and AMD64 only.
ABIS_OF_VERSION = {
    SFRAME_VERSION_1: (ABI_AARCH64_ENDIAN_BIG, ABI_AARCH64_ENDIAN_LITTLE, ABI_AMD64_ENDIAN_LITTLE),
    SFRAME_VERSION_2: tuple(ABI_BYTE_ORDER),
    SFRAME_VERSION_3: tuple(ABI_BYTE_ORDER),
}

# --- s390x (include/sframe.h, spec "s390x" in "ABI/arch-specific Definition") ----------------
# The CFA offset from its base register is at least 160 (the register save area) and a multiple
# of 8: gas stores it adjusted by -160 and divided by 8 so it fits one byte
# (SFRAME_V2_S390X_CFA_OFFSET_ENCODE); SFRAME_V2_S390X_CFA_OFFSET_DECODE (V3: ..._V3_...) undoes it.
# libsframe's sframe_fre_get_cfa_offset decodes it in default and flexible FDEs alike.
S390X_SP_VAL_OFFSET = -160
S390X_CFA_OFFSET_ADJUSTMENT = S390X_SP_VAL_OFFSET
S390X_CFA_OFFSET_ALIGNMENT_FACTOR = 8


def s390x_cfa_offset_decode(stored: int) -> int:
    return stored * S390X_CFA_OFFSET_ALIGNMENT_FACTOR - S390X_CFA_OFFSET_ADJUSTMENT


# V2 only: an RA or FP offset with its least significant bit set is a DWARF register number
# shifted left by one (SFRAME_V2_S390X_OFFSET_IS_REGNUM / _DECODE_REGNUM): the value lives in that
# register (a leaf function's RA in a floating-point register, say).  V3 drops this encoding
# (libsframe's sframe_s390x_offset_regnum_p is false for V3): registers go in flexible FDEs.


def s390x_v2_offset_is_regnum(stored: int) -> bool:
    return bool(stored & 1)


def s390x_v2_offset_regnum(stored: int) -> int:
    return stored >> 1


# SFRAME_FRE_RA_OFFSET_INVALID: an RA offset of 0 is padding, there so that the FP offset can
# follow while the RA is not saved (s390x); objdump prints it "U".
FRE_RA_OFFSET_INVALID = 0

# --- Spec 2.2 "SFrame Header" (identical in V1, V2 and V3) ----------------------------------
# u16 magic; u8 version; u8 flags; u8 abi_arch; s8 cfa_fixed_fp_offset; s8 cfa_fixed_ra_offset;
# u8 auxhdr_len; u32 num_fdes; u32 num_fres; u32 fre_len; u32 fdes_off; u32 fres_off.
# The two sub-section offsets count from the END of the header, auxiliary header included.
HEADER_FORMAT = "HBBBbbBIIIII"
HEADER_SIZE = 28

# --- Spec (V1) "SFrame FDE": 17 bytes --------------------------------------------------------
# s32 func_start_address; u32 func_size; u32 func_start_fre_off; u32 func_num_fres; u8 func_info.
# V1 has no rep_size and no padding (spec "Changes from Version 1 to Version 2": "a fixed size of
# 20 bytes instead of its size of 17 bytes in SFrame format version 1").
FDE_V1_FORMAT = "iIIIB"
FDE_V1_SIZE = 17

# --- Spec (V2) 2.3 "SFrame FDE": 20 bytes ----------------------------------------------------
# s32 func_start_address; u32 func_size; u32 func_start_fre_off; u32 func_num_fres;
# u8 func_info; u8 func_rep_size; u16 padding.
FDE_V2_FORMAT = "iIIIBBH"
FDE_V2_SIZE = 20

# --- Spec (V3) "SFrame FDE": index entry (16 bytes) + attribute record (5 bytes) -------------
# sframe_func_desc_idx_v3: s64 sfdi_func_start_offset; u32 sfdi_func_size;
#                          u32 sfdi_func_start_fre_off.
FDE_V3_INDEX_FORMAT = "qII"
FDE_V3_INDEX_SIZE = 16
# sframe_func_desc_attr_v3, at the start of the function's data in the FRE sub-section (at
# sfdi_func_start_fre_off), followed by its FREs: u16 num_fres; u8 info; u8 info2; u8 rep_size.
FDE_V3_ATTR_FORMAT = "HBBB"
FDE_V3_ATTR_SIZE = 5

# Where the function start field sits inside an FDE (offsetof(..., sfde_func_start_address)).
FDE_FUNC_START_FIELD_OFFSET = 0

# --- FDE info byte (all versions; V3: sfda_func_info) ----------------------------------------
#   bits 0-3 FRE type; bit 4 PC type (V1/V2 "FDE type") PCINC/PCMASK; bit 5 aarch64 pauth key;
#   bit 6 unused; bit 7 (V3 only) signal frame.
FRE_TYPE_ADDR1 = 0
FRE_TYPE_ADDR2 = 1
FRE_TYPE_ADDR4 = 2
FRE_START_ADDR_SIZE = {FRE_TYPE_ADDR1: 1, FRE_TYPE_ADDR2: 2, FRE_TYPE_ADDR4: 4}
FRE_START_ADDR_FORMAT = {1: "B", 2: "H", 4: "I"}  # unsigned offsets from the function start

PCTYPE_INC = 0  # SFRAME_FDE_TYPE_PCINC / SFRAME_V3_FDE_PCTYPE_INC: match pc >= fre_start
PCTYPE_MASK = 1  # SFRAME_FDE_TYPE_PCMASK / ..._PCTYPE_MASK: match pc % rep_size >= fre_start


def fde_info_fre_type(info: int) -> int:
    return info & 0xF


def fde_info_pc_type(info: int) -> int:
    return (info >> 4) & 0x1


def fde_info_pauth_key(info: int) -> int:
    return (info >> 5) & 0x1


def fde_info_signal_p(info: int) -> bool:
    """SFRAME_V3_FDE_SIGNAL_P; bit 7 is unused (zero) in V1 and V2."""
    return bool((info >> 7) & 0x1)


# --- V3 info2 byte: ABI/arch-independent FDE type --------------------------------------------
# The released header masks 5 bits (SFRAME_V3_FDE_TYPE_MASK 0x1f); a pre-release draft masked 4.
# Only 0 and 1 are defined, so the two agree on every valid section.
FDE_TYPE_MASK = 0x1F
FDE_TYPE_DEFAULT = 0
FDE_TYPE_FLEX = 1  # SFRAME_FDE_TYPE_FLEX (draft name SFRAME_FDE_TYPE_FLEX_TOPMOST_FRAME)


def fde_info2_fde_type(info2: int) -> int:
    return info2 & FDE_TYPE_MASK


# In V1 a PCMASK FDE has no rep_size field.  binutils 2.40 libsframe (sframe_find_fre) compared
# the low byte of pc and of func_start+fre_start instead, which is only right by accident; the
# PLT entries that V1 describes with PCMASK are 16 bytes on AMD64, the block size V2 spells out.
V1_IMPLICIT_REP_SIZE = 16

# --- Spec "SFrame FRE": start address (1/2/4 bytes), info byte, data words -------------------
#   info bits: 0 CFA base register (FP = 0, SP = 1); 1-4 number of data words; 5-6 data word
#   size (0: 1 byte, 1: 2 bytes, 2: 4 bytes; 3 is invalid); 7 aarch64 mangled RA.
BASE_REG_FP = 0
BASE_REG_SP = 1
DATAWORD_SIZE = {0: 1, 1: 2, 2: 4}
DATAWORD_SIGNED_FORMAT = {1: "b", 2: "h", 4: "i"}
DATAWORD_UNSIGNED_FORMAT = {1: "B", 2: "H", 4: "I"}
# Default FDEs: CFA, then RA (only where the header does not fix it), then FP (likewise).
MAX_DEFAULT_DATAWORDS = 3
# Flexible FDEs: a (control word, offset) pair, or one zero padding word, per CFA, RA, FP.
MAX_FLEX_DATAWORDS = 6


def fre_info_base_reg(info: int) -> int:
    return info & 0x1


def fre_info_dataword_count(info: int) -> int:
    return (info >> 1) & 0xF


def fre_info_dataword_size_code(info: int) -> int:
    return (info >> 5) & 0x3


def fre_info_mangled_ra_p(info: int) -> bool:
    return bool((info >> 7) & 0x1)


# --- Spec (V3) "Flexible FDE Type Interpretation": the control data word ---------------------
#   bit 0 reg_p (1: base is DWARF register regnum; 0: base is the CFA), bit 1 deref_p (value is
#   the word at base + offset), bit 2 reserved (0), bits 3 and up: DWARF register number
#   (SFRAME_V3_FLEX_FDE_CTRLWORD_REGNUM is ``data >> 3``; a draft masked it to 5 bits).
# A control word of 0 with no offset word after it is padding: "this entity is not described
# here" (e.g. RA at its fixed place while the FP rule follows).


def ctrl_reg_p(word: int) -> bool:
    return bool(word & 0x1)


def ctrl_deref_p(word: int) -> bool:
    return bool((word >> 1) & 0x1)


def ctrl_regnum(word: int) -> int:
    return word >> 3


# DWARF register numbers of the AMD64 psABI that the harness names specially.
DWARF_AMD64_RBP = 6
DWARF_AMD64_RSP = 7


def dwarf_reg_name(abi_arch: int, regnum: int) -> str:
    """The register base name a FrameRule uses: "fp"/"sp" for the frame and stack pointer, else rN."""
    if abi_arch == ABI_AMD64_ENDIAN_LITTLE:
        if regnum == DWARF_AMD64_RBP:
            return "fp"
        if regnum == DWARF_AMD64_RSP:
            return "sp"
    elif abi_arch in (ABI_AARCH64_ENDIAN_BIG, ABI_AARCH64_ENDIAN_LITTLE):
        if regnum == 29:
            return "fp"
        if regnum == 31:
            return "sp"
    elif abi_arch == ABI_S390X_ENDIAN_BIG:
        if regnum == 11:
            return "fp"
        if regnum == 15:
            return "sp"
    return f"r{regnum}"


class Layouts:
    """Every struct of one byte order, compiled once."""

    __slots__ = ("order", "header", "fde_v1", "fde_v2", "fde_v3_index", "fde_v3_attr",
                 "start_addr", "dataword_signed", "dataword_unsigned")

    def __init__(self, order: str) -> None:
        self.order = order
        self.header = struct.Struct(order + HEADER_FORMAT)
        self.fde_v1 = struct.Struct(order + FDE_V1_FORMAT)
        self.fde_v2 = struct.Struct(order + FDE_V2_FORMAT)
        self.fde_v3_index = struct.Struct(order + FDE_V3_INDEX_FORMAT)
        self.fde_v3_attr = struct.Struct(order + FDE_V3_ATTR_FORMAT)
        self.start_addr = {n: struct.Struct(order + f) for n, f in FRE_START_ADDR_FORMAT.items()}
        self.dataword_signed = {n: struct.Struct(order + f) for n, f in DATAWORD_SIGNED_FORMAT.items()}
        self.dataword_unsigned = {n: struct.Struct(order + f) for n, f in DATAWORD_UNSIGNED_FORMAT.items()}


LITTLE = Layouts("<")
BIG = Layouts(">")

assert LITTLE.header.size == HEADER_SIZE
assert LITTLE.fde_v1.size == FDE_V1_SIZE
assert LITTLE.fde_v2.size == FDE_V2_SIZE
assert LITTLE.fde_v3_index.size == FDE_V3_INDEX_SIZE
assert LITTLE.fde_v3_attr.size == FDE_V3_ATTR_SIZE
