"""The DWARF CFI oracle: ``.eh_frame`` rows evaluated on the delivered registers, through signal
frames.

:func:`harness.unwind.cfi.unwind_cfi` stops at a signal trampoline (glibc's ``__restore_rt``, CIE
augmentation "zRS") by name: it gives every register as ``DW_CFA_expression`` over the ucontext
the kernel saved, and the frame below it is an interrupted IP, not a return address.  Here, for
64-bit tasks, those rules are evaluated (each is ``DW_OP_breg7 (rsp) N``: the register is at
sp + N) and the walk goes on from the interrupted context, looking its IP up at itself ('S').
A 32-bit trampoline ends the walk there (the i386 numbering has no sigcontext rules here).

One place the CFI cannot tell the truth: libgcc's functions that return through
``__builtin_eh_return`` (_Unwind_RaiseException, _Unwind_Resume, ...), between
uw_install_context_1 and the jump to the landing pad.  Their frame then holds the landing
frame's registers (its return-address slot the catching call site, its saved rbp the catcher's),
so every walk from there, this one too, skips the frames the exception unwinds through and goes
on in garbage or ends (flake campaign run b6: a C++ throw sampled there).  The oracle says so
(:func:`eh_return_window`): the stack is not checked, rather than judged against a wrong truth.
"""

from __future__ import annotations

import struct

from elftools.dwarf.callframe import RegisterRule

from ..memory import Memory, MemoryFault
from ..regs import SIGCONTEXT_64, UC_MCONTEXT, UserRegs
from ..unwind.cfi import X86_64, CorruptCFI, cfi_table, cfi_tables_for, unwind_cfi
from ..unwind.code import CodeFacts
from ..unwind.maps import AddressSpace
from ..unwind.user import StopReason
from .base import NotChecked, Oracle, OracleFrames, Setup, Stack, register

__all__ = ["CFI_MAX_ENTRIES", "CFIOracle", "EH_RETURN_WINDOW", "eh_return_window", "is_signal_trampoline",
           "signal_frame_regs"]

CFI_MAX_ENTRIES = 4096  # the oracle walks on where the kernel's cache truncates
PAGE = 4096
RED_ZONE = 128  # x86-64 psABI 3.2.2: the bytes below rsp a function may use without moving rsp
MAX_SIGNAL_FRAMES = 16
# DWARF register numbers (x86-64 psABI) -> pt_regs names, for the signal frame's CFI rules.
DWARF_TO_PT_REGS = {0: "ax", 1: "dx", 2: "cx", 3: "bx", 4: "si", 5: "di", 6: "bp", 7: "sp", 8: "r8",
                    9: "r9", 10: "r10", 11: "r11", 12: "r12", 13: "r13", 14: "r14", 15: "r15", 16: "ip"}


@register
class CFIOracle(Oracle):
    name = "cfi"
    description = "DWARF CFI (.eh_frame), through signal frames"

    def __init__(self, space: AddressSpace):
        self.space = space
        self.tables = cfi_tables_for(space)

    @classmethod
    def create(cls, setup: Setup) -> CFIOracle:
        return cls(setup.space)

    def frames(self, stack: Stack) -> OracleFrames | NotChecked:
        """The CFI trace continued through signal frames; ``marks`` are the entries that are
        interrupted IPs (0, and the frame after each signal frame).  Not checked in an
        eh_return window (:func:`eh_return_window`)."""
        found = self._walk(stack.memory, stack.regs)
        why = eh_return_window(self.space, stack.code, found.ips) if len(found.ips) >= 2 else None
        return NotChecked(why) if why else found

    def captures(self, regs: UserRegs, fs_base: int) -> list[tuple[int, int]]:
        """The page below sp's where the red zone reaches into it: the stop's capture starts at
        sp's page, and a CFA rule may read below sp (OpenSSL's SHA-256 AVX2 code keeps the
        caller's rsp at -8(%rsp): CFA = *(rsp - 8) + 8).  The page whole: the walk reads pages."""
        if regs.compat or regs.sp % PAGE >= RED_ZONE:
            return []
        return [(regs.sp - regs.sp % PAGE - PAGE, PAGE)]

    def complete(self, memory: Memory, regs: UserRegs, fs_base: int, request=None) -> None:
        """The walk, at the stop, through the snapshot still open: where the stack is not the
        main thread's ``[stack]`` (an alternate signal stack, a thread's), the walk may cross a
        signal frame onto another stack, which the stop's capture (sp's mapping) does not hold;
        what it reads there is kept.  The main stack is captured to its end: no walk."""
        m = self.space.mapping_at(regs.sp & 0xFFFFFFFF if regs.compat else regs.sp)
        if m is not None and m.path == "[stack]":
            return
        try:
            self._walk(memory, regs)
        except (MemoryFault, CorruptCFI):
            pass  # the checks meet it again on the snapshot and say so

    def _walk(self, memory: Memory, regs: UserRegs) -> OracleFrames:
        ips: list[int] = []
        marks = {0}
        cur = regs
        for _ in range(MAX_SIGNAL_FRAMES):
            t = unwind_cfi(memory, cur, self.tables, max_entries=CFI_MAX_ENTRIES - len(ips))
            ips += t.ips
            if t.stop.reason is not StopReason.UNSUPPORTED_RULE:
                break
            # One frame: the walk's first IP is the trampoline itself (the handler has returned
            # into __restore_rt and the sigreturn is still to come), looked up at itself.
            nxt = signal_frame_regs(self.space, memory, t.frames[-1].ip, t.frames[-1].sp,
                                    at_ip=len(t.frames) == 1)
            if nxt is None:
                break
            marks.add(len(ips))
            cur = nxt
        return OracleFrames(tuple(ips), frozenset(marks), str(t.stop), t.stop.reason is StopReason.END_OF_CHAIN)


