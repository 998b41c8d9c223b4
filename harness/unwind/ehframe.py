"""A reader of ``.eh_frame``: its CIEs and FDEs, and each FDE's CFA program decoded into rows.

Why it exists: pyelftools' ``DWARFInfo.EH_CFI_entries()`` parses every CIE and FDE -- and every
instruction of every CFA program -- through its construct structs, about 0.13 ms an entry: 0.5 s
for a static binary's 4,000 FDEs, half of what ``harness sframe check`` spends on one, and most
of the CPU the unit suite spends on CFI.  This reader unpacks the same bytes with ``struct`` and
decodes an FDE's instructions only when its rows are asked for (:meth:`FDE.get_decoded`).

pyelftools, the well-kept library, stays the reference: the rows are pyelftools' own
``CFARule``/``RegisterRule`` objects in pyelftools' table shape (``get_decoded().table``: a list
of dicts with ``'pc'``, ``'cfa'`` and a rule per DWARF register number), the header fields carry
pyelftools' names (``fde["initial_location"]``, ``fde.cie["augmentation"]``, ...), and
tests/unit/unwind/test_ehframe.py holds both readers equal on every FDE of real binaries.
``.debug_frame`` (Go binaries have one) is still read by pyelftools.

The format: the LSB's "Exception Frames" (Linux Standard Base Core, 10.6) over DWARF 5 section
6.4.  An entry is a length (0xffffffff then a 64-bit length), then a CIE id (0) or the FDE's
distance back to its CIE from that field; a length of 0 is a terminator, skipped as pyelftools
skips it.  A CIE's augmentation string "z..." says what its augmentation data holds: ``L`` the
LSDA pointer's encoding, ``R`` the FDE pointers' encoding, ``P`` a personality routine (its
encoding and pointer), ``S`` a signal frame; an unknown letter ends what can be read of it, the
length skips the rest.  Pointer encodings (``DW_EH_PE_*``): the format in the low nibble
(absptr, uleb128, udata2/4/8, sleb128, sdata2/4/8), the application in the high one (pcrel:
from the field's own address; datarel and textrel: from the bases given; funcrel: from the
FDE's function, for its LSDA; aligned), ``indirect`` (0x80: the value is where the pointer is,
read through ``deref`` when given), and ``omit`` (0xff).

Where pyelftools is wrong, this reader follows the specifications and libgcc's unwinder, and
the comparison test names each case: ``DW_CFA_GNU_args_size`` (no rule changes: pyelftools
decodes no table for the FDE), ``DW_CFA_def_cfa_sf`` (its offset is factored by the data
alignment factor, not the code one), ``DW_CFA_set_loc`` (its address is in the FDE encoding),
``DW_CFA_restore`` after a CIE without rows (no rule, not an assertion), a CIE without an
augmentation (absptr FDE pointers, no augmentation data) and a 64-bit entry's CIE pointer (from
its own field, 12 bytes into the entry).

Bytes that do not decode raise :class:`EhFrameError`, also a pyelftools ``DWARFError`` (one of the
errors :class:`harness.unwind.cfi.CFITable` already turns into ``CorruptCFI``): while the section
is read (a length past its end, a CIE pointer to no CIE, an unknown augmentation, a pointer
encoding with no base to apply) or when an FDE's rows are asked for (an unknown opcode, an
instruction past its entry, ``DW_CFA_restore_state`` without a remembered state).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from elftools.common.exceptions import DWARFError
from elftools.dwarf.callframe import CFARule, DecodedCallFrameTable, RegisterRule

from ..errors import HarnessError

__all__ = ["CIE", "FDE", "EhFrameError", "parse_eh_frame"]


class EhFrameError(HarnessError, DWARFError):
    """The ``.eh_frame`` bytes do not decode; says where (section offset) and why.  A
    ``DWARFError`` too: what pyelftools raised there, and what callers catch."""


# DW_EH_PE_*: the pointer formats (low nibble) and applications (high nibble)
DW_EH_PE_absptr, DW_EH_PE_uleb128, DW_EH_PE_udata2, DW_EH_PE_udata4, DW_EH_PE_udata8 = 0x00, 0x01, 0x02, 0x03, 0x04
DW_EH_PE_sleb128, DW_EH_PE_sdata2, DW_EH_PE_sdata4, DW_EH_PE_sdata8 = 0x09, 0x0A, 0x0B, 0x0C
DW_EH_PE_pcrel, DW_EH_PE_textrel, DW_EH_PE_datarel, DW_EH_PE_funcrel, DW_EH_PE_aligned = 0x10, 0x20, 0x30, 0x40, 0x50
DW_EH_PE_indirect = 0x80
DW_EH_PE_omit = 0xFF

_OFFSET, _VAL_OFFSET, _REGISTER = RegisterRule.OFFSET, RegisterRule.VAL_OFFSET, RegisterRule.REGISTER
_EXPRESSION, _VAL_EXPRESSION = RegisterRule.EXPRESSION, RegisterRule.VAL_EXPRESSION
_UNDEFINED_RULE = RegisterRule.UNDEFINED
_SAME_VALUE = RegisterRule.SAME_VALUE


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    result, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = data[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + 1
        shift += 7


def _sleb(data: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if b & 0x40:
                result -= 1 << shift
            return result, pos


class _Reader:
    """The section's bytes and what applying a pointer encoding needs."""

    def __init__(self, data: bytes, address: int, address_size: int, little_endian: bool,
                 datarel_base: int | None, textrel_base: int | None, deref: Callable[[int], int] | None):
        self.data = data
        self.address = address
        self.address_size = address_size
        e = "<" if little_endian else ">"
        self.u16, self.u32, self.u64 = struct.Struct(e + "H"), struct.Struct(e + "I"), struct.Struct(e + "Q")
        self.fixed = {
            DW_EH_PE_udata2: self.u16, DW_EH_PE_udata4: self.u32, DW_EH_PE_udata8: self.u64,
            DW_EH_PE_sdata2: struct.Struct(e + "h"), DW_EH_PE_sdata4: struct.Struct(e + "i"),
            DW_EH_PE_sdata8: struct.Struct(e + "q"),
        }
        self.fixed[DW_EH_PE_absptr] = self.u64 if address_size == 8 else self.u32
        self.datarel_base = datarel_base
        self.textrel_base = textrel_base
        self.deref = deref

    def raw(self, fmt: int, pos: int, end: int) -> tuple[int, int]:
        """The value of format ``fmt`` (an encoding's low nibble) at ``pos``, before ``end``."""
        data = self.data
        if fmt == DW_EH_PE_uleb128:
            value, nxt = _uleb(data, pos)
        elif fmt == DW_EH_PE_sleb128:
            value, nxt = _sleb(data, pos)
        else:
            st = self.fixed.get(fmt)
            if st is None:
                raise EhFrameError(f"pointer format {fmt:#x} at +{pos:#x} is not a DW_EH_PE format")
            nxt = pos + st.size
            if nxt > end:
                raise IndexError
            value = st.unpack_from(data, pos)[0]
        if nxt > end:
            raise IndexError
        return value, nxt

    def pointer(self, enc: int, pos: int, end: int, what: str, func: int | None = None) -> tuple[int, int]:
        """The pointer of encoding ``enc`` at ``pos`` with its application done: (value, next)."""
        if enc == DW_EH_PE_omit:
            raise EhFrameError(f"{what} at +{pos:#x} has encoding DW_EH_PE_omit")
        app = enc & 0x70
        if app == DW_EH_PE_aligned:
            pos = (pos + self.address_size - 1) // self.address_size * self.address_size
        value, nxt = self.raw(enc & 0x0F, pos, end)
        if app == DW_EH_PE_pcrel:
            value += self.address + pos
        elif app == DW_EH_PE_datarel or app == DW_EH_PE_textrel:
            base = self.datarel_base if app == DW_EH_PE_datarel else self.textrel_base
            if base is None:
                raise EhFrameError(f"{what} at +{pos:#x} is {'datarel' if app == DW_EH_PE_datarel else 'textrel'} "
                                   f"(encoding {enc:#x}) and no base was given")
            value += base
        elif app == DW_EH_PE_funcrel:
            if func is None:
                raise EhFrameError(f"{what} at +{pos:#x} is funcrel (encoding {enc:#x}) outside an FDE")
            value += func
        elif app not in (DW_EH_PE_absptr, DW_EH_PE_aligned):
            raise EhFrameError(f"{what} at +{pos:#x}: encoding {enc:#x} has no application {app:#x}")
        if enc & DW_EH_PE_indirect:
            if self.deref is None:
                raise EhFrameError(f"{what} at +{pos:#x} is indirect (encoding {enc:#x}) and no memory was given")
            value = self.deref(value)
        return value, nxt


