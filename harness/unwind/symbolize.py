"""``func+0xoff`` names for the addresses of a trace, from the ELF images mapped in the task.

Function symbols come from ``.symtab`` (and ``.dynsym``, for stripped shared objects and the
vDSO), indexed once per image with bisect.  Return addresses (every entry after the first)
are looked up at ``ra - 1``, the call instruction, so a call at the very end of a function
(``noreturn``) still names its caller; the offset printed is the return address's own.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from .elfsyms import FUNCTION_TYPE_NUMBERS, SHN_UNDEF, STB_GLOBAL, symbols
from .maps import AddressSpace, ElfImage

# The symbol types of functions: STT_FUNC and STT_GNU_IFUNC, which is 10 and which pyelftools 0.33
# names by the first name of 10 in its table, STT_LOOS (it never says "STT_GNU_IFUNC").  The
# symbol tables are read by elfsyms.py, whose FUNCTION_TYPE_NUMBERS are these as numbers
# (tests/unit/unwind/test_elfsyms.py holds the two equal on real binaries).
FUNCTION_TYPES = ("STT_FUNC", "STT_LOOS")


@dataclass(frozen=True)
class Symbol:
    name: str
    addr: int  # link-time address
    size: int


@dataclass(frozen=True)
class Location:
    addr: int
    symbol: str | None
    offset: int
    module: str | None

    def __str__(self) -> str:
        if self.symbol is not None:
            return f"{self.symbol}+{self.offset:#x}"
        if self.module is not None:
            return f"{self.module.rsplit('/', 1)[-1]}+{self.offset:#x}"
        return f"{self.addr:#x}"


class SymbolIndex:
    """Sorted function symbols of one image."""

    def __init__(self, image: ElfImage):
        syms: dict[int, Symbol] = {}
        for secname in (".dynsym", ".symtab"):  # .symtab last: its names win on equal addresses
            for s in symbols(image, secname) or ():
                if s.type not in FUNCTION_TYPE_NUMBERS or not s.value:
                    continue
                if s.shndx == SHN_UNDEF:
                    continue
                prev = syms.get(s.value)
                # prefer the global name over local aliases, then the longer size
                if prev is None or (s.bind == STB_GLOBAL and prev.size <= s.size):
                    syms[s.value] = Symbol(s.name.split("@")[0], s.value, s.size)
        self.symbols = sorted(syms.values(), key=lambda s: s.addr)
        self._addrs = [s.addr for s in self.symbols]

    def lookup(self, link_addr: int) -> Symbol | None:
        i = bisect.bisect_right(self._addrs, link_addr) - 1
        if i < 0:
            return None
        s = self.symbols[i]
        if s.size and link_addr >= s.addr + s.size:
            return None
        return s

    def address_of(self, name: str) -> int | None:
        for s in self.symbols:
            if s.name == name:
                return s.addr
        return None


def symbol_index(image: ElfImage) -> SymbolIndex:
    return image.cached("symbols", SymbolIndex)


def _slot_symbols(image: ElfImage) -> dict[int, tuple]:
    # struct over the sections' bytes: pyelftools' relocation iterator takes seconds over
    # libstdc++'s .rela.dyn (its thousands of R_X86_64_RELATIVE), for a few hundred named slots.
    elf = image.elf
    wide = elf.elfclass == 64
    out: dict[int, tuple] = {}  # slot -> (symbol table, index): named when asked
    for sec in elf.iter_sections():
        kind = sec["sh_type"]
        if kind not in ("SHT_RELA", "SHT_REL") or not sec["sh_link"]:
            continue
        fmt = ("<QQq" if kind == "SHT_RELA" else "<QQ") if wide else ("<IIi" if kind == "SHT_RELA" else "<II")
        symtab = elf.get_section(sec["sh_link"])
        data = sec.data()
        for entry in struct.iter_unpack(fmt, data[:len(data) - len(data) % struct.calcsize(fmt)]):
            sym = entry[1] >> 32 if wide else entry[1] >> 8
            if sym:
                out[entry[0]] = (symtab, sym)
    return out


def slot_symbol(image: ElfImage, link_addr: int) -> str | None:
    """The symbol the dynamic relocation of the word at ``link_addr`` binds it to (a PLT entry's
    GOT slot: R_X86_64_JUMP_SLOT, or GLOB_DAT in a -z now build's .plt.got), or None.  What a PLT
    entry calls, known from the file alone (the slot's bound value is in the task's memory)."""
    found = image.cached("slot_symbols", _slot_symbols).get(link_addr)
    return found[0].get_symbol(found[1]).name.split("@")[0] if found else None


class Symbolizer:
    def __init__(self, space: AddressSpace):
        self.space = space

    def locate(self, addr: int, return_address: bool = False) -> Location:
        probe = addr - 1 if return_address else addr
        e = self.space.elf_at(probe)
        if e is None:
            m = self.space.mapping_at(probe)
            if m is not None and m.path:
                return Location(addr, None, addr - m.start + m.offset, m.path)
            return Location(addr, None, 0, None)
        sym = symbol_index(e.image).lookup(e.link_address(probe))
        if sym is None:
            return Location(addr, None, e.link_address(addr), e.path)
        return Location(addr, sym.name, e.link_address(addr) - sym.addr, e.path)

    def name(self, addr: int, return_address: bool = False) -> str:
        return str(self.locate(addr, return_address))

    def frame_record(self, addr: int, return_address: bool = False) -> list:
        """``[address, module file name, "symbol+0xoff" or ""]``: a frame as stack records (and
        their renderers, :mod:`harness.report`) hold it."""
        loc = self.locate(addr, return_address)
        return [addr, (loc.module or "").rsplit("/", 1)[-1], f"{loc.symbol}+{loc.offset:#x}" if loc.symbol else ""]

    def frame_records(self, ips, marks=frozenset({0})) -> list[list]:
        """:meth:`frame_record` of every entry: return addresses (entries not in ``marks``) are
        looked up at ra - 1, interrupted IPs at themselves."""
        return [self.frame_record(ip, k not in marks) for k, ip in enumerate(ips)]

    def trace(self, ips: list[int]) -> list[str]:
        """Names for a trace whose first entry is the interrupted IP and the rest return addresses."""
        return [self.name(ip, i > 0) for i, ip in enumerate(ips)]

    def functions(self, ips: list[int]) -> list[str | None]:
        """Just the function names (None where unknown), for comparing traces by function."""
        return [self.locate(ip, i > 0).symbol for i, ip in enumerate(ips)]

    def address_of(self, name: str, path_suffix: str = "") -> int | None:
        """The runtime address of function ``name`` in a mapped ELF whose path ends with ``path_suffix``."""
        for e in self.space.elves():
            if not e.path.endswith(path_suffix):
                continue
            a = symbol_index(e.image).address_of(name)
            if a is not None:
                return a + e.bias
        return None
