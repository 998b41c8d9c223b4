"""Relocatable objects (ET_REL): the relocations of ``.sframe`` (and ``.eh_frame``) applied.

In an object file gas leaves every FDE's function start for the linker: the field holds 0 and a
relocation in ``.rela.sframe`` says what goes there (AMD64: ``R_X86_64_PC32`` against the text
section plus the function's offset in V1/V2, ``R_X86_64_PC64`` in V3, whose start field is
64 bits).  Every version's field is PC-relative once relocated -- S + A - P is the function's
distance from the field -- even where the header lacks ``SFRAME_F_FDE_FUNC_START_PCREL``
(V1/V2): ld reads the input that way and rewrites the output's starts.

Two placements of the sections, for two readers:

* :func:`relocated_section` with the sections where their headers put them (``sh_addr``, 0 in
  an object): what ``objdump --sframe`` of binutils 2.46+ shows (bfd's
  ``bfd_simple_get_relocated_section_contents`` leaves every section at its own vma);
* :func:`place_object`: every allocated section at an address of its own, laid out in section
  order as a linker would, the symbols made absolute and the relocations of ``.sframe``,
  ``.eh_frame`` and ``.debug_frame`` applied -- an image the checker can read like a linked
  file, where two functions of two text sections (``-ffunction-sections``, ``.text.startup``)
  no longer share address 0.

Relocation types are those of the AMD64 psABI (section 4.4) that these sections use; any other
type, or another machine, raises :class:`SFrameError` rather than guess.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from .errors import SFrameError

# AMD64 psABI table 4.9: type -> (bytes, PC-relative); the value is written modulo 2**bits, as
# bfd does once it has reported an overflow (signed and unsigned fields alike)
R_X86_64 = {
    1: (8, False),   # R_X86_64_64:   S + A
    2: (4, True),     # R_X86_64_PC32: S + A - P
    10: (4, False),  # R_X86_64_32:   S + A
    11: (4, False),   # R_X86_64_32S:  S + A
    24: (8, True),    # R_X86_64_PC64: S + A - P
}
R_X86_64_NONE = 0
SHF_ALLOC = 0x2
SHF_EXECINSTR = 0x4
SHT_NULL = 0
# Where the placed image starts: above 0, so that no function sits at address 0 (symbol readers
# take a zero value as "no address").
PLACE_BASE = 0x1000
APPLIED = (".sframe", ".eh_frame", ".debug_frame")


@dataclass
class Placed:
    """An object file laid out as if linked alone (see :func:`place_object`)."""

    data: bytes
    bases: dict[int, int]  # section index -> address
    text: list[tuple[int, int]] = field(default_factory=list)  # executable sections [start, end)
    relocated: list[str] = field(default_factory=list)  # the sections whose relocations were applied


def relocations_for(elf: ELFFile, index: int) -> tuple[int, RelocationSection] | None:
    """(index, section) of the SHT_RELA/SHT_REL section that applies to section ``index``."""
    for i, sec in enumerate(elf.iter_sections()):
        if isinstance(sec, RelocationSection) and sec["sh_info"] == index and sec["sh_type"] in ("SHT_RELA", "SHT_REL"):
            return i, sec
    return None


def relocated_section(elf: ELFFile, index: int, bases: dict[int, int] | None = None,
                      name: str = "<object>") -> bytes:
    """The contents of section ``index`` with its relocations applied, every section at
    ``bases[i]`` (default: its own ``sh_addr``).  Raises :class:`SFrameError` for a machine or
    relocation type this module does not know."""
    sec = elf.get_section(index)
    data = bytearray(sec.data())
    found = relocations_for(elf, index)
    if found is None:
        return bytes(data)
    rel = found[1]
    if bases is None:
        bases = {i: s["sh_addr"] for i, s in enumerate(elf.iter_sections())}
    _apply(elf, rel, data, bases, bases.get(index, sec["sh_addr"]), name, sec.name)
    return bytes(data)


def _apply(elf: ELFFile, rel: RelocationSection, data: bytearray, bases: dict[int, int], where: int,
           name: str, secname: str) -> None:
    if elf["e_machine"] != "EM_X86_64" or elf.elfclass != 64 or not elf.little_endian:
        raise SFrameError(f"{name}: relocations of {secname} are applied for x86-64 objects only, not "
                          f"{elf['e_machine']} (ELF{elf.elfclass})", field="relocation")
    if rel["sh_type"] != "SHT_RELA":
        raise SFrameError(f"{name}: {rel.name} is SHT_REL; x86-64 uses SHT_RELA", field="relocation")
    try:
        symtab = elf.get_section(rel["sh_link"])
        values = [_symbol_value(s, bases) for s in symtab.iter_symbols()]
        relocs = list(rel.iter_relocations())
    except (ELFError, AttributeError, IndexError) as exc:
        raise SFrameError(f"{name}: {rel.name} does not decode: {exc}", field="relocation") from exc
    for r in relocs:
        rtype, sym, off, addend = r["r_info_type"], r["r_info_sym"], r["r_offset"], r["r_addend"]
        if rtype == R_X86_64_NONE:
            continue
        if rtype not in R_X86_64:
            raise SFrameError(f"{name}: {rel.name}: relocation type {rtype} at {off:#x} is not one this "
                              f"reader applies ({', '.join(map(str, sorted(R_X86_64)))})", field="relocation",
                              offset=off)
        if sym >= len(values):
            raise SFrameError(f"{name}: {rel.name}: symbol index {sym} past the symbol table", field="relocation",
                              offset=off)
        size, pcrel = R_X86_64[rtype]
        if off + size > len(data):
            raise SFrameError(f"{name}: {rel.name}: relocation at {off:#x} runs past {secname} "
                              f"({len(data)} bytes)", field="relocation", offset=off)
        value = values[sym] + addend - (where + off if pcrel else 0)
        bits = size * 8
        value &= (1 << bits) - 1
        struct.pack_into("<Q" if size == 8 else "<I", data, off, value)


def _symbol_value(sym, bases: dict[int, int]) -> int:
    shndx = sym["st_shndx"]
    if shndx == "SHN_UNDEF":
        return 0
    if shndx == "SHN_ABS" or not isinstance(shndx, int):
        return sym["st_value"]
    return bases.get(shndx, 0) + sym["st_value"]


def place_object(data: bytes, name: str = "<object>") -> Placed:
    """The object ``data`` laid out as if linked alone at :data:`PLACE_BASE`: each SHF_ALLOC
    section at the next address its alignment allows (``sh_addr`` rewritten), each symbol's
    value made absolute, the relocations of :data:`APPLIED` applied and their relocation
    sections turned into SHT_NULL (so a reader does not apply them again).  The placement
    works for any ELF class and byte order; applying relocations for x86-64 only.  Raises
    :class:`SFrameError` where the input is not a readable ELF object or a relocation cannot be
    applied."""
    try:
        elf = ELFFile(io.BytesIO(data))
        if elf["e_type"] != "ET_REL":
            raise SFrameError(f"{name}: not a relocatable object ({elf['e_type']})", field="file")
        secs = list(elf.iter_sections())
    except ELFError as exc:
        raise SFrameError(f"{name}: not a readable ELF file: {exc}", field="file") from exc
    order = "<" if elf.little_endian else ">"
    word = "Q" if elf.elfclass == 64 else "I"
    # Elf64_Shdr.sh_addr at 16 (Elf32: 12); Elf64_Sym.st_value at 8 (Elf32: 4); sh_type at 4 in both
    sh_addr_at, st_value_at, sym_size = (16, 8, 24) if elf.elfclass == 64 else (12, 4, 16)
    out = bytearray(data)
    bases: dict[int, int] = {}
    text: list[tuple[int, int]] = []
    addr = PLACE_BASE
    for i, s in enumerate(secs):
        if not s["sh_flags"] & SHF_ALLOC:
            continue
        align = max(int(s["sh_addralign"]), 1)
        addr = (addr + align - 1) // align * align
        bases[i] = addr
        if s["sh_flags"] & SHF_EXECINSTR:
            text.append((addr, addr + s["sh_size"]))
        addr += s["sh_size"]
    relocated = []
    for i, s in enumerate(secs):
        if s.name not in APPLIED or s["sh_type"] == "SHT_NOBITS":
            continue
        found = relocations_for(elf, i)
        if found is None:
            continue
        rel_index, rel = found
        contents = bytearray(s.data())
        _apply(elf, rel, contents, bases, bases.get(i, 0), name, s.name)
        out[s["sh_offset"]:s["sh_offset"] + len(contents)] = contents
        struct.pack_into(order + "I", out, _shdr(elf, rel_index) + 4, SHT_NULL)  # sh_type
        relocated.append(s.name)
    for i, base in bases.items():
        struct.pack_into(order + word, out, _shdr(elf, i) + sh_addr_at, base)
    for s in secs:
        if s["sh_type"] != "SHT_SYMTAB":
            continue
        entsize = s["sh_entsize"] or sym_size
        for k, sym in enumerate(s.iter_symbols()):
            shndx = sym["st_shndx"]
            if isinstance(shndx, int) and shndx in bases:
                struct.pack_into(order + word, out, s["sh_offset"] + k * entsize + st_value_at,
                                 bases[shndx] + sym["st_value"])
    return Placed(bytes(out), bases, text, relocated)


def _shdr(elf: ELFFile, index: int) -> int:
    return elf["e_shoff"] + index * elf["e_shentsize"]