class CIE:
    """A Common Information Entry: ``cie["code_alignment_factor"]`` and the other header fields
    by pyelftools' names, its augmentation, and its initial instructions' rows."""

    __slots__ = ("offset", "header", "augmentation_dict", "augmentation_bytes", "fde_encoding",
                 "lsda_encoding", "signal_frame", "_reader", "_insns", "_end", "_decoded")

    def __init__(self, offset: int, header: dict, augmentation_dict: dict, augmentation_bytes: bytes,
                 reader: _Reader, insns: int, end: int):
        self.offset = offset
        self.header = header
        self.augmentation_dict = augmentation_dict
        self.augmentation_bytes = augmentation_bytes
        self.fde_encoding: int = augmentation_dict.get("FDE_encoding", DW_EH_PE_absptr)
        self.lsda_encoding: int = augmentation_dict.get("LSDA_encoding", DW_EH_PE_omit)
        self.signal_frame = b"S" in header["augmentation"]
        self._reader = reader
        self._insns = insns
        self._end = end
        self._decoded: DecodedCallFrameTable | None = None

    @property
    def cie(self) -> None:
        return None

    def __getitem__(self, name: str) -> Any:
        return self.header[name]

    def get_decoded(self) -> DecodedCallFrameTable:
        if self._decoded is None:
            self._decoded = _decode(self, None)
        return self._decoded

    def __repr__(self) -> str:
        return f"CIE(+{self.offset:#x}, {self.header['augmentation']!r})"


