"""The one narrow interface through which domain code sees guest memory.

``read(addr, size)`` returns exactly ``size`` bytes or raises :class:`MemoryFault` naming the first
address that could not be read.  A live guest (through a debugger target), a captured snapshot
and a unit test's byte buffer all implement it, so the unwinder runs the same on each.
:class:`Overlay` puts one memory over another: a perf sample's stack dump over the vDSO image,
the kernel's copy of the vDSO over live guest memory (:mod:`harness.kernel.vdso`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Protocol

from .errors import HarnessError

__all__ = ["BufferMemory", "CapturedMemory", "Memory", "MemoryFault", "Overlay", "SnapshotMiss"]

PAGE = 4096


class MemoryFault(HarnessError):
    """A read touched an address that is not readable (unmapped, not present, or not user)."""

    def __init__(self, addr: int, message: str = ""):
        self.addr = addr
        super().__init__(message or f"memory at {addr:#x} is not readable")


class SnapshotMiss(MemoryFault):
    """A read of a sealed :class:`CapturedMemory` outside what was captured: the live guest
    might have answered it, the snapshot cannot (a check that needs it is reported, never
    silently judged on a fault)."""

    def __init__(self, addr: int):
        super().__init__(addr, f"memory at {addr:#x} was not captured in the stop's snapshot")


class Memory(Protocol):
    def read(self, addr: int, size: int) -> bytes: ...


@dataclass
class BufferMemory:
    """Memory made of byte regions ``{base: data}``; anything else faults.  For tests and snapshots."""

    regions: dict[int, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._bases = sorted(self.regions)

    def add(self, base: int, data: bytes) -> None:
        self.regions[base] = bytes(data)
        self._bases = sorted(self.regions)

    def read(self, addr: int, size: int) -> bytes:
        if addr < 0 or size < 0:
            raise MemoryFault(addr)
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0:
            base = self._bases[i]
            data = self.regions[base]
            off = addr - base
            if off + size <= len(data):
                return data[off : off + size]
            if off < len(data):
                raise MemoryFault(base + len(data))
        raise MemoryFault(addr)


class Overlay:
    """Reads from ``first``; a read that faults there (anywhere in it) is served whole by
    ``second``, whose fault, if any, is the one raised.  Reads are never stitched from both: a
    read that straddles the end of ``first``'s bytes comes entirely from ``second``."""

    def __init__(self, first: Memory, second: Memory):
        self.first = first
        self.second = second

    def read(self, addr: int, size: int) -> bytes:
        try:
            return self.first.read(addr, size)
        except MemoryFault:
            return self.second.read(addr, size)


class CapturedMemory:
    """What a check may read of a task at one stop, taken in bulk while the guest was stopped.

    * ``regions``: bytes read at the stop (the stack from sp's page up, the shadow stack, ...);
    * ``faults``: page addresses known unreadable at the stop (a bulk read stopped there);
    * ``backing``: memory that does not change while the program runs (read-only file
      mappings served from their files, the kernel's vDSO image), read where no region is;
    * ``live``: the guest itself, while it is still stopped: a read nothing above answers goes
      there and its answer (bytes or fault) is kept.  :meth:`seal` drops it when the guest runs
      on; from then on such a read raises :class:`SnapshotMiss` and is listed in ``misses``.

    A read is served piecewise (a region, then the backing, across their boundaries), so one
    that straddles the stack's captured part and the next page is answered as the guest would.
    """

    def __init__(self, regions: dict[int, bytes] | None = None, faults: set[int] | frozenset[int] = frozenset(),
                 backing: Memory | None = None, live: Memory | None = None):
        self.regions: dict[int, bytes] = {}
        self._bases: list[int] = []
        for base, data in (regions or {}).items():
            self.add(base, data)
        self.faults = set(faults)
        self.backing = backing
        self.live = live
        self.misses: list[tuple[int, int]] = []

    def add(self, base: int, data: bytes) -> None:
        if data:
            self.regions[base] = bytes(data)
            self._bases = sorted(self.regions)

    def add_fault(self, addr: int) -> None:
        self.faults.add(addr - addr % PAGE)

    def seal(self) -> CapturedMemory:
        """The guest runs on: no live reads from here on."""
        self.live = None
        return self

    def _region(self, addr: int) -> tuple[int, bytes] | None:
        # the nearest regions at or below addr (a short one may sit inside a longer one)
        i = bisect.bisect_right(self._bases, addr) - 1
        for k in range(i, max(-1, i - 8), -1):
            base = self._bases[k]
            data = self.regions[base]
            if addr < base + len(data):
                return base, data
        return None

    def _piecewise(self, addr: int, size: int) -> bytes | int:
        """The bytes, or the first address nothing captured answers (a known fault raises)."""
        out = bytearray()
        cur, end = addr, addr + size
        while cur < end:
            found = self._region(cur)
            if found is not None:
                base, data = found
                n = min(end, base + len(data)) - cur
                out += data[cur - base:cur - base + n]
                cur += n
                continue
            if cur - cur % PAGE in self.faults:
                raise MemoryFault(cur)
            if self.backing is not None:
                # the longest piece the backing answers: up to the next region, else to the end
                i = bisect.bisect_right(self._bases, cur)
                stop = min(end, self._bases[i]) if i < len(self._bases) else end
                try:
                    out += self.backing.read(cur, stop - cur)
                    cur = stop
                    continue
                except MemoryFault:
                    pass
            return cur
        return bytes(out)

    def read(self, addr: int, size: int) -> bytes:
        if addr < 0 or size < 0:
            raise MemoryFault(addr)
        # Most reads (a frame's words, an instruction's bytes) lie in one captured region: its
        # slice, without _piecewise's assembly (a copy into a bytearray and out again).
        found = self._region(addr)
        if found is not None and addr + size <= found[0] + len(found[1]):
            base, data = found
            return data[addr - base:addr - base + size]
        got = self._piecewise(addr, size)
        if isinstance(got, bytes):
            return got
        if self.live is not None:
            try:
                data = self.live.read(addr, size)
            except MemoryFault as exc:
                self.add_fault(exc.addr)
                raise
            self.add(addr, data)
            return data
        self.misses.append((addr, size))
        raise SnapshotMiss(got)
