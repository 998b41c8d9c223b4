"""User-memory access as the kernel's unwinder sees it: ``get_user()`` of one word.

Two rules decide whether a read can succeed before memory is touched at all:

* the address is a user address: x86-64 ``get_user()`` refuses anything at or above
  ``TASK_SIZE_MAX`` (``(1 << 47) - PAGE_SIZE`` with 4-level paging, ``(1 << 56) - PAGE_SIZE`` with
  5-level); the harness never sends such a read to the target;
* addresses wrap at 64 bits (``unsigned long`` arithmetic in ``unwind_user_next_common``).

Reads go through a per-walk page cache: the first word of a page reads the whole 4 KiB page
once, later words come from the cached bytes.  A page that cannot be read whole (a snapshot
region that starts mid-page, the end of a mapping) falls back to word reads, so the cache
never turns a readable word into a fault.  Make a new :class:`UserAccess` per walk: a live
target's memory changes between walks.
"""

from __future__ import annotations

import struct

from ..errors import HarnessError
from ..memory import Memory, MemoryFault

PAGE_SIZE = 4096
MASK64 = (1 << 64) - 1
TASK_SIZE_MAX_4LEVEL = 0x00007FFFFFFFF000  # arch/x86/include/asm/page_64_types.h, 4-level
TASK_SIZE_MAX_5LEVEL = 0x00FFFFFFFFFFF000  # same, with LA57


class AccessError(HarnessError):
    """A user word could not be read; ``addr`` is the first address that failed."""

    def __init__(self, addr: int, message: str):
        self.addr = addr
        super().__init__(message)


class NotUserAddress(AccessError):
    """The address is at or above TASK_SIZE_MAX: ``get_user()`` fails without touching memory."""

    def __init__(self, addr: int, task_size_max: int):
        super().__init__(addr, f"{addr:#x} is not a user address (TASK_SIZE_MAX {task_size_max:#x})")


class UserFault(AccessError):
    """The target's memory refused the read (unmapped, not present)."""

    def __init__(self, addr: int):
        super().__init__(addr, f"user read faulted at {addr:#x}")


_PARTIAL = b""  # page marker: not readable as a whole, read word by word


class UserAccess:
    """Word reads of user memory with the kernel's address check and a page cache."""

    def __init__(self, memory: Memory, ws: int = 8, task_size_max: int = TASK_SIZE_MAX_4LEVEL):
        if ws not in (4, 8):
            raise ValueError(f"word size must be 4 or 8, not {ws}")
        self.memory = memory
        self.ws = ws
        self.task_size_max = task_size_max
        self._unpack = struct.Struct("<Q" if ws == 8 else "<I").unpack_from
        self._pages: dict[int, bytes] = {}
        self.reads = 0  # words read, for tests and the benchmark

    def read_word(self, addr: int) -> int:
        addr &= MASK64
        ws = self.ws
        if addr + ws > self.task_size_max:
            raise NotUserAddress(addr, self.task_size_max)
        self.reads += 1
        page = addr & ~(PAGE_SIZE - 1)
        buf = self._pages.get(page)
        if buf is None:
            buf = self._load(page)
        off = addr - page
        if buf and off + ws <= PAGE_SIZE:
            return self._unpack(buf, off)[0]
        try:
            return self._unpack(self.memory.read(addr, ws))[0]
        except MemoryFault as exc:
            raise UserFault(exc.addr) from exc

    def read_bytes(self, addr: int, size: int) -> bytes:
        """Bytes at a user address (instruction bytes at IP for the function-entry check)."""
        addr &= MASK64
        if addr + size > self.task_size_max:
            raise NotUserAddress(addr, self.task_size_max)
        try:
            return self.memory.read(addr, size)
        except MemoryFault as exc:
            raise UserFault(exc.addr) from exc

    def _load(self, page: int) -> bytes:
        try:
            buf = self.memory.read(page, PAGE_SIZE)
        except MemoryFault:
            buf = _PARTIAL
        if len(buf) != PAGE_SIZE:
            buf = _PARTIAL
        self._pages[page] = buf
        return buf