class FDE:
    """A Frame Description Entry: ``fde["initial_location"]``, ``fde["address_range"]`` (and
    ``length``, ``CIE_pointer``), its :class:`CIE`, and its rows decoded on first use."""

    __slots__ = ("offset", "header", "cie", "augmentation_bytes", "_aug", "_insns", "_end", "_decoded")

    def __init__(self, offset: int, header: dict, cie: CIE, augmentation_bytes: bytes, aug: int,
                 insns: int, end: int):
        self.offset = offset
        self.header = header
        self.cie = cie
        self.augmentation_bytes = augmentation_bytes
        self._aug = aug
        self._insns = insns
        self._end = end
        self._decoded: DecodedCallFrameTable | None = None

    def __getitem__(self, name: str) -> Any:
        return self.header[name]

    @property
    def lsda_pointer(self) -> int | None:
        """The LSDA's address (the CIE's ``L`` encoding applied), or None without one."""
        enc = self.cie.lsda_encoding
        if enc == DW_EH_PE_omit:
            return None
        try:
            return self.cie._reader.pointer(enc, self._aug, self._insns, "the LSDA pointer",
                                            self.header["initial_location"])[0]
        except (IndexError, struct.error) as exc:
            raise EhFrameError(f"the LSDA pointer of the FDE at +{self.offset:#x} runs past its "
                               f"augmentation data") from exc

    def get_decoded(self) -> DecodedCallFrameTable:
        if self._decoded is None:
            self._decoded = _decode(self, self.cie)
        return self._decoded

    def __repr__(self) -> str:
        h = self.header
        return f"FDE(+{self.offset:#x}, [{h['initial_location']:#x}, +{h['address_range']:#x}))"


