"""x86-64 user registers as the kernel saves them: ``struct pt_regs`` (arch/x86/include/asm/ptrace.h).

The layout is fixed by the entry code (168 bytes, 21 longs); BTF confirms it per kernel, and
:func:`UserRegs.from_pt_regs` takes the offsets from there when it has them.
"""

from __future__ import annotations

import functools
import operator
import struct
from collections.abc import Callable
from dataclasses import dataclass, fields

PT_REGS_FIELDS = (
    "r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8",
    "ax", "cx", "dx", "si", "di", "orig_ax", "ip", "cs", "flags", "sp", "ss",
)
PT_REGS_SIZE = 8 * len(PT_REGS_FIELDS)
_PT_REGS = struct.Struct(f"<{len(PT_REGS_FIELDS)}Q")


@functools.lru_cache(maxsize=16)
def _pick(offsets: tuple[int, ...]) -> Callable[[bytes], tuple[int, ...]]:
    """The fields at ``offsets`` (a kernel's BTF layout of pt_regs) in PT_REGS_FIELDS' order, read
    by one unpack of the struct's qwords where every offset is qword-aligned (every x86-64
    kernel's), else one unpack each; made once per layout (two reads of pt_regs a trace)."""
    if all(o % 8 == 0 for o in offsets):
        words = struct.Struct(f"<{max(offsets) // 8 + 1}Q")
        pick = operator.itemgetter(*(o // 8 for o in offsets))
        return lambda raw: pick(words.unpack_from(raw))
    return lambda raw: tuple(struct.unpack_from("<Q", raw, o)[0] for o in offsets)

# The registers rt_sigreturn restores, as the kernel's rt_sigframe holds them (a fixed user ABI:
# arch/x86/include/uapi/asm/ucontext.h, sigcontext.h): after pretcode, struct ucontext
# {uc_flags, uc_link, stack_t uc_stack (24 bytes)}, then struct sigcontext_64 {r8..r15, di, si,
# bp, bx, dx, ax, cx, sp, ip, flags, cs, gs, fs, ss, ...}; at rt_sigreturn's entry sp points at
# the ucontext.
UC_MCONTEXT = 40
SIGCONTEXT_64 = ("r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "di", "si", "bp", "bx", "dx", "ax",
                 "cx", "sp", "ip", "flags")

USER_CS_64 = 0x33  # __USER_CS
USER_CS_32 = 0x23  # __USER32_CS


@dataclass(frozen=True)
class UserRegs:
    r15: int = 0
    r14: int = 0
    r13: int = 0
    r12: int = 0
    bp: int = 0
    bx: int = 0
    r11: int = 0
    r10: int = 0
    r9: int = 0
    r8: int = 0
    ax: int = 0
    cx: int = 0
    dx: int = 0
    si: int = 0
    di: int = 0
    orig_ax: int = 0
    ip: int = 0
    cs: int = USER_CS_64
    flags: int = 0
    sp: int = 0
    ss: int = 0x2B

    @classmethod
    def from_pt_regs(cls, raw: bytes, offsets: dict[str, int] | None = None) -> UserRegs:
        if len(raw) < PT_REGS_SIZE:
            raise ValueError(f"pt_regs needs {PT_REGS_SIZE} bytes, got {len(raw)}")
        if offsets is None:
            return cls(*_PT_REGS.unpack_from(raw))
        return cls(*_pick(tuple(offsets[n] for n in PT_REGS_FIELDS))(raw))

    def to_pt_regs(self) -> bytes:
        return struct.pack(f"<{len(PT_REGS_FIELDS)}Q", *(getattr(self, n) for n in PT_REGS_FIELDS))

    @property
    def user_mode(self) -> bool:
        return (self.cs & 3) == 3

    @property
    def compat(self) -> bool:
        """A 32-bit task: the saved CS is the 32-bit user code segment."""
        return self.cs == USER_CS_32

    @property
    def in_syscall(self) -> bool:
        """The task is in a system call: ``orig_ax`` holds its number, as the kernel's
        ``syscall_get_nr()`` reads it.  Every other entry (interrupt, exception) stores -1 there,
        and rt_sigreturn restores -1 (restore_sigcontext: "disable syscall checks").  A successful
        execve keeps its number there while the IP is the new image's entry.  (The dataclass's
        default 0 is a made-up register set's, not the kernel's.)"""
        return self.orig_ax < 1 << 63

    @property
    def fresh_exec(self) -> bool:
        """Registers a successful execve installs: ELF_PLAT_INIT zeroes every register but ip,
        sp and flags (cx and r11 are the sysret scratch registers)."""
        return not any((self.bp, self.bx, self.r12, self.r13, self.r14, self.r15, self.di, self.si))

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
