"""The shadow-stack oracle: the program's own record of its calls.

Guest programs built with ``-finstrument-functions -DHARNESS_SHADOW`` (guest_programs/shadow.h)
keep ``harness_shadow``: a magic, a depth, an overflow flag and an array of (function, call site)
pushed by ``__cyg_profile_func_enter`` and popped by ``__cyg_profile_func_exit``.  Read from guest
memory at the delivery stop, it is the exact stack of instrumented functions, wherever the IP is
outside the hooks themselves.  Threads keep it in a ``__thread`` variable, found from each
thread's fs_base.

The functions below (:func:`instrumented`, :func:`shadow_pushed`, :func:`hooks`) are what the
shadow causes (:mod:`harness.verdicts.causes`) prove their case with.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from ..memory import Memory, MemoryFault
from ..regs import UserRegs
from ..unwind.code import CodeFacts, Function
from ..unwind.elfsyms import STT_TLS, symbols
from ..unwind.maps import load_image
from ..unwind.symbolize import Symbolizer
from .base import NotChecked, Oracle, OracleFrames, Setup, Stack, register

__all__ = [
    "HOOK_ENTER",
    "HOOK_EXIT",
    "SHADOW_MAGIC",
    "ShadowOracle",
    "ShadowSymbol",
    "hooks",
    "instrumented",
    "shadow_pushed",
    "shadow_symbol",
]

SHADOW_MAGIC = 0x5348414430574B53  # guest_programs/shadow.h
SHADOW_MAX_DEPTH = 2048
SHADOW_PREFETCH = 64  # entries read with the header at a delivery stop
HOOK_ENTER = "__cyg_profile_func_enter"
HOOK_EXIT = "__cyg_profile_func_exit"


@dataclass(frozen=True)
class ShadowSymbol:
    """Where ``harness_shadow`` is: an absolute address, or (``__thread``) an offset in the TLS
    block, which on x86-64 (TLS variant II, static executable) starts ``tls_offset`` bytes below
    the thread pointer (fs_base): ``roundup(PT_TLS p_memsz, p_align)``, as glibc's
    ``__libc_setup_tls`` and ``_dl_allocate_tls_init`` place it."""

    value: int
    tls_offset: int | None = None

    def address(self, fs_base: int) -> int:
        if self.tls_offset is None:
            return self.value
        return fs_base - self.tls_offset + self.value


def shadow_symbol(path: str | Path) -> ShadowSymbol | None:
    """``harness_shadow`` of a non-PIE build: its address, or its TLS offset (``__thread``).

    The symbol table is read by :mod:`harness.unwind.elfsyms`: pyelftools' name lookup parses every
    symbol first, 0.33 s of each scenario run's set-up for a static build's 2,000."""
    image = load_image(path)  # the run's own image of the program, its symbols read once
    elf = image.elf
    sym = next((s for s in symbols(image, ".symtab") or () if s.name == "harness_shadow"), None)
    if sym is None:
        return None
    if elf.header.e_type == "ET_DYN":
        return None  # PIE: needs the load bias; shadow checks use non-PIE builds
    if sym.type != STT_TLS:
        return ShadowSymbol(sym.value)
    tls = next((s for s in elf.iter_segments() if s["p_type"] == "PT_TLS"), None)
    if tls is None:
        return None
    align = max(tls["p_align"], 1)
    return ShadowSymbol(sym.value, -(-tls["p_memsz"] // align) * align)


def _header(memory: Memory, addr: int) -> tuple[int, int, int]:
    """(magic, depth, overflow) of the shadow stack at ``addr``: u64, u32, u32."""
    return struct.unpack("<QII", memory.read(addr, 16))


@register
class ShadowOracle(Oracle):
    name = "shadow"
    description = "the program's own shadow stack (-finstrument-functions)"

    def __init__(self, symbol: ShadowSymbol):
        self.symbol = symbol

    @classmethod
    def create(cls, setup: Setup) -> ShadowOracle | None:
        if not setup.shadow or setup.program is None:
            return None
        sym = shadow_symbol(setup.program)
        return cls(sym) if sym is not None else None

    def captures(self, regs: UserRegs, fs_base: int) -> list[tuple[int, int]]:
        """The header and the first entries (most stacks are shallower) in the stop's batch."""
        return [(self.symbol.address(fs_base), 16 + 16 * SHADOW_PREFETCH)]

    def complete(self, memory: Memory, regs: UserRegs, fs_base: int, request=None) -> None:
        """A deeper stack's remaining entries: one more read (a stack within the prefetch is read
        from the capture, no further)."""
        addr = self.symbol.address(fs_base)
        try:
            magic, depth, overflow = _header(memory, addr)
            if magic == SHADOW_MAGIC and not overflow and depth <= SHADOW_MAX_DEPTH:
                memory.read(addr + 16, 16 * depth)
        except MemoryFault:
            pass  # frames() meets the same fault and says so

    def frames(self, stack: Stack) -> OracleFrames | NotChecked:
        """[ip, call sites...] as the shadow stack has them (innermost first)."""
        fs_base = 0
        if self.symbol.tls_offset is not None:
            if stack.thread_pointer is None:
                return NotChecked("the thread pointer (fs_base) is not known here")
            fs_base = stack.thread_pointer()
        addr = self.symbol.address(fs_base)
        try:
            magic, depth, overflow = _header(stack.memory, addr)
            if magic != SHADOW_MAGIC:
                return NotChecked(f"shadow stack magic {magic:#x} at {addr:#x} (fs_base {fs_base:#x}), "
                                  f"not {SHADOW_MAGIC:#x}: the harness computed a wrong address", failure=True)
            if overflow or depth > SHADOW_MAX_DEPTH:
                return NotChecked(f"the shadow stack overflowed (depth {depth})")
            raw = stack.memory.read(addr + 16, 16 * depth)
        except MemoryFault:
            # Right after an exec the image's data pages are not present yet; the kernel would
            # fault them in, a debugger read cannot.
            return NotChecked("its page is not present yet (fresh exec)")
        sites = [struct.unpack_from("<QQ", raw, 16 * i)[1] for i in range(depth)]
        ip = stack.regs.ip & 0xFFFFFFFF if stack.regs.compat else stack.regs.ip
        # The shadow knows only instrumented functions: its end is not the stack's end.
        return OracleFrames((ip, *reversed(sites)), frozenset({0}), f"{depth} instrumented frames", False)