def parse_eh_frame(data: bytes, address: int, *, address_size: int = 8, little_endian: bool = True,
                   datarel_base: int | None = None, textrel_base: int | None = None,
                   deref: Callable[[int], int] | None = None) -> list[CIE | FDE]:
    """The CIEs and FDEs of an ``.eh_frame`` section (its bytes, at ``address``), in section
    order, terminators left out.  Headers and augmentations are read here; each entry's
    instructions when its :meth:`~FDE.get_decoded` is first called.  ``datarel_base`` and
    ``textrel_base``: the bases of those pointer applications (an FDE that needs one raises
    without it); ``deref``: the word at an address, for indirect FDE pointers.  Raises
    :class:`EhFrameError`."""
    data = bytes(data)
    r = _Reader(data, address, address_size, little_endian, datarel_base, textrel_base, deref)
    cies: dict[int, CIE] = {}
    out: list[CIE | FDE] = []
    size = len(data)
    u32, u64 = r.u32, r.u64
    offset = 0
    try:
        while offset < size:
            if offset + 4 > size:
                raise EhFrameError(f"{size - offset} bytes at +{offset:#x}: too few for an entry's length")
            length = u32.unpack_from(data, offset)[0]
            if length == 0:  # a terminator: pyelftools reads on after it, so does this reader
                offset += 4
                continue
            if length == 0xFFFFFFFF:
                length, id_pos, id_size = u64.unpack_from(data, offset + 4)[0], offset + 12, 8
            else:
                id_pos, id_size = offset + 4, 4
            end = id_pos + length
            if end > size or length < id_size:
                raise EhFrameError(f"the entry at +{offset:#x} claims {length} bytes; the section has "
                                   f"{size - id_pos} after its length")
            cie_id = (u64 if id_size == 8 else u32).unpack_from(data, id_pos)[0]
            if cie_id == 0:
                cie = cies.get(offset)
                if cie is None:
                    cie = cies[offset] = _parse_cie(r, offset, length, id_pos + id_size, end)
                out.append(cie)
            else:
                out.append(_parse_fde(r, cies, offset, length, id_pos, id_size, cie_id, end))
            offset = end
    except (IndexError, ValueError, struct.error) as exc:  # ValueError: a string without its NUL
        raise EhFrameError(f"the entry at +{offset:#x} runs past its end") from exc
    return out


def _cie_at(r: _Reader, cies: dict[int, CIE], at: int, fde: int) -> CIE:
    cie = cies.get(at)
    if cie is not None:
        return cie
    data, size = r.data, len(r.data)
    bad = f"the FDE at +{fde:#x} points to +{at:#x}, "
    if not 0 <= at or at + 8 > size:
        raise EhFrameError(bad + f"outside the section ({size} bytes)")
    length = r.u32.unpack_from(data, at)[0]
    if length == 0xFFFFFFFF:
        if at + 20 > size:
            raise EhFrameError(bad + "a 64-bit entry cut short")
        length, id_pos, id_size = r.u64.unpack_from(data, at + 4)[0], at + 12, 8
    else:
        id_pos, id_size = at + 4, 4
    end = id_pos + length
    if length < id_size or end > size:
        raise EhFrameError(bad + f"an entry of {length} bytes that the section cannot hold")
    if (r.u64 if id_size == 8 else r.u32).unpack_from(data, id_pos)[0] != 0:
        raise EhFrameError(bad + "which is not a CIE")
    try:
        cie = cies[at] = _parse_cie(r, at, length, id_pos + id_size, end)
    except (IndexError, ValueError, struct.error) as exc:
        raise EhFrameError(bad + "a CIE that runs past its end") from exc
    return cie


