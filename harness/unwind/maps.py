"""A task's address space: ``/proc/PID/maps`` and the ELF images mapped in it.

``parse_maps()`` reads the text format of ``/proc/PID/maps`` (fs/proc/task_mmu.c,
``show_map_vma``): ``start-end perms offset major:minor inode [path]``.  An
:class:`AddressSpace` answers "which ELF is mapped at this IP, and with which load bias".

One load bias per module, as the loaders place it: the kernel (fs/binfmt_elf.c,
``load_elf_binary``/``elf_load``) and ld.so (elf/dl-map-segments.h) map every PT_LOAD at
``bias + PAGEDOWN(p_vaddr)`` from file offset ``PAGEDOWN(p_offset)``, one bias for the whole
module (0 for an ET_EXEC).  The bias comes from the module's lowest mapping, the first PT_LOAD's;
every other mapping of the same instance must then be one some PT_LOAD explains at that bias
(``start == bias + PAGEDOWN(p_vaddr) + offset - PAGEDOWN(p_offset)``, ``offset`` inside the
segment's file pages: a mapping split by mprotect, RELRO, starts inside its segment), or a piece
of what ld.so reserved for the module and no segment maps again (the PROT_NONE holes between the
segments of a module aligned above the page; read-only where a PT_GNU_RELRO reaches into one):
its offset runs on from the first segment's.  And every PT_LOAD must be mapped there, its first
byte at ``bias + p_vaddr`` from ``p_offset``.  mold and lld put several PT_LOADs in one file
page, so a mapping's offset alone does not name its segment.  A mapping no segment explains,
two that imply different biases, a segment not mapped: a :class:`LoadBiasError`, never "no ELF
here".  The same file mapped twice is two modules, each checked on its own.  The vDSO has no
file: its image is read from memory and its bias is its first PT_LOAD's.

Guest paths become host files through a ``resolve(path) -> Path | None`` callable (the guest's
``/tc/trixie/lib64/libc.so.6`` is a file under a toolchain root on the host).  Nothing here
starts a process; files are read, never executed.
"""

from __future__ import annotations

import bisect
import io
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..errors import EXIT_USAGE, HarnessError
from ..memory import Memory, MemoryFault

VDSO = "[vdso]"

_MAPS_LINE = re.compile(
    r"^([0-9a-fA-F]+)-([0-9a-fA-F]+)\s+([r-][w-][x-][ps-])\s+([0-9a-fA-F]+)\s+"
    r"([0-9a-fA-F]+:[0-9a-fA-F]+)\s+(\d+)\s*(.*)$"
)


class MapsError(HarnessError, ValueError):
    """A maps line does not parse; carries the line."""

    exit_code = EXIT_USAGE  # bad input

    def __init__(self, line: str, lineno: int):
        self.line = line
        self.lineno = lineno
        super().__init__(f"maps line {lineno} does not parse: {line!r}")


PAGE = 0x1000  # x86-64's page: the loaders map whole pages


def page_down(x: int) -> int:
    return x & ~(PAGE - 1)


def page_up(x: int) -> int:
    return (x + PAGE - 1) & ~(PAGE - 1)


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    offset: int
    dev: str = "00:00"
    inode: int = 0
    path: str = ""

    @property
    def executable(self) -> bool:
        return "x" in self.perms

    @property
    def is_file(self) -> bool:
        return self.path.startswith("/")

    def __contains__(self, addr: int) -> bool:
        return self.start <= addr < self.end

    def to_line(self) -> str:
        s = f"{self.start:08x}-{self.end:08x} {self.perms} {self.offset:08x} {self.dev} {self.inode}"
        return f"{s:<72} {self.path}" if self.path else s


def parse_maps(text: str) -> list[Mapping]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _MAPS_LINE.match(line.strip())
        if not m:
            raise MapsError(line, n)
        start, end, perms, off, dev, inode, path = m.groups()
        lo, hi = int(start, 16), int(end, 16)
        if not lo < hi <= 1 << 64:  # show_map_vma() prints vm_start-vm_end of a non-empty VMA
            raise MapsError(line, n)
        out.append(Mapping(lo, hi, perms, int(off, 16), dev, int(inode), path.strip()))
    return sorted(out, key=lambda m: m.start)


# --- ELF images -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Segment:
    p_type: str
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int

    def __str__(self) -> str:
        return (f"{self.p_type} offset {self.offset:#x} vaddr {self.vaddr:#x} filesz {self.filesz:#x} "
                f"memsz {self.memsz:#x} align {self.align:#x}")

    def implied_bias(self, m: Mapping) -> int | None:
        """The bias at which the loaders would have made mapping ``m`` of this segment: None if
        ``m``'s offset is not in the segment's file pages."""
        if not (self.filesz and page_down(self.offset) <= m.offset < page_up(self.offset + self.filesz)):
            return None
        return m.start - (page_down(self.vaddr) + m.offset - page_down(self.offset))


