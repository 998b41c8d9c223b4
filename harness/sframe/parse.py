"""Decoding an SFrame section (V1, V2, V3) from bytes, and looking up the frame rule for a PC.

:meth:`SFrameSection.parse` reads the header and every FDE eagerly (a few bytes each: the
binary search needs all function starts) and checks every bound it can without touching the
FREs; a function's FREs are decoded on first use and cached with their :class:`FrameRule`.
:meth:`SFrameSection.decode_all` decodes (and so validates) every FRE up front.

Function start addresses (spec: "sfde_func_start_address" / "sfdi_func_start_offset"):

* V1, and V2 without ``SFRAME_F_FDE_FUNC_START_PCREL``: relative to the start of the .sframe
  section (libsframe's dump adds the section address; checked against binutils 2.40 and 2.44
  output).  The header comment calling it "the start of the SFrame FDE section" is loose: the
  FDE sub-section begins after the 28-byte header.
* With ``FDE_FUNC_START_PCREL`` (V2 from binutils 2.45, every V3 section gas writes): relative
  to the address of the start-address field itself.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import NamedTuple

from ..rule import SAME, UNDEFINED, FrameRule, ValueRule, outermost_rule
from . import format as F
from .errors import SFrameError

__all__ = ["Location", "SFrameFDE", "SFrameFRE", "SFrameHeader", "SFrameMatch", "SFrameSection", "SFrameError"]


@dataclass(frozen=True, slots=True)
class SFrameHeader:
    """Spec 2.1/2.2: preamble and header; offsets are from the start of the section."""

    version: int
    flags: int
    abi_arch: int
    cfa_fixed_fp_offset: int
    cfa_fixed_ra_offset: int
    auxhdr_len: int
    num_fdes: int
    num_fres: int
    fre_len: int
    fdes_off: int
    fres_off: int
    byte_order: str  # "<" or ">"

    @property
    def size(self) -> int:
        """Header plus auxiliary header: where sfh_fdeoff and sfh_freoff count from."""
        return F.HEADER_SIZE + self.auxhdr_len

    @property
    def fdes_start(self) -> int:
        return self.size + self.fdes_off

    @property
    def fres_start(self) -> int:
        return self.size + self.fres_off

    @property
    def end(self) -> int:
        """Bytes the section really uses (a PT_GNU_SFRAME segment may be longer)."""
        return self.fres_start + self.fre_len

    @property
    def sorted(self) -> bool:
        return bool(self.flags & F.F_FDE_SORTED)

    @property
    def pcrel(self) -> bool:
        return bool(self.flags & F.F_FDE_FUNC_START_PCREL)

    @property
    def fde_size(self) -> int:
        return {1: F.FDE_V1_SIZE, 2: F.FDE_V2_SIZE, 3: F.FDE_V3_INDEX_SIZE}[self.version]

    def flag_names(self) -> list[str]:
        return [name for bit, name in F.FLAG_NAMES.items() if self.flags & bit]


@dataclass(frozen=True, slots=True)
class SFrameFDE:
    """One function: the FDE (V1/V2) or the V3 index entry joined with its attribute record."""

    index: int  # position in the section's FDE table
    offset: int  # section offset of the FDE / V3 index entry
    func_start: int  # absolute address (section address applied)
    func_size: int
    fres_off: int  # offset of the function's FRE data in the FRE sub-section (V3: of its attributes)
    num_fres: int
    info: int
    info2: int  # V3 only; 0 before
    rep_size: int  # PCMASK block size (V1: the implicit 16)
    fres_start: int  # section offset of the first FRE
    has_attr: bool = False  # V3: the attribute record sits just before the FREs

    @property
    def func_end(self) -> int:
        return self.func_start + self.func_size

    @property
    def fre_type(self) -> int:
        return F.fde_info_fre_type(self.info)

    @property
    def pc_type(self) -> int:
        return F.fde_info_pc_type(self.info)

    @property
    def pcmask(self) -> bool:
        return self.pc_type == F.PCTYPE_MASK

    @property
    def fde_type(self) -> int:
        return F.fde_info2_fde_type(self.info2)

    @property
    def flex(self) -> bool:
        return self.fde_type == F.FDE_TYPE_FLEX

    @property
    def signal_frame(self) -> bool:
        """V3 info bit 7.  V1/V2 cannot say so (gas 2.40-2.45 describe such a function plainly)."""
        return self.has_attr and F.fde_info_signal_p(self.info)

    @property
    def attr_offset(self) -> int:
        """V3: section offset of the attribute record; -1 for V1/V2."""
        return self.fres_start - F.FDE_V3_ATTR_SIZE if self.has_attr else -1

    @property
    def pauth_key(self) -> int:
        return F.fde_info_pauth_key(self.info)


@dataclass(frozen=True, slots=True)
class Location:
    """``base + offset``, or with ``deref`` the word there.  base: "cfa", "sp", "fp" or "rN"."""

    base: str
    offset: int
    deref: bool = False


@dataclass(frozen=True, slots=True)
class SFrameFRE:
    """One frame row entry, decoded.

    ``cfa`` is None for an FRE with no data words: V2+ "RA undefined", the outermost frame.
    ``ra`` / ``fp`` are None where the FRE does not describe them: RA then sits at the header's
    fixed offset (AMD64: CFA-8), FP is unchanged (or at the header's fixed FP offset).
    """

    start: int  # offset from the function start (PCINC) or within the repeat block (PCMASK)
    info: int
    offset: int  # section offset of the FRE
    datawords: tuple[int, ...]  # as stored: offsets signed; flex control words unsigned
    cfa: Location | None
    ra: Location | None
    fp: Location | None
    ra_padding: bool = False  # flex: the RA slot is a zero padding word
    fp_padding: bool = False

    @property
    def base_reg(self) -> str:
        """The CFA base register of the info byte: "fp" or "sp"."""
        return "sp" if F.fre_info_base_reg(self.info) == F.BASE_REG_SP else "fp"

    @property
    def ra_undefined(self) -> bool:
        return self.cfa is None

    @property
    def mangled_ra(self) -> bool:
        return F.fre_info_mangled_ra_p(self.info)


class SFrameMatch(NamedTuple):
    fde: SFrameFDE
    fre: SFrameFRE


class _Decoded:
    """A function's FREs with their start offsets and frame rules, built on first lookup."""

    __slots__ = ("fres", "starts", "rules", "rep")

    def __init__(self, fres: list[SFrameFRE], rules: list[FrameRule] | None, rep: int) -> None:
        self.fres = fres
        self.starts = [f.start for f in fres]
        self.rules = rules
        self.rep = rep  # 0 for PCINC


class SFrameSection:
    """A decoded .sframe section at a known address."""

    def __init__(self, data: bytes, section_vaddr: int, header: SFrameHeader, fdes: list[SFrameFDE],
                 strict: bool = True) -> None:
        self.data = data
        self.section_vaddr = section_vaddr
        self.header = header
        self.fdes = fdes  # in section order
        self.strict = strict
        self._layouts = F.LITTLE if header.byte_order == "<" else F.BIG
        # Not strict: the FDE_SORTED flag is not trusted (the checker reports a wrong one).
        order = (sorted(range(len(fdes)), key=lambda i: fdes[i].func_start)
                 if not header.sorted or not strict else range(len(fdes)))
        self._by_start = [fdes[i] for i in order]
        self._starts = [f.func_start for f in self._by_start]
        self._sizes = [f.func_size for f in self._by_start]
        self._decoded: dict[int, _Decoded] = {}  # keyed by position in _by_start
        self._amd64 = header.abi_arch == F.ABI_AMD64_ENDIAN_LITTLE

    # ------------------------------------------------------------------ parsing

    @classmethod
    def parse(cls, data: bytes | bytearray | memoryview, section_vaddr: int, *,
              strict: bool = True, pcrel: bool | None = None) -> SFrameSection:
        """Decode the header and FDEs of ``data``, a section whose first byte is at ``section_vaddr``.

        Trailing bytes past the FRE sub-section are ignored (PT_GNU_SFRAME segments are often
        longer than the section).  Raises :class:`SFrameError` on anything malformed.

        ``strict=False`` decodes what is decodable and leaves the semantic rules to the caller
        (:mod:`harness.unwind.sframe_check` reports them): FDEs out of order under FDE_SORTED, FRE starts out of order
        or past their function's end.  Bounds are checked either way.

        ``pcrel``: read the function starts as relative to their own field (True) or to the
        section (False) whatever the header's FDE_FUNC_START_PCREL says; None follows the flag.
        An object's relocated starts are PC-relative in every version (:mod:`.reloc`), and so
        are those of a linker that concatenates the inputs' sections without rewriting them.
        """
        data = bytes(data)
        header = _parse_header(data)
        lay = F.LITTLE if header.byte_order == "<" else F.BIG
        fdes = _parse_fdes(data, header, lay, section_vaddr, strict, header.pcrel if pcrel is None else pcrel)
        return cls(data, section_vaddr, header, fdes, strict)

    def fres(self, fde: SFrameFDE) -> list[SFrameFRE]:
        """The FREs of ``fde`` (decoded and cached)."""
        return self._decode(self._position(fde)).fres

    def decode_all(self) -> SFrameSection:
        """Decode every FRE now (validating the whole section); returns self."""
        for i in range(len(self._by_start)):
            self._decode(i)
        return self

    def _position(self, fde: SFrameFDE) -> int:
        i = bisect_right(self._starts, fde.func_start) - 1
        while i >= 0 and self._by_start[i] is not fde:
            i -= 1
        if i < 0:
            raise KeyError(f"FDE {fde.index} is not from this section")
        return i

    def _decode(self, i: int) -> _Decoded:
        d = self._decoded.get(i)
        if d is None:
            fde = self._by_start[i]
            fres = _parse_fres(self.data, self.header, self._layouts, fde, self.strict)
            # Rules are modelled for AMD64 only; other ABIs decode, and rule_for raises.
            rules = [self._rule(fde, fre) for fre in fres] if self._amd64 else None
            d = _Decoded(fres, rules, fde.rep_size if fde.pcmask else 0)
            self._decoded[i] = d
        return d

    # ------------------------------------------------------------------ lookup

    def find_fde(self, pc: int) -> SFrameFDE | None:
        """The FDE whose [func_start, func_start + func_size) holds ``pc``."""
        i = bisect_right(self._starts, pc) - 1
        if i < 0 or pc - self._starts[i] >= self._sizes[i]:
            return None
        return self._by_start[i]

    def _locate(self, pc: int):
        """(FDE index, its decoded FREs, FRE index) for ``pc``, or None.  The one lookup behind
        :meth:`find_fre` and :meth:`rule_for`: bisect on FDE starts, then on FRE starts."""
        i = bisect_right(self._starts, pc) - 1
        if i < 0:
            return None
        off = pc - self._starts[i]
        if off >= self._sizes[i]:
            return None
        d = self._decoded.get(i) or self._decode(i)
        if d.rep:
            off %= d.rep
        j = bisect_right(d.starts, off) - 1
        if j < 0:
            return None
        return i, d, j

    def find_fre(self, pc: int) -> SFrameMatch | None:
        """The FDE covering ``pc`` and its FRE with the largest start <= pc's offset.

        PCMASK FDEs (PLT stubs) match on ``(pc - func_start) % rep_size``.  None where no FDE
        covers ``pc`` or the first FRE starts after it.
        """
        found = self._locate(pc)
        if found is None:
            return None
        i, d, j = found
        return SFrameMatch(self._by_start[i], d.fres[j])

    def rule_for(self, pc: int) -> FrameRule | None:
        """The frame rule at ``pc``, or None where the section does not describe ``pc``."""
        found = self._locate(pc)
        if found is None:
            return None
        i, d, j = found
        if d.rules is None:
            return self._rule(self._by_start[i], d.fres[j])  # raises: not AMD64
        return d.rules[j]

    # ------------------------------------------------------------------ rules

    def rule(self, fde: SFrameFDE, fre: SFrameFRE) -> FrameRule:
        """The FrameRule ``fre`` of ``fde`` stands for (AMD64; raises :class:`SFrameError` else)."""
        return self._rule(fde, fre)

    def _rule(self, fde: SFrameFDE, fre: SFrameFRE) -> FrameRule:
        """The FrameRule an FRE stands for (AMD64; see module doc of harness.rule)."""
        h = self.header
        if h.abi_arch != F.ABI_AMD64_ENDIAN_LITTLE:
            # Decoding is generic; the rule mapping is only modelled (and tested) for AMD64.
            raise SFrameError(f"frame rules are modelled for AMD64 only, not {F.ABI_NAMES[h.abi_arch]}",
                              field="abi_arch", offset=4)
        signal = fde.signal_frame
        if fre.cfa is None:
            return outermost_rule(signal)
        if fre.cfa.base == "cfa":
            raise SFrameError("the CFA cannot be based on itself (control word reg_p = 0)",
                              field="fre.cfa", offset=fre.offset)
        cfa = ValueRule(fre.cfa.base, fre.cfa.offset, fre.cfa.deref)
        if fre.ra is not None:
            ra = ValueRule(fre.ra.base, fre.ra.offset, fre.ra.deref)
        elif h.cfa_fixed_ra_offset != F.CFA_FIXED_OFFSET_INVALID:
            ra = ValueRule("cfa", h.cfa_fixed_ra_offset, True)
        else:
            ra = ValueRule(UNDEFINED)
        if fre.fp is not None:
            fp = ValueRule(fre.fp.base, fre.fp.offset, fre.fp.deref)
        elif h.cfa_fixed_fp_offset != F.CFA_FIXED_OFFSET_INVALID:
            fp = ValueRule("cfa", h.cfa_fixed_fp_offset, True)
        else:
            fp = ValueRule(SAME)
        return FrameRule(cfa, ra, fp, signal)

    def __repr__(self) -> str:
        h = self.header
        return (f"<SFrameSection v{h.version} {F.ABI_NAMES.get(h.abi_arch, h.abi_arch)} at {self.section_vaddr:#x}: "
                f"{h.num_fdes} FDEs, {h.num_fres} FREs>")


# ---------------------------------------------------------------------- decoding helpers


def _parse_header(data: bytes) -> SFrameHeader:
    n = len(data)
    if n < 4:
        raise SFrameError(f"section of {n} bytes has no room for the 4-byte preamble", field="preamble", offset=0)
    if data[0] == 0xE2 and data[1] == 0xDE:
        order = "<"
    elif data[0] == 0xDE and data[1] == 0xE2:
        order = ">"
    else:
        raise SFrameError(f"bad magic {data[0]:02x} {data[1]:02x} (want 0xdee2 in either byte order)",
                          field="magic", offset=0)
    version = data[2]
    if version not in F.VERSIONS:
        raise SFrameError(f"unknown version {version}", field="version", offset=2)
    if n < F.HEADER_SIZE:
        raise SFrameError(f"section of {n} bytes is shorter than the {F.HEADER_SIZE}-byte header",
                          field="header", offset=n)
    lay = F.LITTLE if order == "<" else F.BIG
    (_magic, version, flags, abi, fixed_fp, fixed_ra, auxhdr_len,
     num_fdes, num_fres, fre_len, fdes_off, fres_off) = lay.header.unpack_from(data, 0)
    if flags & ~F.VALID_FLAGS[version]:
        raise SFrameError(f"flags {flags:#x} has bits undefined for version {version}", field="flags", offset=3)
    if abi not in F.ABI_BYTE_ORDER:
        raise SFrameError(f"unknown ABI/arch {abi}", field="abi_arch", offset=4)
    if F.ABI_BYTE_ORDER[abi] != order:
        raise SFrameError(f"ABI {F.ABI_NAMES[abi]} does not match the magic's byte order", field="abi_arch", offset=4)
    if abi not in F.ABIS_OF_VERSION[version]:
        raise SFrameError(f"ABI {F.ABI_NAMES[abi]} is not defined in SFrame version {version} (s390x came with "
                          f"version 2)", field="abi_arch", offset=4)
    h = SFrameHeader(version, flags, abi, fixed_fp, fixed_ra, auxhdr_len, num_fdes, num_fres, fre_len,
                     fdes_off, fres_off, order)
    if h.size > n:
        raise SFrameError(f"auxiliary header of {auxhdr_len} bytes runs past the section end ({n})",
                          field="auxhdr_len", offset=7)
    if fdes_off > fres_off:
        raise SFrameError(f"FDE sub-section ({fdes_off:#x}) after the FRE sub-section ({fres_off:#x})",
                          field="fdes_off", offset=0x14)
    fdes_end = h.fdes_start + num_fdes * h.fde_size
    if fdes_end > h.fres_start:
        raise SFrameError(f"{num_fdes} FDEs of {h.fde_size} bytes from {h.fdes_start:#x} overlap the FRE "
                          f"sub-section at {h.fres_start:#x}", field="num_fdes", offset=8)
    if h.fres_start > n:
        raise SFrameError(f"FRE sub-section at {h.fres_start:#x} is past the section end ({n:#x})",
                          field="fres_off", offset=0x18)
    if h.end > n:
        raise SFrameError(f"FRE sub-section of {fre_len} bytes at {h.fres_start:#x} runs past the section "
                          f"end ({n:#x})", field="fre_len", offset=0x10)
    return h


def _parse_fdes(data: bytes, h: SFrameHeader, lay: F.Layouts, vaddr: int, strict: bool, pcrel: bool) -> list[SFrameFDE]:
    fdes: list[SFrameFDE] = []
    version = h.version
    size = h.fde_size
    fres_base = h.fres_start
    fres_end = h.end
    total_fres = 0
    prev_start = None
    for i in range(h.num_fdes):
        off = h.fdes_start + i * size
        has_attr = False
        if version == F.SFRAME_VERSION_3:
            rel_start, func_size, fres_off = lay.fde_v3_index.unpack_from(data, off)
            attr = fres_base + fres_off
            if attr + F.FDE_V3_ATTR_SIZE > fres_end:
                raise SFrameError(f"FDE {i}: attribute record at FRE offset {fres_off:#x} runs past the FRE "
                                  f"sub-section ({h.fre_len} bytes)", field="fde.fres_off", offset=off + 12)
            num_fres, info, info2, rep_size = lay.fde_v3_attr.unpack_from(data, attr)
            first_fre = attr + F.FDE_V3_ATTR_SIZE
            has_attr = True
            fde_type = F.fde_info2_fde_type(info2)
            if fde_type not in (F.FDE_TYPE_DEFAULT, F.FDE_TYPE_FLEX):
                raise SFrameError(f"FDE {i}: unknown FDE type {fde_type}", field="fde.info2", offset=attr + 3)
            info_off, rep_off, nfres_off = attr + 2, attr + 4, attr
        else:
            if version == F.SFRAME_VERSION_2:
                rel_start, func_size, fres_off, num_fres, info, rep_size, _pad = lay.fde_v2.unpack_from(data, off)
            else:
                rel_start, func_size, fres_off, num_fres, info = lay.fde_v1.unpack_from(data, off)
                rep_size = F.V1_IMPLICIT_REP_SIZE if F.fde_info_pc_type(info) == F.PCTYPE_MASK else 0
            info2 = 0
            first_fre = fres_base + fres_off
            if first_fre > fres_end:
                raise SFrameError(f"FDE {i}: FRE offset {fres_off:#x} is past the FRE sub-section "
                                  f"({h.fre_len} bytes)", field="fde.fres_off", offset=off + 8)
            info_off, rep_off, nfres_off = off + 16, off + 17, off + 12
        fre_type = F.fde_info_fre_type(info)
        if fre_type not in F.FRE_START_ADDR_SIZE:
            raise SFrameError(f"FDE {i}: unknown FRE type {fre_type}", field="fde.info", offset=info_off)
        if F.fde_info_pc_type(info) == F.PCTYPE_MASK and rep_size == 0:
            raise SFrameError(f"FDE {i}: PCMASK FDE with a repetition block size of 0", field="fde.rep_size",
                              offset=rep_off)
        min_fre = F.FRE_START_ADDR_SIZE[fre_type] + 1
        if num_fres * min_fre > fres_end - first_fre:
            raise SFrameError(f"FDE {i}: {num_fres} FREs of at least {min_fre} bytes do not fit in the "
                              f"{fres_end - first_fre} bytes left of the FRE sub-section",
                              field="fde.num_fres", offset=nfres_off)
        total_fres += num_fres
        if pcrel:
            func_start = vaddr + off + F.FDE_FUNC_START_FIELD_OFFSET + rel_start
        else:
            func_start = vaddr + rel_start
        if strict and h.sorted and prev_start is not None and func_start < prev_start:
            raise SFrameError(f"FDE {i} starts at {func_start:#x}, before FDE {i - 1} ({prev_start:#x}), but the "
                              f"header says FDE_SORTED", field="fde.func_start", offset=off)
        prev_start = func_start
        fdes.append(SFrameFDE(i, off, func_start, func_size, fres_off, num_fres, info, info2, rep_size,
                              first_fre, has_attr))
    if total_fres != h.num_fres:
        raise SFrameError(f"the FDEs hold {total_fres} FREs, the header says {h.num_fres}", field="num_fres",
                          offset=0xC)
    return fdes


def _parse_fres(data: bytes, h: SFrameHeader, lay: F.Layouts, fde: SFrameFDE,
                strict: bool = True) -> list[SFrameFRE]:
    addr_size = F.FRE_START_ADDR_SIZE[fde.fre_type]
    addr = lay.start_addr[addr_size]
    end = h.end
    pos = fde.fres_start
    flex = fde.flex
    pcinc = not fde.pcmask
    max_words = F.MAX_FLEX_DATAWORDS if flex else F.MAX_DEFAULT_DATAWORDS
    base_names = ("fp", "sp")
    fixed_ra = h.cfa_fixed_ra_offset != F.CFA_FIXED_OFFSET_INVALID
    fixed_fp = h.cfa_fixed_fp_offset != F.CFA_FIXED_OFFSET_INVALID
    cfa_offset, saved_at = _abi_decoders(h)
    out: list[SFrameFRE] = []
    prev = -1
    for k in range(fde.num_fres):
        if pos + addr_size + 1 > end:
            raise SFrameError(f"FDE {fde.index}: FRE {k} runs past the FRE sub-section", field="fre", offset=pos)
        (start,) = addr.unpack_from(data, pos)
        info = data[pos + addr_size]
        count = F.fre_info_dataword_count(info)
        size_code = F.fre_info_dataword_size_code(info)
        if size_code not in F.DATAWORD_SIZE:
            raise SFrameError(f"FDE {fde.index}: FRE {k}: data word size code {size_code} is invalid",
                              field="fre.info", offset=pos + addr_size)
        if count > max_words:
            raise SFrameError(f"FDE {fde.index}: FRE {k}: {count} data words (at most {max_words})",
                              field="fre.info", offset=pos + addr_size)
        wsize = F.DATAWORD_SIZE[size_code]
        words_at = pos + addr_size + 1
        nxt = words_at + count * wsize
        if nxt > end:
            raise SFrameError(f"FDE {fde.index}: FRE {k}: {count} data words of {wsize} bytes run past the FRE "
                              f"sub-section", field="fre.info", offset=pos + addr_size)
        if strict and start <= prev:
            raise SFrameError(f"FDE {fde.index}: FRE {k} starts at {start:#x}, not after FRE {k - 1} "
                              f"({prev:#x})", field="fre.start", offset=pos)
        if strict and pcinc and start > fde.func_size:
            raise SFrameError(f"FDE {fde.index}: FRE {k} starts at {start:#x}, past the function's "
                              f"{fde.func_size} bytes", field="fre.start", offset=pos)
        prev = start
        sfmt = lay.dataword_signed[wsize]
        words = tuple(sfmt.unpack_from(data, words_at + w * wsize)[0] for w in range(count))
        ra_pad = fp_pad = False
        if count == 0:
            if h.version == F.SFRAME_VERSION_1:
                raise SFrameError(f"FDE {fde.index}: FRE {k} has no data words (V1 has no RA-undefined FREs)",
                                  field="fre.info", offset=pos + addr_size)
            cfa = ra = fp = None
        elif not flex:
            cfa = Location(base_names[F.fre_info_base_reg(info)], cfa_offset(words[0]))
            w = 1
            ra = fp = None
            if not fixed_ra and w < count:
                if words[w] == F.FRE_RA_OFFSET_INVALID:
                    ra_pad = True  # padding: the RA is not saved, the FP offset follows
                else:
                    ra = saved_at(words[w])
                w += 1
            if not fixed_fp and w < count:
                fp = saved_at(words[w])
                w += 1
            if w != count:
                raise SFrameError(f"FDE {fde.index}: FRE {k}: {count} data words, only {w} meaningful for "
                                  f"this ABI", field="fre.info", offset=pos + addr_size)
        else:
            ufmt = lay.dataword_unsigned[wsize]
            uwords = tuple(ufmt.unpack_from(data, words_at + w * wsize)[0] for w in range(count))
            if count < 2:
                raise SFrameError(f"FDE {fde.index}: flexible FRE {k} has {count} data word(s); the CFA needs a "
                                  f"control word and an offset", field="fre.info", offset=pos + addr_size)
            cfa = _flex_location(h.abi_arch, uwords[0], cfa_offset(words[1]))
            w = 2
            ra = fp = None
            entities = []
            for _ in range(2):  # RA, then FP
                if w >= count:
                    entities.append((None, False))
                    continue
                if uwords[w] == 0:
                    entities.append((None, True))
                    w += 1
                    continue
                if w + 1 >= count:
                    raise SFrameError(f"FDE {fde.index}: flexible FRE {k}: control word {uwords[w]:#x} without "
                                      f"its offset", field="fre.datawords", offset=words_at + w * wsize)
                entities.append((_flex_location(h.abi_arch, uwords[w], words[w + 1]), False))
                w += 2
            if w != count:
                raise SFrameError(f"FDE {fde.index}: flexible FRE {k}: {count - w} data word(s) left over",
                                  field="fre.datawords", offset=words_at + w * wsize)
            (ra, ra_pad), (fp, fp_pad) = entities
            words = tuple(uwords[x] if x in _flex_ctrl_positions(uwords) else words[x] for x in range(count))
        out.append(SFrameFRE(start, info, pos, words, cfa, ra, fp, ra_pad, fp_pad))
        pos = nxt
    return out


def _identity(stored: int) -> int:
    return stored


def _on_stack(stored: int) -> Location:
    return Location("cfa", stored, True)


def _abi_decoders(h: SFrameHeader):
    """(CFA offset as stored -> bytes, RA/FP offset as stored -> Location) of a default FDE's FREs.

    AMD64 and AArch64 store plain byte offsets, an RA or FP saved at CFA + offset.  s390x stores
    the CFA offset scaled and adjusted (:func:`format.s390x_cfa_offset_decode`), and in V2 an odd
    RA/FP offset names the register that holds the value (``Location("rN", 0)``, no dereference),
    as libsframe's sframe_fre_get_cfa_offset and dump_sframe_func_fres_simple read them."""
    if h.abi_arch != F.ABI_S390X_ENDIAN_BIG:
        return _identity, _on_stack
    if h.version == F.SFRAME_VERSION_2:
        def saved_at(stored: int) -> Location:
            if F.s390x_v2_offset_is_regnum(stored):
                return Location(F.dwarf_reg_name(h.abi_arch, F.s390x_v2_offset_regnum(stored)), 0)
            return Location("cfa", stored, True)
    else:
        saved_at = _on_stack
    return F.s390x_cfa_offset_decode, saved_at


def _flex_location(abi: int, ctrl: int, offset: int) -> Location:
    if F.ctrl_reg_p(ctrl):
        return Location(F.dwarf_reg_name(abi, F.ctrl_regnum(ctrl)), offset, F.ctrl_deref_p(ctrl))
    return Location("cfa", offset, F.ctrl_deref_p(ctrl))


def _flex_ctrl_positions(uwords: tuple[int, ...]) -> set[int]:
    """Indexes of the control words in a flexible FRE's data words (the rest are offsets)."""
    pos = {0}
    w = 2
    for _ in range(2):
        if w >= len(uwords):
            break
        pos.add(w)
        w += 1 if uwords[w] == 0 else 2
    return pos
