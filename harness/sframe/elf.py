"""Finding the SFrame section of an ELF file (or taking one read out of guest memory).

The ``.sframe`` section is found by name in the section headers (its type is SHT_PROGBITS from
binutils 2.40-2.44 and SHT_GNU_SFRAME = 0x6ffffff4 from 2.45), or, when the section headers are
gone, through the PT_GNU_SFRAME program header (p_type 0x6474e554) -- the same route the kernel
takes.  Linkers up to 2.47 size that segment larger than the section (e.g. 0x137 bytes for a
0xfa-byte section): the parser reads only the bytes the header accounts for.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..rule import FrameRule
from .errors import SFrameError
from .parse import SFrameFDE, SFrameMatch, SFrameSection
from .reloc import Placed, relocated_section

PT_GNU_SFRAME = 0x6474E554
SHT_GNU_SFRAME = 0x6FFFFFF4
PF_X = 0x1


@dataclass
class SFrameTable:
    """An SFrame section placed at its run-time address, with where it came from."""

    section: SFrameSection
    source: str = "<bytes>"
    load_bias: int = 0
    # Executable PT_LOAD ranges [start, end) at run-time addresses (empty for from_bytes_at).
    text_ranges: list[tuple[int, int]] = field(default_factory=list)
    via: str = "bytes"  # "section", "PT_GNU_SFRAME" or "bytes"

    @classmethod
    def from_elf(cls, path: str | os.PathLike, load_bias: int = 0, *, strict: bool = True) -> SFrameTable:
        """Parse the SFrame data of the ELF file at ``path``, relocated by ``load_bias``.

        ``strict``: as for :meth:`SFrameSection.parse` (False for the checker, which reports
        ordering faults itself).

        A relocatable object's section is read as the ``objdump --sframe`` of the binutils
        that writes its version shows it: V3 (and V2 with FDE_FUNC_START_PCREL) with
        ``.rela.sframe`` applied, every section at its own address (0), as binutils 2.46+ do;
        V1 and V2 as stored, as binutils 2.40-2.44 do (their function starts then read 0).
        The checker places objects instead (:meth:`from_placed`).

        Raises :class:`SFrameError` (field ".sframe") if the file has neither a ``.sframe``
        section nor a PT_GNU_SFRAME segment, or is not an ELF file.
        """
        path = Path(path)
        try:
            with open(path, "rb") as f:
                return cls._from_elffile(ELFFile(f), str(path), load_bias, strict)
        except ELFError as exc:
            raise SFrameError(f"{path}: not a readable ELF file: {exc}", field=".sframe") from exc

    @classmethod
    def from_elf_data(cls, data: bytes, source: str, load_bias: int = 0, *, strict: bool = True) -> SFrameTable:
        """:meth:`from_elf` of an ELF file's bytes (an archive member), named ``source``."""
        try:
            return cls._from_elffile(ELFFile(io.BytesIO(data)), source, load_bias, strict)
        except ELFError as exc:
            raise SFrameError(f"{source}: not a readable ELF file: {exc}", field=".sframe") from exc

    @classmethod
    def _from_elffile(cls, elf: ELFFile, source: str, load_bias: int, strict: bool) -> SFrameTable:
        text = [(seg["p_vaddr"] + load_bias, seg["p_vaddr"] + seg["p_memsz"] + load_bias)
                for seg in elf.iter_segments()
                if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & PF_X]
        sec = elf.get_section_by_name(".sframe") if elf.num_sections() else None
        if sec is not None and sec["sh_type"] != "SHT_NOBITS":
            data, vaddr, via = sec.data(), sec["sh_addr"], "section"
            if elf["e_type"] == "ET_REL" and _objdump_relocates(data):
                data = relocated_section(elf, elf.get_section_index(".sframe"), name=source)
                via = "section, relocations applied"
        else:
            seg = next((s for s in elf.iter_segments() if segment_type(s) == PT_GNU_SFRAME), None)
            if seg is None:
                raise SFrameError(f"{source}: no .sframe section and no PT_GNU_SFRAME segment", field=".sframe")
            data, vaddr, via = seg.data(), seg["p_vaddr"], "PT_GNU_SFRAME"
        return cls(SFrameSection.parse(data, vaddr + load_bias, strict=strict), source, load_bias, text, via)

    @classmethod
    def from_placed(cls, placed: Placed, source: str, *, strict: bool = False) -> SFrameTable:
        """The ``.sframe`` of an object laid out by :func:`.reloc.place_object`: its function
        starts, relocated, are PC-relative whatever version the header has."""
        try:
            elf = ELFFile(io.BytesIO(placed.data))
            sec = elf.get_section_by_name(".sframe")
        except ELFError as exc:
            raise SFrameError(f"{source}: not a readable ELF file: {exc}", field=".sframe") from exc
        if sec is None or sec["sh_type"] == "SHT_NOBITS":
            raise SFrameError(f"{source}: no .sframe section", field=".sframe")
        pcrel = ".sframe" in placed.relocated or None
        return cls(SFrameSection.parse(sec.data(), sec["sh_addr"], strict=strict, pcrel=pcrel), source, 0,
                   list(placed.text), "section")

    @classmethod
    def from_bytes_at(cls, data: bytes, vaddr: int) -> SFrameTable:
        """An SFrame section read from (guest) memory at ``vaddr``."""
        return cls(SFrameSection.parse(data, vaddr), f"<memory at {vaddr:#x}>", 0, [], "bytes")

    # Delegation to the section: the narrow interface unwinders use.
    @property
    def header(self):
        return self.section.header

    @property
    def fdes(self) -> list[SFrameFDE]:
        return self.section.fdes

    def find_fde(self, pc: int) -> SFrameFDE | None:
        return self.section.find_fde(pc)

    def find_fre(self, pc: int) -> SFrameMatch | None:
        return self.section.find_fre(pc)

    def rule_for(self, pc: int) -> FrameRule | None:
        return self.section.rule_for(pc)


def _objdump_relocates(data: bytes) -> bool:
    """objdump 2.46+ (which writes V3) applies an object's .rela.sframe; 2.40 and 2.44 do not."""
    if len(data) < 4 or data[2] not in (1, 2, 3):
        return False  # let the parser name what is wrong
    flags = data[3]
    return data[2] >= 3 or bool(flags & 0x4)  # SFRAME_F_FDE_FUNC_START_PCREL: 2.45, unverified


def segment_type(seg) -> int | str:
    t = seg["p_type"]
    return PT_GNU_SFRAME if t == "PT_GNU_SFRAME" else t