#: what the reason of a stack not checked in an eh_return window says (tests count such stacks by it)
EH_RETURN_WINDOW = "returns through __builtin_eh_return"


def eh_return_window(space: AddressSpace, code: CodeFacts, ips) -> str | None:
    """Why a walk whose first frames are ``ips`` (the IP, the return address read from its
    frame) cannot be the truth, or None: the IP is in a function that returns through
    __builtin_eh_return (its FDE saves rax and rdx, the EH data registers), and the return
    address in its frame follows a call of another function, the landing frame's call site that
    uw_install_context_1 copied there.  Before the install it follows the caller's call of the
    function (through its PLT entry), and the frame is the function's own.  An indirect call
    there says nothing: the walk stands."""
    ip, ra = ips[0], ips[1]
    e = space.elf_at(ip)
    try:
        if e is None or not cfi_table(e.image).saves_eh_data(e.link_address(ip)):
            return None
    except CorruptCFI:
        return None
    f, call = code.function_at(ip), code.call_before(ra)
    callee = code.callee(call) if call is not None else None
    if f is None or callee is None or callee == f.name:
        return None
    return (f"the IP {ip:#x} is in {f.name}, which {EH_RETURN_WINDOW} (its FDE saves the EH "
            f"data registers), and the return address in its frame, {ra:#x}, follows '{call.text}' "
            f"({callee}), not a call of {f.name}: uw_install_context_1 has copied the landing frame's "
            f"registers into its frame, and no walk past it is the truth")


def _trampoline(space: AddressSpace, ra: int, at_ip: bool):
    """(table, link address) of the signal trampoline ``ra`` returns into (or, ``at_ip``, that
    the interrupted IP ``ra`` is in), or None."""
    pc = ra if at_ip else ra - 1
    e = space.elf_at(pc)
    if e is None:
        return None
    table = cfi_table(e.image)
    link = e.link_address(pc)
    fde = table.fde_for(link)
    if fde is None or not table.is_signal_frame(fde):
        return None
    return table, link


def is_signal_trampoline(space: AddressSpace, ra: int, at_ip: bool = False) -> bool:
    """``ra`` returns into a signal trampoline (``at_ip``: the IP ``ra`` is in one): its FDE's
    CIE augmentation has 'S'."""
    return _trampoline(space, ra, at_ip) is not None


# x86-64 ``mov $__NR_rt_sigreturn (15),%rax; syscall``: the restorer glibc, musl and busybox
# install with SA_RESTORER, and the only code that can return through a kernel rt_sigframe.
RT_SIGRETURN_CODE = bytes.fromhex("48c7c00f0000000f05")
# orig_ax of the registers rt_sigreturn restores (restore_sigcontext: "disable syscall checks"):
# the interrupted IP is looked up at itself, as the 'S' augmentation says, even after a syscall.
NO_SYSCALL = (1 << 64) - 1
# sigcontext_64's registers up to rip (harness.regs.SIGCONTEXT_64): those a walk goes on from
_SIGCONTEXT_REGS = SIGCONTEXT_64[:SIGCONTEXT_64.index("ip") + 1]


def kernel_sigframe_regs(memory: Memory, ra: int, sp: int) -> UserRegs | None:
    """The interrupted registers of a 64-bit signal frame at ``sp`` read by the kernel's own
    frame layout, where ``ra`` is the rt_sigreturn restorer (its code bytes are the proof);
    None otherwise.  For tasks whose binaries no address space of ours describes (another
    program's subshell, say): no CFI is needed, only the task's own memory."""
    try:
        if memory.read(ra, len(RT_SIGRETURN_CODE)) != RT_SIGRETURN_CODE:
            return None
        raw = memory.read(sp + UC_MCONTEXT, 8 * len(_SIGCONTEXT_REGS))
    except MemoryFault:
        return None
    values = struct.unpack(f"<{len(_SIGCONTEXT_REGS)}Q", raw)  # one word per name
    return UserRegs(**{name: values[i] for i, name in enumerate(_SIGCONTEXT_REGS)}, orig_ax=NO_SYSCALL)


def signal_frame_regs(space: AddressSpace, memory: Memory, ra: int, sp: int,
                      at_ip: bool = False) -> UserRegs | None:
    """The interrupted registers of the signal frame whose trampoline ``ra`` returns to (or,
    ``at_ip``, that the IP ``ra`` is in), with the frame at ``sp``; None for a 32-bit trampoline
    or where the rules cannot be read."""
    found = _trampoline(space, ra, at_ip)
    if found is None:
        return None
    table, link = found
    if table.arch is not X86_64:  # an i386 trampoline: the compat CFI walk ends there
        return None
    row_found = table.row_for(link)
    if row_found is None:
        return None
    row, _ra_col = row_found

    def sp_offset(expr) -> int | None:
        ops = table.parse_expr(expr)
        if not ops or ops[0].op_name != "DW_OP_breg7":
            return None
        return ops[0].args[0]

    try:
        values = {}
        for reg, name in DWARF_TO_PT_REGS.items():
            rule = row.get(reg)
            if rule is None or rule.type != RegisterRule.EXPRESSION:
                continue
            off = sp_offset(rule.arg)
            if off is None:
                return None
            values[name] = struct.unpack("<Q", memory.read(sp + off, 8))[0]
    except (MemoryFault, CorruptCFI):
        return None
    if "ip" not in values or "sp" not in values:
        return None
    return UserRegs(**values, orig_ax=NO_SYSCALL)
