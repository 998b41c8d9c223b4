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

from .elfsyms import FUNCTION_TYPE_NUMBERS, SHN_UNDEF, STB_GLOBAL, STT_TLS, symbols
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


# ------------------------------------------------------------------------------ PLT entries and places

# The x86-64 PLT sections whose entries objdump -d names ``NAME@plt`` (bfd's synthetic symbols,
# elf_x86_64_get_synthetic_symtab): the lazy .plt (its PLT0 and, with .plt.sec beside it, its
# entries jump to PLT0, not through a GOT slot: no name), the IBT second PLT .plt.sec, the
# non-lazy .plt.got (a function whose GOT slot is a GLOB_DAT relocation, such as crtbeginS's
# __cxa_finalize) and MPX's .plt.bnd.
PLT_SECTIONS = (".plt", ".plt.sec", ".plt.got", ".plt.bnd")
EM_X86_64 = "EM_X86_64"
R_X86_64_IRELATIVE = 37
ENDBR64 = b"\xf3\x0f\x1e\xfa"
_JMP_SLOT = b"\xff\x25"  # jmp *disp32(%rip)
STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE = 1, 2, 3, 4
STB_LOCAL = 0
SHN_LORESERVE = 0xFF00  # SHN_ABS, SHN_COMMON and the other reserved indexes from here
_NOT_PLACES = frozenset((STT_SECTION, STT_FILE, STT_TLS))  # symbols objdump does not name addresses by


def plt_symbols(image: ElfImage) -> list[Symbol]:
    """``NAME@plt`` for each x86-64 PLT entry that jumps through a GOT slot a dynamic relocation
    names, at the entry's start and of its size, as ``objdump -d`` labels them: NAME is the
    relocation's symbol (``+0xADDEND`` after it where the addend is not 0), ``*ABS*+0xADDEND``
    for an R_X86_64_IRELATIVE slot.  An entry is 16 bytes (8 in a .plt.got without IBT: no
    endbr64 at its start); its jump, ``ff 25 disp32``, follows an optional endbr64 and an
    optional ``bnd`` prefix.  An entry without one (PLT0, an IBT .plt's, mold's) has no name.
    Kept per image; empty for other machines and classes."""
    return image.cached("plt_symbols", _plt_symbols)


def _plt_symbols(image: ElfImage) -> list[Symbol]:
    elf = image.elf
    if elf["e_machine"] != EM_X86_64 or elf.elfclass != 64 or not elf.num_sections():
        return []
    slots = _plt_slot_names(image)
    out: list[Symbol] = []
    for secname in PLT_SECTIONS:
        sec = elf.get_section_by_name(secname)
        if sec is None or sec["sh_type"] != "SHT_PROGBITS" or not sec["sh_size"]:
            continue
        data, base = sec.data(), sec["sh_addr"]
        size = 8 if secname == ".plt.got" and not data.startswith(ENDBR64) else 16
        for at in range(0, len(data) - size + 1, size):
            p = at + 4 if data[at:at + 4] == ENDBR64 else at
            p += data[p:p + 1] == b"\xf2"  # bnd
            if data[p:p + 2] != _JMP_SLOT or p + 6 > at + size:
                continue
            disp = struct.unpack_from("<i", data, p + 2)[0]
            name = slots.get(base + p + 6 + disp)
            if name is not None:
                out.append(Symbol(f"{name}@plt", base + at, size))
    return out



def _plt_slot_names(image: ElfImage) -> dict[int, str]:
    """GOT slot address -> the name a PLT entry jumping through it gets (see :func:`plt_symbols`),
    from the RELA sections linked to the dynamic symbol table (.rela.plt, .rela.dyn)."""
    elf = image.elf
    out: dict[int, str] = {}
    for sec in elf.iter_sections():
        if sec["sh_type"] != "SHT_RELA" or not sec["sh_link"]:
            continue
        symtab = elf.get_section(sec["sh_link"])
        if symtab["sh_type"] != "SHT_DYNSYM":
            continue
        syms = symbols(image, symtab.name) or []
        data = sec.data()
        for offset, info, addend in struct.iter_unpack("<QQq", data[:len(data) - len(data) % 24]):
            sym, kind = info >> 32, info & 0xFFFFFFFF
            if sym and sym < len(syms):
                out.setdefault(offset, syms[sym].name + (f"+{addend:#x}" if addend else ""))
            elif not sym and kind == R_X86_64_IRELATIVE:
                out.setdefault(offset, f"*ABS*+{addend:#x}")
    return out