class LoadBiasError(HarnessError, ValueError):
    """One module's mappings and its PT_LOAD segments disagree: a mapping no segment explains at
    the module's bias, two mappings that imply different biases, an ET_EXEC not where it was
    linked.  Carries the path, the module's mappings and its PT_LOADs (the maps and the ELF file
    the resolver gave are not the same layout: another build of the file, or a loader this
    harness does not model)."""

    exit_code = EXIT_USAGE  # the maps and the ELF given disagree: bad input

    def __init__(self, path: str, why: str, mappings, loads):
        self.path = path
        self.why = why
        self.mappings = tuple(mappings)
        self.loads = tuple(loads)
        super().__init__(f"load bias of {path}: {why}\n  mappings:\n"
                         + "".join(f"    {m.to_line()}\n" for m in self.mappings)
                         + "  PT_LOADs:\n" + "\n".join(f"    {s}" for s in self.loads))


class ElfImage:
    """One ELF file's bytes, parsed lazily; shared by the CFI oracle and the symbolizer."""

    def __init__(self, name: str, data: bytes):
        self.name = name
        self.data = data
        self._elf: ELFFile | None = None
        self._segments: list[Segment] | None = None
        self.cache: dict[str, object] = {}  # per-image caches of the modules that use it

    def cached(self, key: str, make):
        """``make(self)`` computed once per image and kept under ``key``."""
        if key not in self.cache:
            self.cache[key] = make(self)
        return self.cache[key]

    @classmethod
    def from_path(cls, path: str | os.PathLike) -> ElfImage:
        return cls(str(path), Path(path).read_bytes())

    @property
    def elf(self) -> ELFFile:
        if self._elf is None:
            try:
                self._elf = ELFFile(io.BytesIO(self.data))
            except ELFError as exc:
                raise MapsError(f"{self.name}: not an ELF file ({exc})", 0) from exc
        return self._elf

    @property
    def segments(self) -> list[Segment]:
        if self._segments is None:
            self._segments = [
                Segment(s["p_type"], s["p_offset"], s["p_vaddr"], s["p_filesz"], s["p_memsz"], s["p_align"])
                for s in self.elf.iter_segments()
            ]
        return self._segments

    @property
    def is_pie_or_shared(self) -> bool:
        return self.elf["e_type"] == "ET_DYN"

    @property
    def loads(self) -> list[Segment]:
        """The PT_LOAD segments in address order (the order the ELF gives them, gABI: ascending
        p_vaddr); none for an image no loader maps (ET_REL, ET_CORE)."""
        if self.elf["e_type"] not in ("ET_EXEC", "ET_DYN"):
            return []
        return sorted((s for s in self.segments if s.p_type == "PT_LOAD"), key=lambda s: s.vaddr)

    def span(self) -> int:
        """The bytes the loaders reserve for one instance: the first PT_LOAD's page to the last's end."""
        loads = self.loads
        return page_up(max(s.vaddr + s.memsz for s in loads)) - page_down(loads[0].vaddr)

    def module_bias(self, path: str, mappings: list[Mapping]) -> int:
        """The one load bias of the instance of this image mapped by ``mappings`` (its mappings,
        in address order), checked against every one of them; a :class:`LoadBiasError` where
        they disagree.

        The loaders map the first PT_LOAD first, at the module's lowest address: the lowest
        mapping, from the first PT_LOAD's file page, gives the bias.  Where the lowest mapping is
        not that one (the program unmapped it, or the maps are partial), the bias is the one
        every mapping implies, if exactly one does."""
        loads = self.loads
        first = loads[0]
        fixed = self.elf["e_type"] == "ET_EXEC"
        real = [m for m in mappings if not _hole(m)]
        if not real:
            raise LoadBiasError(path, "only PROT_NONE mappings, none a segment's", mappings, loads)
        low = real[0]
        if low is mappings[0] and low.offset == page_down(first.offset):
            bias = first.implied_bias(low)
        else:
            common = set.intersection(*({b for s in loads if (b := s.implied_bias(m)) is not None} for m in real))
            if fixed and 0 in common:
                common = {0}
            if len(common) != 1:
                said = ", ".join(f"{b:#x}" for b in sorted(common)) or "none"
                raise LoadBiasError(path, f"the lowest mapping is not the first PT_LOAD's and the mappings "
                                          f"imply no one bias (common to all: {said})", mappings, loads)
            bias = common.pop()
        if fixed and bias != 0:
            raise LoadBiasError(path, f"an ET_EXEC mapped {bias:#x} away from its link addresses "
                                      f"({low.start:#x} from offset {low.offset:#x})", mappings, loads)
        base = bias + page_down(first.vaddr)
        end = base + self.span()
        for m in mappings:
            if not base <= m.start < m.end <= end:
                raise LoadBiasError(path, f"the mapping {m.start:#x}-{m.end:#x} lies outside the module's "
                                          f"{base:#x}-{end:#x} at the bias {bias:#x}", mappings, loads)
            implied = {b for s in loads if (b := s.implied_bias(m)) is not None}
            if bias in implied:
                continue
            # ld.so's reservation (dl-map-segments.h): its first mmap covers the whole span from
            # the first PT_LOAD's offset, and what no segment maps again, between the segments,
            # is made PROT_NONE -- or read-only, where a PT_GNU_RELRO reaches past its segment
            # (lld -z common-page-size)
            if m.start - (m.offset - page_down(first.offset)) == base and not any(
                    m.start < bias + page_up(s.vaddr + s.memsz) and bias + page_down(s.vaddr) < m.end for s in loads):
                continue
            if implied:
                said = ", ".join(f"{b:#x}" for b in sorted(implied))
                why = (f"the mapping at {m.start:#x} (offset {m.offset:#x}) implies the bias {said}, the "
                       f"mapping at {low.start:#x} (offset {low.offset:#x}) {bias:#x}")
            else:
                why = (f"no PT_LOAD maps file offset {m.offset:#x} (the mapping at {m.start:#x}) at the "
                       f"bias {bias:#x}")
            raise LoadBiasError(path, why, mappings, loads)
        # ... and every PT_LOAD is mapped there: its first byte at bias + p_vaddr, from p_offset
        for s in loads:
            at = bias + s.vaddr
            if s.filesz and not any(m.start <= at < m.end and m.offset + at - m.start == s.offset for m in real):
                raise LoadBiasError(path, f"the PT_LOAD of vaddr {s.vaddr:#x} is not mapped at {at:#x} from "
                                          f"offset {s.offset:#x} (bias {bias:#x})", mappings, loads)
        return bias


