"""One frame's unwind rule: the kernel's ``struct unwind_user_frame`` generalised.

The kernel's rule (REFERENCE.md section 1) is ``{cfa_off, ra_off, fp_off, use_fp}``::

    cfa = (use_fp ? fp : sp) + cfa_off;  ra = *(cfa + ra_off);  fp' = fp_off ? *(cfa + fp_off) : fp

SFrame V3 flexible FDEs (binutils include/sframe.h, SFRAME_V3_FLEX_FDE_*) add a register base
other than SP/FP, a dereference of the CFA, and an RA or FP found in a register.  Every producer
(frame pointers, SFrame, DWARF CFI) expresses a frame as a :class:`FrameRule`, and
:func:`apply_rule` is the single evaluator, so all unwinders share one definition of a step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

# Bases a ValueRule may name.  "sp"/"fp" are the current frame's registers; "cfa" is the value
# just computed for this frame; "rN" is DWARF register N of the topmost frame's saved registers.
SAME = "same"  # the register keeps its value from the callee frame
UNDEFINED = "undefined"  # no value: for RA this marks the outermost frame


@dataclass(frozen=True)
class ValueRule:
    """``value = base + offset`` or, with ``deref``, the word at ``base + offset``."""

    base: str
    offset: int = 0
    deref: bool = False

    def __str__(self) -> str:
        if self.base in (SAME, UNDEFINED):
            return self.base
        expr = f"{self.base}{self.offset:+d}"
        return f"*({expr})" if self.deref else expr


@dataclass(frozen=True)
class FrameRule:
    cfa: ValueRule
    ra: ValueRule
    fp: ValueRule
    signal_frame: bool = False

    def __str__(self) -> str:
        return f"cfa={self.cfa} ra={self.ra} fp={self.fp}" + (" signal" if self.signal_frame else "")


def fp_rule(ws: int = 8) -> FrameRule:
    """The frame-pointer rule after the prologue: cfa = fp + 2ws, ra at cfa - ws, fp at cfa - 2ws."""
    return FrameRule(ValueRule("fp", 2 * ws), ValueRule("cfa", -ws, True), ValueRule("cfa", -2 * ws, True))


def entry_rule(ws: int = 8) -> FrameRule:
    """The function-entry rule (IP at ``push %rbp``/``endbr64``): cfa = sp + ws, fp unchanged."""
    return FrameRule(ValueRule("sp", ws), ValueRule("cfa", -ws, True), ValueRule(SAME))


class RuleError(Exception):
    """A rule names a register the unwinder does not have (e.g. rN below the topmost frame)."""


def apply_rule(
    rule: FrameRule,
    sp: int,
    fp: int,
    read_word: Callable[[int], int],
    regs: Mapping[str, int] | None = None,
) -> tuple[int, int | None, int]:
    """Evaluate ``rule`` and return ``(cfa, ra, fp')``; ``ra`` is None when it is undefined.

    ``read_word`` reads one word of user memory (and raises ``MemoryFault``); ``regs`` holds
    extra registers by name ("rN") for the topmost frame only.
    """

    def base_value(name: str, cfa: int | None) -> int:
        if name == "sp":
            return sp
        if name == "fp":
            return fp
        if name == "cfa" and cfa is not None:
            return cfa
        if regs is not None and name in regs:
            return regs[name]
        raise RuleError(f"rule needs register {name!r}, which is not known at this frame")

    def value(r: ValueRule, cfa: int | None, keep: int | None) -> int | None:
        if r.base == SAME:
            return keep
        if r.base == UNDEFINED:
            return None
        addr = base_value(r.base, cfa) + r.offset
        return read_word(addr) if r.deref else addr

    cfa = value(rule.cfa, None, None)
    if cfa is None:
        raise RuleError("the CFA rule is undefined")
    ra = value(rule.ra, cfa, None)
    new_fp = value(rule.fp, cfa, fp)
    return cfa, ra, fp if new_fp is None else new_fp
