"""Writing SFrame sections: synthetic inputs for tests and for synthetic guests.

The inverse of :mod:`.parse` for well-formed input, laid out as gas/ld do: header, FDE table,
FRE sub-section (V3: each function's attribute record, then its FREs).  Data words are given
raw; :func:`ctrl_word` builds a V3 flexible-FDE control word.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import format as F


@dataclass
class FREData:
    start: int  # offset from the function start (or within the repeat block for PCMASK)
    words: list[int]  # data words as stored (flex control words as unsigned values)
    base_reg: int = F.BASE_REG_SP
    dataword_size: int | None = None  # 1, 2 or 4 bytes; None picks the smallest that fits
    mangled_ra: bool = False


@dataclass
class FDEData:
    func_start: int  # absolute address
    func_size: int
    fres: list[FREData] = field(default_factory=list)
    pcmask: bool = False
    rep_size: int = 0
    flex: bool = False
    signal: bool = False
    fre_type: int | None = None  # None picks from func_size (sframe_calc_fre_type)


def ctrl_word(regnum: int = 0, *, deref: bool = False, reg_p: bool = True) -> int:
    """SFRAME_V3_FLEX_FDE_CTRLWORD_ENCODE."""
    return (regnum << 3) | (int(deref) << 1) | int(reg_p)


def _fits(v: int, size: int) -> bool:
    bits = 8 * size
    return -(1 << (bits - 1)) <= v < (1 << (bits - 1))  # offsets are signed; control words fit too


def _fre_type(fde: FDEData) -> int:
    if fde.fre_type is not None:
        return fde.fre_type
    if fde.func_size < 0x100:
        return F.FRE_TYPE_ADDR1
    return F.FRE_TYPE_ADDR2 if fde.func_size < 0x10000 else F.FRE_TYPE_ADDR4


def _encode_fre(fre: FREData, fre_type: int, lay: F.Layouts) -> bytes:
    asize = F.FRE_START_ADDR_SIZE[fre_type]
    wsize = fre.dataword_size or next(s for s in (1, 2, 4) if all(_fits(w, s) for w in fre.words))
    code = {1: 0, 2: 1, 4: 2}[wsize]
    info = (int(fre.mangled_ra) << 7) | (code << 5) | (len(fre.words) << 1) | fre.base_reg
    out = bytearray(lay.start_addr[asize].pack(fre.start))
    out.append(info)
    for w in fre.words:
        fmt = lay.dataword_signed[wsize] if w < 0 else lay.dataword_unsigned[wsize]
        out += fmt.pack(w)
    return bytes(out)


def encode_section(
    fdes: list[FDEData],
    *,
    version: int = F.SFRAME_VERSION_3,
    vaddr: int = 0,
    flags: int | None = None,
    abi: int = F.ABI_AMD64_ENDIAN_LITTLE,
    fixed_fp: int = 0,
    fixed_ra: int = -8,
    auxhdr: bytes = b"",
) -> bytes:
    """An SFrame section to be placed at ``vaddr``; FDEs are written in the order given."""
    lay = F.LITTLE if F.ABI_BYTE_ORDER[abi] == "<" else F.BIG
    if flags is None:
        flags = F.F_FDE_SORTED | (F.F_FDE_FUNC_START_PCREL if version == F.SFRAME_VERSION_3 else 0)
    hdr_size = F.HEADER_SIZE + len(auxhdr)
    fde_size = {1: F.FDE_V1_SIZE, 2: F.FDE_V2_SIZE, 3: F.FDE_V3_INDEX_SIZE}[version]
    fre_blob = bytearray()
    fde_blob = bytearray()
    num_fres = 0
    for i, fde in enumerate(fdes):
        fre_type = _fre_type(fde)
        pc_type = F.PCTYPE_MASK if fde.pcmask else F.PCTYPE_INC
        info = (int(fde.signal) << 7) | (pc_type << 4) | fre_type
        fres_off = len(fre_blob)
        field_addr = vaddr + hdr_size + i * fde_size
        rel = fde.func_start - (field_addr if flags & F.F_FDE_FUNC_START_PCREL else vaddr)
        if version == F.SFRAME_VERSION_3:
            fde_blob += lay.fde_v3_index.pack(rel, fde.func_size, fres_off)
            fre_blob += lay.fde_v3_attr.pack(len(fde.fres), info, int(fde.flex), fde.rep_size)
        elif version == F.SFRAME_VERSION_2:
            fde_blob += lay.fde_v2.pack(rel, fde.func_size, fres_off, len(fde.fres), info & 0x7F, fde.rep_size, 0)
        else:
            fde_blob += lay.fde_v1.pack(rel, fde.func_size, fres_off, len(fde.fres), info & 0x7F)
        for fre in fde.fres:
            fre_blob += _encode_fre(fre, fre_type, lay)
        num_fres += len(fde.fres)
    header = lay.header.pack(F.SFRAME_MAGIC, version, flags, abi, fixed_fp, fixed_ra, len(auxhdr), len(fdes),
                             num_fres, len(fre_blob), 0, len(fde_blob))
    return header + auxhdr + bytes(fde_blob) + bytes(fre_blob)
