"""The DWARF call-frame-information oracle: an unwinder independent of frame pointers and SFrame.

Rules come from ``.eh_frame`` (and ``.debug_frame`` where present) as pyelftools decodes them
(``DWARFInfo.EH_CFI_entries()``/``CFI_entries()``, ``FDE.get_decoded()``: one row per location
with the CFA rule and the register rules; DWARF 5 section 6.4).  Each row becomes a
:class:`FrameRule`, evaluated by the same :func:`apply_rule` as every other unwinder:

* CFA = reg + offset: rsp (DWARF 7) -> ``sp``, rbp (6) -> ``fp``, any other register -> ``rN``,
  known only in the topmost frame (a DRAP CFA in r10 below the top stops with RULE_ERROR);
* ``DW_CFA_def_cfa_expression``: evaluated symbolically for the PC, which handles the PLT's
  ``rsp + 8 + ((rip & 15) >= 11) << 3``; anything else is UNSUPPORTED_RULE for that frame;
* RA (the CIE's return-address column, 16): ``offset(N)`` -> ``*(cfa + N)``, ``undefined`` ->
  the outermost frame (``_start``);
* rbp: restored from ``offset(N)``, kept when the row has no rule for it.

Only ip, sp and fp are carried between frames (as the kernel does); a rule that needs another
register below the topmost frame stops the walk with that register named.  Return addresses
are looked up at ``ra - 1`` (the call), the interrupted IP at itself.

Why pyelftools rather than our own parser: it is maintained, and it already turns CIE/FDE
instruction streams into rows, which is the part where a home-made decoder would be wrong.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable

from elftools.dwarf.callframe import FDE, RegisterRule
from elftools.dwarf.dwarf_expr import DWARFExprParser

from ..memory import Memory
from ..regs import UserRegs
from .access import MASK64, TASK_SIZE_MAX_4LEVEL, AccessError, NotUserAddress, UserAccess
from .maps import AddressSpace, ElfImage, MappedElf
from .rule import SAME, UNDEFINED, FrameRule, RuleError, ValueRule, apply_rule, dwarf_regs
from .user import UNWIND_MAX_ENTRIES, Frame, Stop, StopReason, Trace, UnwinderType

RSP, RBP, RIP = 7, 6, 16


class UnsupportedCFI(Exception):
    """The row uses a DWARF construct this oracle does not evaluate; names it."""


def _reg_base(reg: int) -> str:
    return "sp" if reg == RSP else "fp" if reg == RBP else f"r{reg}"


@dataclass(frozen=True)
class _Lin:
    """A linear value ``base + const`` while evaluating a CFA expression symbolically."""

    base: str | None
    const: int


_CONST_BINOPS = {
    "DW_OP_and": lambda a, b: a & b,
    "DW_OP_or": lambda a, b: a | b,
    "DW_OP_xor": lambda a, b: a ^ b,
    "DW_OP_mul": lambda a, b: a * b,
    "DW_OP_shl": lambda a, b: a << b,
    "DW_OP_shr": lambda a, b: a >> b,
    "DW_OP_ge": lambda a, b: int(a >= b),
    "DW_OP_gt": lambda a, b: int(a > b),
    "DW_OP_le": lambda a, b: int(a <= b),
    "DW_OP_lt": lambda a, b: int(a < b),
    "DW_OP_eq": lambda a, b: int(a == b),
    "DW_OP_ne": lambda a, b: int(a != b),
}


def eval_cfa_expression(ops, pc: int) -> ValueRule:
    """A CFA expression as ``base + offset`` (optionally dereferenced) for the given PC."""
    stack: list[_Lin] = []
    deref = False
    for i, op in enumerate(ops):
        name = op.op_name
        if deref:
            raise UnsupportedCFI(f"DW_OP_deref followed by {name}")
        if name.startswith("DW_OP_breg"):
            reg = int(name[len("DW_OP_breg"):])
            off = op.args[0]
            stack.append(_Lin(None, pc + off) if reg == RIP else _Lin(_reg_base(reg), off))
        elif name.startswith("DW_OP_lit"):
            stack.append(_Lin(None, int(name[len("DW_OP_lit"):])))
        elif name.startswith("DW_OP_const"):
            stack.append(_Lin(None, op.args[0]))
        elif name == "DW_OP_plus_uconst":
            top = stack.pop()
            stack.append(_Lin(top.base, top.const + op.args[0]))
        elif name in ("DW_OP_plus", "DW_OP_minus"):
            b, a = stack.pop(), stack.pop()
            if name == "DW_OP_minus":
                if b.base is not None:
                    raise UnsupportedCFI("DW_OP_minus of a register value")
                stack.append(_Lin(a.base, a.const - b.const))
            else:
                if a.base is not None and b.base is not None:
                    raise UnsupportedCFI("DW_OP_plus of two register values")
                stack.append(_Lin(a.base or b.base, a.const + b.const))
        elif name in _CONST_BINOPS:
            b, a = stack.pop(), stack.pop()
            if a.base is not None or b.base is not None:
                raise UnsupportedCFI(f"{name} of a register value")
            stack.append(_Lin(None, _CONST_BINOPS[name](a.const, b.const) & MASK64))
        elif name == "DW_OP_deref" and i == len(ops) - 1:
            deref = True
        else:
            raise UnsupportedCFI(f"CFA expression op {name}")
    if len(stack) != 1 or stack[0].base is None:
        raise UnsupportedCFI("CFA expression does not reduce to register + offset")
    return ValueRule(stack[0].base, stack[0].const, deref)


def _register_rule(rule: RegisterRule | None, what: str, default: ValueRule) -> ValueRule:
    if rule is None:
        return default
    t = rule.type
    if t == RegisterRule.OFFSET:
        return ValueRule("cfa", rule.arg, True)
    if t == RegisterRule.VAL_OFFSET:
        return ValueRule("cfa", rule.arg, False)
    if t == RegisterRule.UNDEFINED:
        return ValueRule(UNDEFINED)
    if t == RegisterRule.SAME_VALUE:
        return ValueRule(SAME)
    if t == RegisterRule.REGISTER:
        return ValueRule(_reg_base(rule.arg), 0, False)
    raise UnsupportedCFI(f"{what} rule {t}")


class CFITable:
    """The FDEs of one ELF image, indexed by link-time address."""

    def __init__(self, image: ElfImage):
        self.image = image
        self._indices: list[tuple[list[int], list[tuple[int, int, FDE]]]] = []
        elf = image.elf
        if elf.has_dwarf_info():
            dwarf = elf.get_dwarf_info(follow_links=False)
            self._parser = DWARFExprParser(dwarf.structs)
            sources = []
            if dwarf.has_EH_CFI():
                sources.append(dwarf.EH_CFI_entries())
            if dwarf.has_CFI():
                sources.append(dwarf.CFI_entries())
            for entries in sources:
                fdes = sorted(
                    ((e["initial_location"], e["initial_location"] + e["address_range"], e)
                     for e in entries if isinstance(e, FDE) and e["address_range"]),
                    key=lambda t: t[0],
                )
                self._indices.append(([f[0] for f in fdes], fdes))
        self._decoded: dict[int, tuple[list[int], list[dict], int]] = {}

    def __len__(self) -> int:
        return sum(len(i[1]) for i in self._indices)

    def fde_for(self, link_pc: int) -> FDE | None:
        for starts, fdes in self._indices:  # .eh_frame first, then .debug_frame
            i = bisect.bisect_right(starts, link_pc) - 1
            if i >= 0 and link_pc < fdes[i][1]:
                return fdes[i][2]
        return None

    def row_for(self, link_pc: int) -> tuple[dict, int] | None:
        """The decoded row in force at ``link_pc`` and the RA column, or None without an FDE."""
        fde = self.fde_for(link_pc)
        if fde is None:
            return None
        key = id(fde)
        dec = self._decoded.get(key)
        if dec is None:
            table = fde.get_decoded().table
            ra_col = fde.cie["return_address_register"]
            dec = self._decoded[key] = ([r["pc"] for r in table], table, ra_col)
        pcs, table, ra_col = dec
        i = bisect.bisect_right(pcs, link_pc) - 1
        if i < 0:
            return None
        return table[i], ra_col

    def rule_for_link(self, link_pc: int, runtime_pc: int | None = None) -> FrameRule | None:
        found = self.row_for(link_pc)
        if found is None:
            return None
        row, ra_col = found
        cfa = row["cfa"]
        if cfa.expr is not None:
            cfa_rule = eval_cfa_expression(self._parser.parse_expr(cfa.expr),
                                           runtime_pc if runtime_pc is not None else link_pc)
        elif cfa.reg is None:
            raise UnsupportedCFI("row without a CFA rule")
        else:
            cfa_rule = ValueRule(_reg_base(cfa.reg), cfa.offset)
        ra = row.get(ra_col)
        if ra is None:
            raise UnsupportedCFI("no rule for the return address")
        return FrameRule(cfa_rule, _register_rule(ra, "RA", ValueRule(UNDEFINED)),
                         _register_rule(row.get(RBP), "rbp", ValueRule(SAME)))


def cfi_table(image: ElfImage) -> CFITable:
    return image.cached("cfi", CFITable)


class CFIRules:
    """The rule provider of one mapped ELF (runtime PCs), shaped like an SFrame table."""

    def __init__(self, table: CFITable, bias: int):
        self.table = table
        self.bias = bias

    @classmethod
    def for_mapped(cls, elf: MappedElf) -> "CFIRules":
        return cls(cfi_table(elf.image), elf.bias)

    def rule_for(self, pc: int) -> FrameRule | None:
        return self.table.rule_for_link(pc - self.bias, pc)


def cfi_tables_for(space: AddressSpace) -> Callable[[int], CFIRules | None]:
    return space.tables_for(CFIRules.for_mapped)


def unwind_cfi(memory: Memory, regs: UserRegs, tables_for: Callable[[int], CFIRules | None], *,
               max_entries: int = UNWIND_MAX_ENTRIES, task_size_max: int = TASK_SIZE_MAX_4LEVEL) -> Trace:
    """Walk with DWARF CFI only; 64-bit tasks.  Same Trace and StopReasons as the kernel model."""
    access = UserAccess(memory, 8, task_size_max)
    ip, sp, fp = regs.ip & MASK64, regs.sp & MASK64, regs.bp & MASK64
    trace = Trace(stopped_in=UnwinderType.CFI)
    frames = trace.frames
    frames.append(Frame(ip, sp, fp, UnwinderType.REGS))
    top_regs = dwarf_regs(regs)
    topmost = True

    def check(cfa: int) -> int:
        cfa &= MASK64
        if cfa <= sp:
            raise _Stop(Stop(StopReason.NON_MONOTONIC, cfa, f"sp={sp:#x}"))
        return cfa

    while True:
        if len(frames) >= max_entries:
            trace.stop = Stop(StopReason.LIMIT, None, f"{max_entries} entries")
            return trace
        lookup = ip if topmost else ip - 1
        provider = tables_for(lookup)
        try:
            rule = provider.rule_for(lookup) if provider is not None else None
        except UnsupportedCFI as exc:
            trace.stop = Stop(StopReason.UNSUPPORTED_RULE, ip, str(exc))
            return trace
        if rule is None:
            trace.stop = Stop(StopReason.NO_UNWIND_INFO, ip)
            return trace
        try:
            cfa, ra, new_fp = apply_rule(rule, sp, fp, access.read_word, top_regs if topmost else None, check)
        except _Stop as exc:
            trace.stop = exc.stop
            return trace
        except NotUserAddress as exc:
            trace.stop = Stop(StopReason.NOT_USER_ADDRESS, exc.addr)
            return trace
        except AccessError as exc:
            trace.stop = Stop(StopReason.FAULT, exc.addr)
            return trace
        except RuleError as exc:
            trace.stop = Stop(StopReason.RULE_ERROR, ip, str(exc))
            return trace
        if ra is None:
            trace.stop = Stop(StopReason.END_OF_CHAIN, None, "return address undefined (outermost frame)")
            return trace
        ip, sp, fp = ra & MASK64, cfa, new_fp & MASK64
        topmost = False
        frames.append(Frame(ip, sp, fp, UnwinderType.CFI))


class _Stop(Exception):
    def __init__(self, stop: Stop):
        self.stop = stop
