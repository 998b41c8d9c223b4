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
USER_DS = 0x2B  # __USER_DS, and __USER32_DS: the same selector

# A 32-bit task has two frames (arch/x86/include/asm/sigframe.h), and a struct sigcontext_32 {gs,
# fs, es, ds (a 16-bit selector and its padding each), di, si, bp, sp, bx, dx, cx, ax, trapno,
# err, ip, cs, flags, sp_at_signal, ss, ...} in each:
# * struct sigframe_ia32 {pretcode, sig, sc} for a handler without SA_SIGINFO, whose restorer
#   (the vDSO's __kernel_sigreturn) pops sig before its ``int $0x80``: at sigreturn's entry sp is
#   at the sigcontext;
# * struct rt_sigframe_ia32 {pretcode, sig, pinfo, puc (4 bytes each), compat_siginfo_t info (128
#   bytes), struct ucontext_ia32 uc {uc_flags, uc_link, compat_stack_t uc_stack (12 bytes),
#   uc_mcontext}}, whose restorer pops nothing: at rt_sigreturn's entry sp is the frame + 4
#   (``ret`` took pretcode), so the sigcontext is at sp + 160, and pinfo and puc, which the kernel
#   writes as &frame->info and &frame->uc, are sp + 12 and sp + 140.
# None: a word restored otherwise, or not at all.
SIGCONTEXT_32 = (None, None, None, None, "di", "si", "bp", "sp", "bx", "dx", "cx", "ax", None, None, "ip",
                 None, "flags")
SIGCONTEXT_32_CS = 15  # the index of the cs word: the kernel saves the task's __USER32_CS there
UC_MCONTEXT_32 = 144 + 4 + 4 + 12 - 4  # 160: uc's uc_mcontext, from sp
RT_PINFO_32, RT_PUC_32 = 16 - 4, 144 - 4  # &frame->info, &frame->uc, from sp (the frame + 4)


def compat_sigcontext_at(stack: bytes, sp: int) -> int | None:
    """Where, from ``sp``, the sigcontext_32 of the frame a 32-bit task's sigreturn or
    rt_sigreturn restores from lies in ``stack`` (the bytes at ``sp``): 160 where the words at sp
    + 4 and sp + 8 are the rt frame's pinfo and puc (sp + 12 and sp + 140), else 0 where the word
    that would be the sigcontext's cs is the 32-bit user code segment; None otherwise."""
    if len(stack) >= 12:
        pinfo, puc = struct.unpack_from("<II", stack, 4)
        if (pinfo, puc) == ((sp + RT_PINFO_32) & 0xFFFFFFFF, (sp + RT_PUC_32) & 0xFFFFFFFF):
            return UC_MCONTEXT_32
    if len(stack) >= 4 * (SIGCONTEXT_32_CS + 1):
        if struct.unpack_from("<I", stack, 4 * SIGCONTEXT_32_CS)[0] & 0xFFFF == USER_CS_32:
            return 0
    return None


def compat_sigcontext_regs(raw: bytes) -> UserRegs | None:
    """The registers a 32-bit task's sigreturn or rt_sigreturn restores from the sigcontext_32 at
    the start of ``raw`` (None where ``raw`` is too short to hold it).  The frame's own segment
    words, which restore_sigcontext() takes, are not read: the registers are the compat user
    code and data segments' (what makes the unwinder walk them as a 32-bit task's)."""
    layout = f"<{len(SIGCONTEXT_32)}I"
    if len(raw) < struct.calcsize(layout):
        return None
    values = struct.unpack_from(layout, raw)  # one word per name
    return UserRegs(**{name: values[i] for i, name in enumerate(SIGCONTEXT_32) if name is not None},
                    cs=USER_CS_32, ss=USER_DS)


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
    ss: int = USER_DS

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
