"""Finding the SFrame section of an ELF file (or taking one read out of guest memory).

The ``.sframe`` section is found by name in the section headers (its type is SHT_PROGBITS from
binutils 2.40-2.44 and SHT_GNU_SFRAME = 0x6ffffff4 from 2.45), or, when the section headers are
gone, through the PT_GNU_SFRAME program header (p_type 0x6474e554) -- the same route the kernel
takes.  Linkers up to 2.47 size that segment larger than the section (e.g. 0x137 bytes for a
0xfa-byte section): the parser reads only the bytes the header accounts for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..rule import FrameRule
from .errors import SFrameError
from .parse import SFrameFDE, SFrameMatch, SFrameSection

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

        Raises :class:`SFrameError` (field ".sframe") if the file has neither a ``.sframe``
        section nor a PT_GNU_SFRAME segment, or is not an ELF file.
        """
        path = Path(path)
        try:
            with open(path, "rb") as f:
                elf = ELFFile(f)
                text = [(seg["p_vaddr"] + load_bias, seg["p_vaddr"] + seg["p_memsz"] + load_bias)
                        for seg in elf.iter_segments()
                        if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & PF_X]
                sec = elf.get_section_by_name(".sframe") if elf.num_sections() else None
                if sec is not None and sec["sh_type"] != "SHT_NOBITS":
                    data, vaddr, via = sec.data(), sec["sh_addr"], "section"
                else:
                    seg = next((s for s in elf.iter_segments() if _p_type(s) == PT_GNU_SFRAME), None)
                    if seg is None:
                        raise SFrameError(f"{path}: no .sframe section and no PT_GNU_SFRAME segment",
                                          field=".sframe")
                    data, vaddr, via = seg.data(), seg["p_vaddr"], "PT_GNU_SFRAME"
        except ELFError as exc:
            raise SFrameError(f"{path}: not a readable ELF file: {exc}", field=".sframe") from exc
        return cls(SFrameSection.parse(data, vaddr + load_bias, strict=strict), str(path), load_bias, text, via)

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


def _p_type(seg) -> int | str:
    t = seg["p_type"]
    return PT_GNU_SFRAME if t == "PT_GNU_SFRAME" else t
