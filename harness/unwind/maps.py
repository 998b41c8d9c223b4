"""A task's address space: ``/proc/PID/maps`` and the ELF images mapped in it.

``parse_maps()`` reads the text format of ``/proc/PID/maps`` (fs/proc/task_mmu.c,
``show_map_vma``): ``start-end perms offset major:minor inode [path]``.  An
:class:`AddressSpace` answers "which ELF is mapped at this IP, and with which load bias": for
a file mapping, the PT_LOAD segment whose file range holds the mapping's file offset gives the
link-time address of the mapping's start, and ``bias = start - (p_vaddr - p_offset + offset)``
(0 for a static non-PIE executable).  The vDSO has no file: its image is read from memory.

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

    def load_bias(self, map_start: int, map_offset: int) -> int | None:
        """The bias of a mapping of this file at ``map_start`` from file offset ``map_offset``.

        Two PT_LOADs can share a file page (text ends and data starts on the same page, mapped
        twice at different addresses): the segment whose page-aligned offset is the mapping's
        offset wins over one that merely contains it.
        """
        loads = [s for s in self.segments if s.p_type == "PT_LOAD"]
        exact = [s for s in loads if s.offset & ~0xFFF == map_offset]
        inside = [s for s in loads if s.offset & ~0xFFF <= map_offset < s.offset + s.filesz]
        for seg in exact or inside:
            return map_start - (seg.vaddr - seg.offset + map_offset)
        return None


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
            bias = img.load_bias(m.start, m.offset)
        except (OSError, MapsError, ELFError):
            return None
        if bias is None:
            return None
        return MappedElf(m.path, img, bias, m)

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
        """Every mapped ELF once (by its lowest mapping)."""
        seen, out = set(), []
        for m in self.mappings:
            if m.path in seen or not (m.is_file or m.path == VDSO):
                continue
            e = self.elf_at(m.start)
            if e is not None:
                seen.add(m.path)
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
    perf sample); any other read faults."""

    def __init__(self, space: AddressSpace):
        self.space = space

    def read(self, addr: int, size: int) -> bytes:
        m = self.space.mapping_at(addr)
        if m is None or not m.is_file or "w" in m.perms or size < 0 or addr + size > m.end:
            raise MemoryFault(addr)
        e = self.space.elf_at(addr)
        off = m.offset + addr - m.start
        if e is None or off + size > len(e.image.data):
            raise MemoryFault(addr)
        return e.image.data[off:off + size]