class Places:
    """Where a link-time address of one ELF image lies: the allocated section holding it and the
    symbol, ``name`` or ``name+0xoff``, as ``objdump -d`` names an address.

    The symbols are objdump's: ``.symtab``'s (``.dynsym``'s when there is none) but section, file,
    TLS, undefined, absolute and common ones, and the PLT entries' (:func:`plt_symbols`).  Of
    several at one address the one objdump's ``compare_symbols`` sorts first names it: a
    function (STT_FUNC; an IFUNC is not one to it), an object, not local, global (not weak), the
    larger, not starting with ".", then by name; a PLT entry's is a global function of no size.
    A sized symbol names the addresses it covers, a 0-byte one (an assembly label) the addresses
    after it in its section up to the next symbol.  Past the end of the function below it, or
    in no section, an address has no symbol (objdump would still count from the one below):
    :meth:`describe` says so, ``no symbol`` / ``no section``, rather than omit it."""

    def __init__(self, image: ElfImage):
        self.image = image
        self._built = False

    def _build(self) -> None:
        elf = self.image.elf
        self._sections: list[tuple[int, int, str]] = []
        for sec in elf.iter_sections() if elf.num_sections() else ():
            flags = sec["sh_flags"]
            if flags & 0x2 and not flags & 0x400 and sec["sh_size"]:  # SHF_ALLOC, not SHF_TLS
                self._sections.append((sec["sh_addr"], sec["sh_addr"] + sec["sh_size"], sec.name))
        best: dict[int, tuple[tuple, str, int]] = {}  # address -> (rank, name, the largest size there)

        def add(name: str, addr: int, size: int, rank: tuple) -> None:
            prev = best.get(addr)
            if prev is None or rank < prev[0]:
                best[addr] = (rank, name, max(size, prev[2] if prev else 0))
            else:
                best[addr] = (prev[0], prev[1], max(size, prev[2]))

        table = symbols(self.image, ".symtab")
        versions: list[str] = []
        if not table:  # stripped: the dynamic symbols, with their versions as objdump shows them
            table = symbols(self.image, ".dynsym") or []
            versions = _version_suffixes(elf, len(table))
        for k, s in enumerate(table):
            if s.type in _NOT_PLACES or not 0 < s.shndx < SHN_LORESERVE or not s.value:
                continue
            # ranked by the bare name, as objdump sorts them (the version is added when printed);
            # of equals the first in the table (glibc's qsort is a stable merge sort)
            add(s.name + (versions[k] if versions else ""), s.value, s.size,
                _objdump_rank(s.name, s.type, s.bind, s.size))
        for p in plt_symbols(self.image):
            add(p.name, p.addr, p.size, _objdump_rank(p.name, STT_FUNC, STB_GLOBAL, 0))
        self._symbols = sorted((Symbol(name, addr, size) for addr, (_, name, size) in best.items()),
                               key=lambda s: s.addr)
        self._starts = [s.addr for s in self._symbols]
        self._built = True

    def section(self, addr: int) -> str | None:
        """The name of the first allocated section (not TLS) holding ``addr``, or None."""
        if not self._built:
            self._build()
        return next((name for lo, hi, name in self._sections if lo <= addr < hi), None)

    def symbol(self, addr: int) -> str | None:
        """``name`` (at its start) or ``name+0xoff`` of the symbol ``addr`` lies in, or None."""
        if not self._built:
            self._build()
        lo = next((lo for lo, hi, _ in self._sections if lo <= addr < hi), None)
        if lo is None:
            return None  # in no section: no symbol speaks for it
        label = None  # the nearest 0-byte symbol at or below addr in its section
        i = bisect.bisect_right(self._starts, addr) - 1
        for j in range(i, max(-1, i - 64), -1):  # pragma: no mutate (a bound on the walk: nested symbols are few)
            s = self._symbols[j]
            if s.addr < lo:
                break  # another section's
            if s.size:
                if label is None and addr < s.addr + s.size:
                    label = s  # the function covering it (a nearer label inside it would name it)
                break  # below a sized symbol nothing nearer can speak
            if label is None:
                label = s
        if label is None:
            return None
        return label.name if addr == label.addr else f"{label.name}+{addr - label.addr:#x}"

    def describe(self, addr: int) -> str:
        """``in SECTION (SYMBOL)``, with ``no section`` / ``no symbol`` where there is none."""
        return f"in {self.section(addr) or 'no section'} ({self.symbol(addr) or 'no symbol'})"


def _version_suffixes(elf, count: int) -> list[str]:
    """Each dynamic symbol's version as objdump appends it to a defined one's name: ``@@VER``
    for its default version, ``@VER`` for a hidden one (bit 15 of its .gnu.version entry), none
    for the local and global indexes (0, 1) and the file's base version; [] without versions."""
    versym = next((s for s in elf.iter_sections() if s["sh_type"] == "SHT_GNU_versym"), None)
    verdef = next((s for s in elf.iter_sections() if s["sh_type"] == "SHT_GNU_verdef"), None)
    if versym is None or verdef is None:
        return []
    names: dict[int, str] = {}
    for vd, auxes in verdef.iter_versions():
        if not vd["vd_flags"] & 0x1:  # VER_FLG_BASE: the file's own name
            names[vd["vd_ndx"]] = next(iter(auxes)).name
    data = versym.data()
    entries = [v for (v,) in struct.iter_unpack("<H", data[:len(data) - len(data) % 2])]
    out = []
    for k in range(count):
        v = entries[k] if k < len(entries) else 0
        ver = names.get(v & 0x7FFF)
        out.append("" if ver is None else ("@" if v & 0x8000 else "@@") + ver)
    return out


def _objdump_rank(name: str, kind: int, bind: int, size: int) -> tuple:
    """objdump's ``compare_symbols`` order of symbols at one address, as a sort key: functions
    first, then objects, then not local, then global, then the larger, then names not starting
    with ".", then by name (bytes)."""
    return (kind != STT_FUNC, kind != STT_OBJECT, bind == STB_LOCAL, bind != STB_GLOBAL, -size,
            name.startswith("."), name.encode())


def places(image: ElfImage) -> Places:
    return image.cached("places", Places)