def hooks(code: CodeFacts) -> tuple[int | None, int | None]:
    """Run-time addresses of the enter and exit hooks in the task's address space."""
    def compute():
        sym = Symbolizer(code.space)
        return sym.address_of(HOOK_ENTER), sym.address_of(HOOK_EXIT)
    found = code.memo((hooks,), compute)  # pragma: no mutate (equivalent: any key no other memo uses)
    return found or (None, None)


def instrumented(code: CodeFacts, f: Function) -> bool:
    """``f`` calls ``__cyg_profile_func_enter`` (it was built with -finstrument-functions)."""
    enter, _ = hooks(code)
    if enter is None:
        return False
    return bool(code.memo((instrumented, f.start),
                           lambda: enter in code.calls(f.start, f.start + min(f.size or 256, 1 << 16))))


def shadow_pushed(code: CodeFacts, ip: int, f: Function) -> bool | None:
    """Whether the function at ``ip`` has pushed its shadow frame and not popped it yet: a ``call
    __cyg_profile_func_enter`` completes before ``ip`` and no ``call ..._exit`` does.  None where
    the code cannot be read."""
    enter, leave = hooks(code)
    try:
        calls = code.calls(f.start, ip)
    except MemoryFault:
        return None
    return enter in calls and leave not in calls