def _parse_cie(r: _Reader, offset: int, length: int, pos: int, end: int) -> CIE:
    data = r.data
    version = data[pos]
    pos += 1
    nul = data.index(b"\0", pos, end)
    augmentation = data[pos:nul]
    pos = nul + 1
    header: dict[str, Any] = {"length": length, "CIE_id": 0, "version": version, "augmentation": augmentation}
    header["address_size"] = header["segment_size"] = None  # pyelftools' None before version 4
    if version >= 4:
        header["address_size"], header["segment_size"] = data[pos], data[pos + 1]
        pos += 2
    header["code_alignment_factor"], pos = _uleb(data, pos)
    header["data_alignment_factor"], pos = _sleb(data, pos)
    if version == 1:
        header["return_address_register"] = data[pos]
        pos += 1
    else:
        header["return_address_register"], pos = _uleb(data, pos)
    aug: dict[Any, Any] = {}
    aug_bytes = b""
    if augmentation:
        if not augmentation.startswith(b"z"):
            raise EhFrameError(f"the CIE at +{offset:#x} has augmentation {augmentation!r}, not one "
                               f"that starts with 'z' (its data's length)")
        n, pos = _uleb(data, pos)
        aug["length"] = n
        aug_end = pos + n
        if aug_end > end:
            raise EhFrameError(f"the CIE at +{offset:#x} has {n} bytes of augmentation data, past its end")
        aug_bytes = data[pos:aug_end]
        at = pos
        for ch in augmentation[1:]:
            if ch == 0x4C:  # 'L'
                aug["LSDA_encoding"] = data[at]
                at += 1
            elif ch == 0x52:  # 'R'
                aug["FDE_encoding"] = data[at]
                at += 1
            elif ch == 0x50:  # 'P': the routine's pointer as stored (pyelftools applies nothing)
                enc = data[at]
                value, at = r.raw(enc & 0x0F, at + 1, aug_end)
                aug["personality"] = {"encoding": enc, "function": value}
            elif ch == 0x53:  # 'S'
                aug["S"] = True
            else:
                break  # what follows an unknown letter cannot be read; the length skips it
            if at > aug_end:
                raise EhFrameError(f"the CIE at +{offset:#x}: augmentation {augmentation!r} reads past its "
                                   f"{n} bytes of data")
        pos = aug_end
    return CIE(offset, header, aug, aug_bytes, r, pos, end)


def _parse_fde(r: _Reader, cies: dict[int, CIE], offset: int, length: int, id_pos: int, id_size: int,
               cie_pointer: int, end: int) -> FDE:
    cie = _cie_at(r, cies, id_pos - cie_pointer, offset)
    pos = id_pos + id_size
    enc = cie.fde_encoding
    start, pos = r.pointer(enc, pos, end, f"the initial location of the FDE at +{offset:#x}")
    size, pos = r.raw(enc & 0x0F, pos, end)
    aug_bytes = b""
    aug = pos
    if cie.augmentation_dict:  # 'z': the FDE's augmentation data, with its length
        n, aug = _uleb(r.data, pos)
        pos = aug + n
        if pos > end:
            raise EhFrameError(f"the FDE at +{offset:#x} has {n} bytes of augmentation data, past its end")
        aug_bytes = r.data[aug:pos]
    header = {"length": length, "CIE_pointer": cie_pointer, "initial_location": start, "address_range": size}
    return FDE(offset, header, cie, aug_bytes, aug, pos, end)


