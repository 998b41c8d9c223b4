"""Synthetic user stacks for tests and the benchmark: byte layouts a real call chain would leave.

:func:`fp_chain` lays out ``depth`` frames that each saved the caller's frame pointer and return
address (``push %rbp; mov %rsp,%rbp`` after ``call``), the outermost with a zero saved FP as
``_start`` leaves it.  :class:`RangeRules` is a minimal rule provider (the ``rule_for`` protocol
of an SFrame table) over address ranges, standing in for a real table in mixed-unwinding tests.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from ..memory import BufferMemory
from ..regs import USER_CS_32, UserRegs
from ..rule import FrameRule, ValueRule

STACK_TOP_64 = 0x7FFFFFFDE000
STACK_TOP_32 = 0xFFFDE000
TEXT_BASE = 0x401000


@dataclass
class SynthStack:
    memory: BufferMemory
    regs: UserRegs
    ips: list[int]  # the full expected trace, interrupted IP first
    sps: list[int]  # the sp of every frame (the CFA of the one above)
    stack_base: int
    stack_top: int


def fp_chain(depth: int, *, ws: int = 8, frame_size: int = 48, top: int | None = None,
             text: int = TEXT_BASE, func_size: int = 0x100) -> SynthStack:
    """A stack of ``depth`` frame-pointer frames; frame i runs in function i at ``text + i*func_size``.

    Each frame occupies ``frame_size`` bytes: locals, then the saved FP at ``fp`` and the return
    address at ``fp + ws`` (so the caller's sp is ``fp + 2*ws``).  The outermost frame's saved FP
    is 0 (``_start`` clears rbp and keeps no frame), so the walk ends with ``fp = 0 < sp`` after
    exactly ``depth`` entries.
    """
    if frame_size < 2 * ws or frame_size % ws:
        raise ValueError("frame_size must hold the saved FP and RA and be word aligned")
    top = top if top is not None else (STACK_TOP_64 if ws == 8 else STACK_TOP_32)
    size = depth * frame_size + 64
    base = (top - size) & ~0xF
    buf = bytearray(top - base)
    pack = struct.Struct("<Q" if ws == 8 else "<I").pack_into
    ips = [text + i * func_size + 0x10 for i in range(depth)]
    sps, fps = [], []
    sp = base + 16
    for _ in range(depth):
        fp = sp + frame_size - 2 * ws
        sps.append(sp)
        fps.append(fp)
        sp = fp + 2 * ws
    # The outermost function (_start) has no frame: it cleared rbp, so its callee saved FP 0.
    fps[-1] = 0
    if depth > 1:
        sps[-1] = fps[-2] + 2 * ws
    for i in range(depth - 1):
        pack(buf, fps[i] - base, fps[i + 1])
        pack(buf, fps[i] + ws - base, ips[i + 1])
    cs, ss = (0x33, 0x2B) if ws == 8 else (USER_CS_32, 0x2B)
    regs = UserRegs(ip=ips[0], sp=sps[0], bp=fps[0], cs=cs, ss=ss)
    return SynthStack(BufferMemory({base: bytes(buf)}), regs, ips, sps, base, top)


class RangeRules:
    """``rule_for(pc)`` over sorted, non-overlapping ``[start, end)`` ranges, each with one rule."""

    def __init__(self, entries: list[tuple[int, int, FrameRule]]):
        entries = sorted(entries)
        self._starts = [e[0] for e in entries]
        self._entries = entries
        self.lookups = 0

    def rule_for(self, pc: int) -> FrameRule | None:
        self.lookups += 1
        i = bisect.bisect_right(self._starts, pc) - 1
        if i >= 0:
            start, end, rule = self._entries[i]
            if pc < end:
                return rule
        return None


def sp_rule(cfa_off: int, ws: int = 8, fp_saved: bool = True) -> FrameRule:
    """An SFrame-style SP-based rule: cfa = sp + cfa_off, RA at cfa - ws, FP at cfa - 2ws if saved."""
    fp = ValueRule("cfa", -2 * ws, True) if fp_saved else ValueRule("same")
    return FrameRule(ValueRule("sp", cfa_off), ValueRule("cfa", -ws, True), fp)


@dataclass
class MixedStack(SynthStack):
    table: RangeRules | None = None
    funcs: list[int] | None = None  # start address of each frame's function


def mixed_chain(spec: list[tuple[str, bool]], *, locals_size: int = 24, top: int = STACK_TOP_64,
                text: int = TEXT_BASE, func_size: int = 0x100) -> MixedStack:
    """A 64-bit chain mixing frame-pointer and frameless functions, with an SFrame-like table.

    ``spec`` lists frames from the topmost to the outermost caller as ``(kind, has_table)``:
    kind ``"fp"`` is ``push %rbp; mov %rsp,%rbp; sub $locals,%rsp``, ``"nofp"`` is
    ``sub $locals,%rsp`` with rbp left as the caller's (``-fomit-frame-pointer``).  Functions with
    ``has_table`` get an SP-based rule in the returned table, as ``as --gsframe`` would emit.  The
    outermost entry is ``_start``: no frame, rbp cleared, RA undefined in its rule.
    """
    depth = len(spec)
    funcs = [text + i * func_size for i in range(depth)]
    ips = [f + 0x10 for f in funcs]
    base = (top - depth * (locals_size + 16) - 256) & ~0xF
    buf = bytearray(top - base)
    pack = struct.Struct("<Q").pack_into
    sp = top - 64  # the outermost function's sp when it calls
    rbp = 0
    sps = [0] * depth
    sps[depth - 1] = sp
    rules: list[tuple[int, int, FrameRule]] = []
    if spec[-1][1]:
        rules.append((funcs[-1], funcs[-1] + func_size,
                      FrameRule(ValueRule("sp", 8), ValueRule("undefined"), ValueRule("same"))))
    for i in range(depth - 2, -1, -1):
        kind, has_table = spec[i]
        sp -= 8
        pack(buf, sp - base, ips[i + 1])  # call: the return address
        if kind == "fp":
            sp -= 8
            pack(buf, sp - base, rbp)  # push %rbp
            rbp = sp  # mov %rsp,%rbp
            sp -= locals_size
            rule = sp_rule(locals_size + 16)
        elif kind == "nofp":
            sp -= locals_size
            rule = sp_rule(locals_size + 8, fp_saved=False)
        else:
            raise ValueError(f"frame kind must be 'fp' or 'nofp', not {kind!r}")
        sps[i] = sp
        if has_table:
            rules.append((funcs[i], funcs[i] + func_size, rule))
    regs = UserRegs(ip=ips[0], sp=sp, bp=rbp)
    return MixedStack(BufferMemory({base: bytes(buf)}), regs, ips, sps, base, top,
                      RangeRules(rules) if rules else None, funcs)