def _hole(m: Mapping) -> bool:
    return m.perms.startswith("---")


_IMAGES: dict[tuple[str, int, int], ElfImage] = {}


def load_image(path: str | os.PathLike) -> ElfImage:
    """An :class:`ElfImage` per host file, cached by (path, size, mtime)."""
    st = os.stat(path)
    key = (str(path), st.st_size, st.st_mtime_ns)
    img = _IMAGES.get(key)
    if img is None:
        img = _IMAGES[key] = ElfImage.from_path(path)
    return img


@dataclass(frozen=True)
class MappedElf:
    path: str  # the guest's path ("[vdso]" for the vDSO)
    image: ElfImage
    bias: int
    mapping: Mapping

    def link_address(self, addr: int) -> int:
        return addr - self.bias


Resolver = Callable[[str], "str | os.PathLike | None"]


def host_resolver(root: str | os.PathLike | None = None, mapping: dict[str, str] | None = None) -> Resolver:
    """``resolve(path)``: an explicit ``{guest path: host path}`` entry, else ``root + path`` if it exists."""
    table = dict(mapping or {})

    def resolve(path: str):
        if path in table:
            return table[path]
        p = Path(root, path.lstrip("/")) if root is not None else Path(path)
        return p if p.is_file() else None

    return resolve


P = TypeVar("P")


