"""An ELF symbol table (``.symtab``, ``.dynsym``) read with ``struct``.

Why it exists: pyelftools' ``SymbolTableSection.iter_symbols()`` parses each entry through its
construct structs and reads each name through a seek and a read of the stream, about 15 us a
symbol: 0.4 s for a static binary's 25,000 symbols, most of what ``harness sframe check`` spends
on one binary after its ``.eh_frame`` (ehframe.py), and again in each :class:`SymbolIndex`.  This
reader unpacks the same entries with one ``struct.iter_unpack`` and slices each name out of the
file's bytes; pyelftools still finds the section (its header, its type, its string table).

Each symbol is what pyelftools reads: the name as ``Symbol.name`` (the string table's bytes from
the name's offset to the next NUL, decoded as UTF-8 with replacement; "" with no NUL before the
file's end), the value, the size, and ``st_info``'s type and binding and ``st_shndx`` as numbers
(pyelftools names them: type 2 ``STT_FUNC``, 10 ``STT_LOOS`` (it never says ``STT_GNU_IFUNC``),
section index 0 ``SHN_UNDEF``).  tests/unit/unwind/test_elfsyms.py holds both readers equal on
real binaries.  An entry size that is not the class's, or a table past the file's end, is read by
pyelftools as before.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from elftools.elf.enums import ENUM_ST_INFO_BIND, ENUM_ST_INFO_TYPE, ENUM_ST_SHNDX
from elftools.elf.sections import SymbolTableSection

from .maps import ElfImage

__all__ = ["FUNCTION_TYPE_NUMBERS", "RawSymbol", "STB_GLOBAL", "STT_TLS", "SHN_UNDEF", "symbols"]

STT_FUNC, STT_TLS, STT_GNU_IFUNC = 2, 6, 10
FUNCTION_TYPE_NUMBERS = frozenset((STT_FUNC, STT_GNU_IFUNC))  # symbolize.FUNCTION_TYPES, as numbers
STB_GLOBAL = 1
SHN_UNDEF = 0


class RawSymbol(NamedTuple):
    name: str
    value: int  # st_value
    size: int  # st_size
    type: int  # st_info & 0xf (STT_*)
    bind: int  # st_info >> 4 (STB_*)
    shndx: int  # st_shndx, a number (SHN_UNDEF is 0)


def symbols(image: ElfImage, secname: str) -> list[RawSymbol] | None:
    """The symbols of ``image``'s section ``secname`` in the table's order (entry 0, the null
    symbol, too), or None when there is no such section or it is no symbol table.  Kept per image."""
    return image.cached("elfsyms:" + secname, lambda img: _read(img, secname))


def _read(image: ElfImage, secname: str) -> list[RawSymbol] | None:
    elf = image.elf
    sec = elf.get_section_by_name(secname)
    if not isinstance(sec, SymbolTableSection):
        return None
    is64 = elf.elfclass == 64
    order = "<" if elf.little_endian else ">"
    entry = struct.Struct(order + ("IBBHQQ" if is64 else "IIIBBH"))
    data = image.data
    start, size, entsize = sec["sh_offset"], sec["sh_size"], sec["sh_entsize"]
    if entsize != entry.size or start + size > len(data):
        return _read_pyelftools(sec)
    strtab = elf.get_section(sec["sh_link"])
    base = strtab["sh_offset"]
    find = data.find
    out = []
    for fields in entry.iter_unpack(data[start:start + size - size % entsize]):
        if is64:
            st_name, info, _, shndx, value, sym_size = fields
        else:
            st_name, value, sym_size, info, _, shndx = fields
        pos = base + st_name
        end = find(b"\0", pos)
        name = data[pos:end].decode("utf-8", "replace") if end > pos else ""
        out.append(RawSymbol(name, value, sym_size, info & 0xF, info >> 4, shndx))
    return out


def _number(names: dict, value) -> int:
    """pyelftools' name of a field's value back to the number (a value it has no name for it
    passes on as the number)."""
    return value if isinstance(value, int) else names[value]


_TYPES = {k: v for k, v in ENUM_ST_INFO_TYPE.items() if k != "_default_"}
_BINDS = {k: v for k, v in ENUM_ST_INFO_BIND.items() if k != "_default_"}
_SHNDX = {k: v for k, v in ENUM_ST_SHNDX.items() if k != "_default_"}


def _read_pyelftools(sec: SymbolTableSection) -> list[RawSymbol]:
    """The same symbols through pyelftools (the odd tables :func:`_read` leaves to it)."""
    return [RawSymbol(s.name, s["st_value"], s["st_size"], _number(_TYPES, s["st_info"]["type"]),
                      _number(_BINDS, s["st_info"]["bind"]), _number(_SHNDX, s["st_shndx"]))
            for s in sec.iter_symbols()]
