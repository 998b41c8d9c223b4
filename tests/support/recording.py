"""A memory that lists the reads made through it: to show what a walk or an oracle's
``complete()`` reads (tests/unit/unwind/test_user.py, tests/unit/oracles/)."""

from __future__ import annotations

__all__ = ["RecordingMemory"]


class RecordingMemory:
    """Each read served from ``memory`` and listed in :attr:`reads` as (address, size)."""

    def __init__(self, memory):
        self.memory = memory
        self.reads: list[tuple[int, int]] = []

    def read(self, addr: int, size: int) -> bytes:
        self.reads.append((addr, size))
        return self.memory.read(addr, size)