class AddressSpace:
    """Mappings of one task, with the ELF at an address and its load bias."""

    def __init__(self, mappings: list[Mapping], resolve: Resolver | None = None, memory: Memory | None = None):
        self.mappings = sorted(mappings, key=lambda m: m.start)
        self._starts = [m.start for m in self.mappings]
        self.resolve = resolve or host_resolver()
        self.memory = memory
        self._elf_cache: dict[int, MappedElf | None] = {}
        self._bias: dict[int, int | LoadBiasError] = {}  # a file mapping's start -> its module's bias
        self._vdso: ElfImage | None = None

    @classmethod
    def from_maps(cls, text: str, resolve: Resolver | None = None, memory: Memory | None = None) -> AddressSpace:
        return cls(parse_maps(text), resolve, memory)

    def mapping_at(self, addr: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.mappings[i].end:
            return self.mappings[i]
        return None

    def mappings_of(self, path: str) -> list[Mapping]:
        return [m for m in self.mappings if m.path == path]

    def elf_at(self, addr: int) -> MappedElf | None:
        """The ELF mapped at ``addr`` and its module's load bias; None where no ELF file is at
        hand (an anonymous mapping, a file the resolver does not know, not an ELF).  Raises
        :class:`LoadBiasError` where the file's mappings and its PT_LOADs disagree."""
        m = self.mapping_at(addr)
        if m is None:
            return None
        if m.start in self._elf_cache:
            return self._elf_cache[m.start]
        found = self._elf_for(m)
        self._elf_cache[m.start] = found
        return found

    def _elf_for(self, m: Mapping) -> MappedElf | None:
        if m.path == VDSO:
            img = self.vdso_image()
            if img is None:
                return None
            first = min((s for s in img.segments if s.p_type == "PT_LOAD"), key=lambda s: s.vaddr, default=None)
            vdso_start = self.mappings_of(VDSO)[0].start
            return MappedElf(VDSO, img, vdso_start - (first.vaddr if first else 0), m)
        if not m.is_file:
            return None
        host = self.resolve(m.path)
        if host is None:
            return None
        try:
            img = load_image(host)
            if not img.loads:
                return None  # no loader maps it: no module here
        except (OSError, MapsError, ELFError):
            return None  # no file to read, or not an ELF (a locale archive, a font)
        return MappedElf(m.path, img, self._module_bias(m, img), m)

    def _module_bias(self, m: Mapping, img: ElfImage) -> int:
        """The load bias of the module ``m`` belongs to, computed (and checked) once per module;
        raises its :class:`LoadBiasError` for each of its mappings."""
        if m.start not in self._bias:
            for group in self._instances(m.path, img.span()):
                try:
                    found: int | LoadBiasError = img.module_bias(m.path, group)
                except LoadBiasError as exc:
                    found = exc
                self._bias.update((g.start, found) for g in group)
        found = self._bias[m.start]
        if isinstance(found, LoadBiasError):
            raise found
        return found

    def _instances(self, path: str, span: int) -> list[list[Mapping]]:
        """The mappings of ``path`` grouped by the module they belong to: the same file may be
        mapped twice.  A module's mappings lie within ``span`` bytes of its lowest one."""
        groups: list[list[Mapping]] = []
        for m in self.mappings_of(path):
            if groups and m.start < groups[-1][0].start + span:
                groups[-1].append(m)
            else:
                groups.append([m])
        return groups

    def vdso_image(self) -> ElfImage | None:
        """The vDSO's ELF image, read from memory (it has no file)."""
        if self._vdso is not None:
            return self._vdso
        maps = self.mappings_of(VDSO)
        if not maps or self.memory is None:
            return None
        m = maps[0]
        try:
            data = self.memory.read(m.start, m.end - m.start)
        except MemoryFault:
            return None
        self._vdso = ElfImage(VDSO, data)
        return self._vdso

    def elves(self) -> list[MappedElf]:
        """Every mapped ELF module once (by its lowest mapping), each one's bias checked against
        all its mappings: a :class:`LoadBiasError` here, before any stack is judged on it."""
        seen, out = set(), []
        for m in self.mappings:
            if not (m.is_file or m.path == VDSO):
                continue
            e = self.elf_at(m.start)
            if e is not None and (e.path, e.bias) not in seen:
                seen.add((e.path, e.bias))
                out.append(e)
        return out

    def tables_for(self, make: Callable[[MappedElf], P | None]) -> Callable[[int], P | None]:
        """``tables_for(ip)`` for the unwinder: ``make(elf)`` once per mapped ELF, cached.

        ``make`` builds a rule provider for one mapped ELF, e.g.
        ``lambda e: SFrameTable.from_elf(e.image.name, load_bias=e.bias)``.
        """
        cache: dict[tuple[str, int], P | None] = {}

        def tables_for(ip: int) -> P | None:
            e = self.elf_at(ip)
            if e is None:
                return None
            key = (e.path, e.bias)
            if key not in cache:
                cache[key] = make(e)
            return cache[key]

        return tables_for


class FileBackedMemory:
    """The read-only file mappings of an address space, served from their ELF files (text does
    not change while a program runs: what the code causes read where no live memory is, as for a
    perf sample); any other read faults (a writable mapping, ld.so's PROT_NONE holes)."""

    def __init__(self, space: AddressSpace):
        self.space = space

    def read(self, addr: int, size: int) -> bytes:
        m = self.space.mapping_at(addr)
        if m is None or not m.is_file or m.perms[0] != "r" or "w" in m.perms or size < 0 or addr + size > m.end:
            raise MemoryFault(addr)
        e = self.space.elf_at(addr)
        off = m.offset + addr - m.start
        if e is None or off + size > len(e.image.data):
            raise MemoryFault(addr)
        return e.image.data[off:off + size]

