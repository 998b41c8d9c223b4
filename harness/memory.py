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

__all__ = ["BufferMemory", "Memory", "MemoryFault", "Overlay"]


class MemoryFault(HarnessError):
    """A read touched an address that is not readable (unmapped, not present, or not user)."""

    def __init__(self, addr: int, message: str = ""):
        self.addr = addr
        super().__init__(message or f"memory at {addr:#x} is not readable")


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
