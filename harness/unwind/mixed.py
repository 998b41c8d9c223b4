"""Mixed unwinding wired to real SFrame tables: ``tables_for(ip)`` over a task's address space.

The out-of-tree SFrame series looks up the IP in the SFrame sections the task registered (one per
mapped ELF with PT_GNU_SFRAME); :func:`sframe_tables_for` does the same over an
:class:`AddressSpace`: the ELF mapped at the IP, its ``.sframe`` placed at the load bias (the
vDSO's read from memory), cached per ELF.  An ELF without SFrame data has no table, so the
unwinder falls back to frame pointers there, as the kernel does on ``-ENOENT``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..sframe import SFrameError, SFrameTable
from ..sframe.elf import PT_GNU_SFRAME
from .maps import VDSO, AddressSpace, MappedElf
from .user import RuleProvider


def sframe_table(elf: MappedElf) -> RuleProvider | None:
    """The SFrame table of one mapped ELF at run-time addresses, or None if it has none."""
    try:
        if elf.path == VDSO:
            sec = elf.image.elf.get_section_by_name(".sframe")
            if sec is None:
                return None
            return SFrameTable.from_bytes_at(sec.data(), sec["sh_addr"] + elf.bias)
        if not any(seg.p_type in ("PT_GNU_SFRAME", PT_GNU_SFRAME) for seg in elf.image.segments):
            # The kernel registers a module's SFrame data through PT_GNU_SFRAME only: a .sframe
            # section without it (gold, mold, lld leave the segment out) is not looked up.
            return None
        return SFrameTable.from_elf(elf.image.name, load_bias=elf.bias)
    except SFrameError:
        return None


def sframe_tables_for(space: AddressSpace) -> Callable[[int], RuleProvider | None]:
    return space.tables_for(sframe_table)
