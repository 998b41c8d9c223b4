"""One frame's unwind rule: the kernel's ``struct unwind_user_frame`` generalised.

The kernel's rule (REFERENCE.md section 1) is ``{cfa_off, ra_off, fp_off, use_fp}``::

    cfa = (use_fp ? fp : sp) + cfa_off;  ra = *(cfa + ra_off);  fp' = fp_off ? *(cfa + fp_off) : fp

SFrame V3 flexible FDEs (binutils include/sframe.h, SFRAME_V3_FLEX_FDE_*) add a register base
other than SP/FP, a dereference of the CFA, and an RA or FP found in a register.  Every producer
(frame pointers, SFrame, DWARF CFI) expresses a frame as a :class:`FrameRule`, and
:func:`apply_rule` is the single evaluator, so all unwinders share one definition of a step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache

from .errors import HarnessError

# Bases a ValueRule may name.  "sp"/"fp" are the current frame's registers; "cfa" is the value
# just computed for this frame; "rN" is DWARF register N of the topmost frame's saved registers.
SAME = "same"  # the register keeps its value from the callee frame
UNDEFINED = "undefined"  # no value: for RA this marks the outermost frame


@dataclass(frozen=True)
class ValueRule:
    """``value = base + offset`` or, with ``deref``, the word at ``base + offset`` plus ``add``
    (``*(base + offset) + add``: OpenSSL's perlasm CFA ``DW_OP_breg7 (rsp): N; DW_OP_deref;
    DW_OP_plus_uconst: 8``, the caller's rsp it saved in its realigned frame, plus the RA slot)."""

    base: str
    offset: int = 0
    deref: bool = False
    add: int = 0

    def __post_init__(self) -> None:
        if self.add and not self.deref:
            raise ValueError("add is what is added to a word read (deref): without one it is offset's")

    def __str__(self) -> str:
        if self.base in (SAME, UNDEFINED):
            return self.base
        expr = f"{self.base}{self.offset:+d}"
        if not self.deref:
            return expr
        return f"*({expr}){self.add:+d}" if self.add else f"*({expr})"


@dataclass(frozen=True)
class FrameRule:
    cfa: ValueRule
    ra: ValueRule
    fp: ValueRule
    signal_frame: bool = False

    def __str__(self) -> str:
        return f"cfa={self.cfa} ra={self.ra} fp={self.fp}" + (" signal" if self.signal_frame else "")


@cache  # immutable: one per word size (a walk asks for it at every start)
def fp_rule(ws: int = 8) -> FrameRule:
    """The frame-pointer rule after the prologue: cfa = fp + 2ws, ra at cfa - ws, fp at cfa - 2ws."""
    return FrameRule(ValueRule("fp", 2 * ws), ValueRule("cfa", -ws, True), ValueRule("cfa", -2 * ws, True))


def outermost_rule(signal_frame: bool = False) -> FrameRule:
    """The outermost frame: CFA and RA undefined (apply_rule returns ra=None without reading)."""
    return FrameRule(ValueRule(UNDEFINED), ValueRule(UNDEFINED), ValueRule(SAME), signal_frame)


@cache
def entry_rule(ws: int = 8) -> FrameRule:
    """The function-entry rule (IP at ``push %rbp``/``endbr64``): cfa = sp + ws, fp unchanged."""
    return FrameRule(ValueRule("sp", ws), ValueRule("cfa", -ws, True), ValueRule(SAME))


class RuleError(HarnessError):
    """A rule names a register the unwinder does not have (e.g. rN below the topmost frame)."""


def apply_rule(
    rule: FrameRule,
    sp: int,
    fp: int,
    read_word: Callable[[int], int],
    regs: Mapping[str, int] | None = None,
    check_cfa: Callable[[int], int] | None = None,
) -> tuple[int, int | None, int]:
    """Evaluate ``rule`` and return ``(cfa, ra, fp')``; ``ra`` is None when it is undefined.

    ``read_word`` reads one word of user memory (and raises ``MemoryFault``); ``regs`` holds
    extra registers by name ("rN") for the topmost frame only.  ``check_cfa``, when given, sees
    the CFA after it is computed and before RA or FP are read (the kernel's order in
    ``unwind_user_next_common``: direction and alignment checks precede the user reads); it may
    raise to stop the step and returns the CFA to continue with (e.g. wrapped to the word size).

    The common shapes (base sp/fp/cfa) are evaluated inline: this is the hot loop of every walk.
    """
    c = rule.cfa
    base = c.base
    if base == "sp":
        cfa = sp + c.offset
    elif base == "fp":
        cfa = fp + c.offset
    elif base == SAME or base == UNDEFINED:
        if base == UNDEFINED and rule.ra.base == UNDEFINED:
            # The outermost frame (SFrame's "RA undefined" FRE, kernel frame->outermost): there is
            # no caller, so nothing is computed or read; cfa is reported as the current sp.
            return sp, None, fp
        raise RuleError("the CFA rule is undefined")
    else:
        cfa = _base_value(base, sp, fp, None, regs) + c.offset
    if c.deref:
        cfa = read_word(cfa) + c.add
    if check_cfa is not None:
        cfa = check_cfa(cfa)

    r = rule.ra
    base = r.base
    if base == "cfa":
        ra: int | None = cfa + r.offset
        if r.deref:
            ra = read_word(ra) + r.add
    elif base == SAME or base == UNDEFINED:
        ra = None
    else:
        ra = _base_value(base, sp, fp, cfa, regs) + r.offset
        if r.deref:
            ra = read_word(ra) + r.add

    f = rule.fp
    base = f.base
    if base == "cfa":
        new_fp = cfa + f.offset
        if f.deref:
            new_fp = read_word(new_fp) + f.add
    elif base == SAME or base == UNDEFINED:
        new_fp = fp
    else:
        new_fp = _base_value(base, sp, fp, cfa, regs) + f.offset
        if f.deref:
            new_fp = read_word(new_fp) + f.add
    return cfa, ra, new_fp


def _base_value(name: str, sp: int, fp: int, cfa: int | None, regs: Mapping[str, int] | None) -> int:
    if name == "sp":
        return sp
    if name == "fp":
        return fp
    if name == "cfa" and cfa is not None:
        return cfa
    if regs is not None and name in regs:
        return regs[name]
    raise RuleError(f"rule needs register {name!r}, which is not known at this frame")


# DWARF register numbers of x86-64 (System V psABI, figure 3.36) -> struct pt_regs field names.
DWARF_X86_64 = (
    "ax", "dx", "cx", "bx", "si", "di", "bp", "sp",
    "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "ip",
)
# DWARF register numbers of i386 (System V ABI, Intel386 Architecture Processor Supplement,
# "DWARF Register Number Mapping"; GCC's svr4 map, used in .eh_frame): 0 eax, 1 ecx, 2 edx,
# 3 ebx, 4 esp, 5 ebp, 6 esi, 7 edi, 8 eip (the return-address column).  A compat task's
# pt_regs hold them zero-extended.
DWARF_I386 = ("ax", "cx", "dx", "bx", "sp", "bp", "si", "di", "ip")


def dwarf_regs(regs: object) -> dict[str, int]:
    """The topmost frame's registers as ``{"rN": value}`` for ValueRule bases, from a ``UserRegs``:
    x86-64 numbering, or i386 numbering (32-bit values) for a compat task (``regs.compat``)."""
    if getattr(regs, "compat", False):
        return {f"r{n}": getattr(regs, name) & 0xFFFFFFFF for n, name in enumerate(DWARF_I386)}
    return {f"r{n}": getattr(regs, name) for n, name in enumerate(DWARF_X86_64)}