def _decode(entry: CIE | FDE, cie: CIE | None) -> DecodedCallFrameTable:
    """The rows of ``entry``'s instructions (``cie``: the FDE's CIE, None for a CIE itself), as
    pyelftools' ``CFIEntry._decode_CFI_table`` builds them."""
    try:
        return _decode_rows(entry, cie)
    except (IndexError, struct.error) as exc:
        where = f"the FDE at +{entry.offset:#x}" if cie is not None else f"the CIE at +{entry.offset:#x}"
        raise EhFrameError(f"{where}: an instruction runs past its end") from exc


def _decode_rows(entry: CIE | FDE, cie: CIE | None) -> DecodedCallFrameTable:
    last_cie: dict | None = None
    if cie is None:
        own = entry
        cur: dict[Any, Any] = {"pc": 0, "cfa": CFARule(reg=None, offset=0)}
        reg_order: list[int] = []
    else:
        own = cie
        cie_table = cie.get_decoded()
        pc = entry.header["initial_location"]
        if cie_table.table:
            last_cie = dict(cie_table.table[-1])
            cur = dict(last_cie, pc=pc)
        else:
            cur = {"cfa": CFARule(reg=None, offset=0), "pc": pc}
        reg_order = list(cie_table.reg_order)
    r = own._reader
    caf = own.header["code_alignment_factor"]
    daf = own.header["data_alignment_factor"]
    data = r.data[entry._insns:entry._end]  # IndexError past the entry's end: typed by _decode
    end = len(data)
    table: list[dict] = []
    stack: list[dict] = []
    seen = set(reg_order)

    def order(reg: int) -> None:
        if reg not in seen:
            seen.add(reg)
            reg_order.append(reg)

    def where(at: int) -> str:
        return f"{'FDE' if cie is not None else 'CIE'} at +{entry.offset:#x}, instruction at +{entry._insns + at:#x}"

    pos = 0
    while pos < end:
        op = data[pos]
        pos += 1
        high = op & 0xC0
        if high == 0x40:  # DW_CFA_advance_loc
            table.append(cur.copy())
            cur["pc"] += (op & 0x3F) * caf
        elif high == 0x80:  # DW_CFA_offset
            reg = op & 0x3F
            off, pos = _uleb(data, pos)
            order(reg)
            cur[reg] = RegisterRule(_OFFSET, off * daf)
        elif high == 0xC0:  # DW_CFA_restore
            _restore(cur, op & 0x3F, last_cie, cie, where(pos - 1))
            order(op & 0x3F)
        elif op == 0x0E:  # DW_CFA_def_cfa_offset
            off, pos = _uleb(data, pos)
            cur["cfa"] = CFARule(reg=cur["cfa"].reg, offset=off)
        elif op == 0x0C:  # DW_CFA_def_cfa
            reg, pos = _uleb(data, pos)
            off, pos = _uleb(data, pos)
            cur["cfa"] = CFARule(reg=reg, offset=off)
        elif op == 0x0D:  # DW_CFA_def_cfa_register
            reg, pos = _uleb(data, pos)
            cur["cfa"] = CFARule(reg=reg, offset=cur["cfa"].offset)
        elif op in (0x02, 0x03, 0x04):  # DW_CFA_advance_loc1/2/4
            if op == 0x02:
                delta = data[pos]
                pos += 1
            else:
                st = r.u16 if op == 0x03 else r.u32
                if pos + st.size > end:
                    raise IndexError
                delta = st.unpack_from(data, pos)[0]
                pos += st.size
            table.append(cur.copy())
            cur["pc"] += delta * caf
        elif op == 0x0A:  # DW_CFA_remember_state
            stack.append(cur.copy())
        elif op == 0x0B:  # DW_CFA_restore_state
            if not stack:
                raise EhFrameError(f"{where(pos - 1)}: DW_CFA_restore_state without a remembered state")
            pc = cur["pc"]
            cur = stack.pop()
            cur["pc"] = pc
        elif op == 0x00:  # DW_CFA_nop
            pass
        elif op in (0x05, 0x11, 0x14, 0x15):  # DW_CFA_offset_extended(_sf), DW_CFA_val_offset(_sf)
            reg, pos = _uleb(data, pos)
            off, pos = (_sleb if op in (0x11, 0x15) else _uleb)(data, pos)
            order(reg)
            cur[reg] = RegisterRule(_OFFSET if op in (0x05, 0x11) else _VAL_OFFSET, off * daf)
        elif op == 0x06:  # DW_CFA_restore_extended
            reg, pos = _uleb(data, pos)
            _restore(cur, reg, last_cie, cie, where(pos))
            order(reg)
        elif op in (0x07, 0x08):  # DW_CFA_undefined, DW_CFA_same_value
            reg, pos = _uleb(data, pos)
            order(reg)
            cur[reg] = RegisterRule(_UNDEFINED_RULE if op == 0x07 else _SAME_VALUE)
        elif op == 0x09:  # DW_CFA_register
            reg, pos = _uleb(data, pos)
            other, pos = _uleb(data, pos)
            order(reg)
            cur[reg] = RegisterRule(_REGISTER, other)
        elif op == 0x0F:  # DW_CFA_def_cfa_expression
            n, pos = _uleb(data, pos)
            if pos + n > end:
                raise IndexError
            cur["cfa"] = CFARule(expr=list(data[pos:pos + n]))
            pos += n
        elif op in (0x10, 0x16):  # DW_CFA_expression, DW_CFA_val_expression
            reg, pos = _uleb(data, pos)
            n, pos = _uleb(data, pos)
            if pos + n > end:
                raise IndexError
            order(reg)
            cur[reg] = RegisterRule(_EXPRESSION if op == 0x10 else _VAL_EXPRESSION, list(data[pos:pos + n]))
            pos += n
        elif op == 0x12:  # DW_CFA_def_cfa_sf: the offset factored by the data alignment factor
            reg, pos = _uleb(data, pos)
            off, pos = _sleb(data, pos)
            cur["cfa"] = CFARule(reg=reg, offset=off * daf)
        elif op == 0x13:  # DW_CFA_def_cfa_offset_sf
            off, pos = _sleb(data, pos)
            cur["cfa"] = CFARule(reg=cur["cfa"].reg, offset=off * daf)
        elif op == 0x01:  # DW_CFA_set_loc: an address in the FDE encoding (libgcc's reading)
            addr, nxt = r.pointer(own.fde_encoding, entry._insns + pos, entry._end, where(pos - 1))
            pos = nxt - entry._insns
            table.append(cur.copy())
            cur["pc"] = addr
        elif op == 0x2E:  # DW_CFA_GNU_args_size: the outgoing arguments' size, no rule
            _n, pos = _uleb(data, pos)
        elif op == 0x2F:  # DW_CFA_GNU_negative_offset_extended
            reg, pos = _uleb(data, pos)
            off, pos = _uleb(data, pos)
            order(reg)
            cur[reg] = RegisterRule(_OFFSET, -off * daf)
        elif op == 0x2D:  # DW_CFA_GNU_window_save / DW_CFA_AARCH64_negate_ra_state: no x86 rule
            pass
        else:
            raise EhFrameError(f"{where(pos - 1)}: unknown CFA opcode {op:#04x}")
        if pos > end:
            raise IndexError
    if cur["cfa"].reg is not None or len(cur) > 2:
        table.append(cur)
    return DecodedCallFrameTable(table=table, reg_order=reg_order)


def _restore(cur: dict, reg: int, last_cie: dict | None, cie: CIE | None, where: str) -> None:
    """DW_CFA_restore(_extended): the rule the CIE's initial instructions give ``reg``."""
    if cie is None:
        raise EhFrameError(f"{where}: DW_CFA_restore in a CIE")
    if last_cie is not None and reg in last_cie:
        cur[reg] = last_cie[reg]
    else:
        cur.pop(reg, None)
