"""The DWARF call-frame-information oracle: an unwinder independent of frame pointers and SFrame.

Rules come from ``.eh_frame`` as :mod:`harness.unwind.ehframe` decodes it, and from
``.debug_frame`` where present as pyelftools does (``DWARFInfo.CFI_entries()``): both give
``FDE.get_decoded()``'s table, one row per location with the CFA rule and the register rules
(DWARF 5 section 6.4) as pyelftools' ``CFARule``/``RegisterRule``.  Each row becomes a
:class:`FrameRule`, evaluated by the same :func:`apply_rule` as every other unwinder.

Two register numberings (:class:`CFIArch`), chosen per image from its ELF header: x86-64
(``EM_X86_64``; rsp 7, rbp 6, RA column 16, 8-byte words) and i386 (``EM_386``, ELF class 32;
System V i386 psABI: esp 4, ebp 5, RA column 8 = eip, 4-byte words).  The task's registers
choose the walk's word size: a compat task (``UserRegs.compat``, CS = __USER32_CS) is walked
with 4-byte reads and 32-bit wrap-around, and may only meet i386 images (an image of the other
kind stops the walk with UNSUPPORTED_RULE).

* CFA = reg + offset: the stack pointer -> ``sp``, the frame pointer -> ``fp``, any other
  register -> ``rN``, known only in the topmost frame (a DRAP CFA in r10, or i386 main's
  ``ecx`` after its stack realignment, below the top stops with RULE_ERROR);
* ``DW_CFA_def_cfa_expression``: evaluated symbolically for the PC, which handles the PLT's
  ``rsp + 8 + ((rip & 15) >= 11) << 3`` (i386: ``esp + 4 + ((eip & 15) >= 11) << 2``, lit10 or
  lit9 in IBT PLTs), the ``*(reg + N)`` of a realigned frame, and OpenSSL's perlasm
  ``*(reg + N) + M`` (``.cfi_cfa_expression %rsp+N,deref,+M``: the caller's rsp saved in a
  realigned or moving frame, sha256/sha512 AVX2, AES-NI, ChaCha20, Poly1305, ...) whose word is
  read from the task's memory at each step; anything else is UNSUPPORTED_RULE for that frame;
* RA (the CIE's return-address column): ``offset(N)`` -> ``*(cfa + N)``, ``undefined`` -> the
  outermost frame (``_start``);
* the frame pointer: restored from ``offset(N)``, or from ``expression(E)`` where E reduces to
  ``reg + N`` (i386 main: ``DW_OP_breg5 (ebp): 0``, the word at ebp); kept when the row has no
  rule for it.

Only ip, sp and fp are carried between frames (as the kernel does); a rule that needs another
register below the topmost frame stops the walk with that register named.  Return addresses
are looked up at ``ra - 1`` (the call), the interrupted IP at itself, except where the task is in
a system call (:func:`syscall_return`): there the IP is the address after the ``syscall``
instruction, and is looked up at ``ip - 1`` as a return address is.  A signal trampoline (CIE
augmentation "S": glibc's ``__restore_rt``, the i386 vDSO's ``__kernel_sigreturn``) ends the walk
with UNSUPPORTED_RULE: the frame after it is an interrupted context, not a caller, and whoever
wants to go on evaluates it (the engine does, for 64-bit signal frames).

Bad input stays typed: a section that does not decode raises :class:`CorruptCFI`, a
construct this oracle does not evaluate :class:`UnsupportedCFI` (its base); :func:`unwind_cfi`
turns both into a ``Stop`` with UNSUPPORTED_RULE and the reason, never an exception.

Why a reader of our own for ``.eh_frame``: pyelftools' construct-based parser costs about
0.13 ms an entry, every entry decoded up front (0.5 s for a static binary); pyelftools stays the
reference it is tested against, FDE by FDE on real binaries, and the reader of ``.debug_frame``.
"""

from __future__ import annotations

import bisect
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass

from elftools.common.exceptions import DWARFError, ELFError
from elftools.construct.core import ConstructError
from elftools.dwarf.callframe import FDE, RegisterRule
from elftools.dwarf.dwarf_expr import DWARFExprParser
from elftools.dwarf.structs import DWARFStructs
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationHandler
from elftools.elf.sections import Section

from ..errors import HarnessError
from ..memory import Memory
from ..regs import UserRegs
from ..rule import (
    DWARF_I386,
    DWARF_X86_64,
    SAME,
    UNDEFINED,
    FrameRule,
    RuleError,
    ValueRule,
    apply_rule,
    dwarf_regs,
)
from .access import TASK_SIZE_MAX_4LEVEL, AccessError, NotUserAddress, UserAccess
from .ehframe import FDE as EhFDE
from .ehframe import parse_eh_frame
from .maps import AddressSpace, ElfImage, MappedElf
from .user import UNWIND_MAX_ENTRIES, Frame, Stop, StopReason, Trace, UnwinderType


@dataclass(frozen=True)
class CFIArch:
    """One DWARF register numbering: the stack, frame and instruction pointers' numbers (the
    last is the CIE's return-address column), the word size, and number -> pt_regs name."""

    name: str
    sp: int
    fp: int
    ip: int
    ws: int
    regs: tuple[str, ...]
    # EH_RETURN_DATA_REGNO: the registers a __builtin_eh_return hands the landing pad
    eh_data: tuple[int, ...] = ()

    @property
    def mask(self) -> int:
        return (1 << (8 * self.ws)) - 1

    def base(self, reg: int) -> str:
        """The ValueRule base of DWARF register ``reg``."""
        return "sp" if reg == self.sp else "fp" if reg == self.fp else f"r{reg}"

    def reg_name(self, reg: int) -> str:
        return self.regs[reg] if 0 <= reg < len(self.regs) else f"r{reg}"


X86_64 = CFIArch("x86-64", sp=7, fp=6, ip=16, ws=8, regs=DWARF_X86_64, eh_data=(0, 1))  # rax, rdx
I386 = CFIArch("i386", sp=4, fp=5, ip=8, ws=4, regs=DWARF_I386, eh_data=(0, 2))  # eax, edx
RSP, RBP, RIP = X86_64.sp, X86_64.fp, X86_64.ip


def arch_of(image: ElfImage) -> CFIArch:
    """The numbering an image's CFI uses: i386 for EM_386, x86-64 for EM_X86_64 (x32 included),
    else by ELF class."""
    machine = image.elf["e_machine"]
    if machine == "EM_386":
        return I386
    if machine == "EM_X86_64":
        return X86_64
    return I386 if image.elf.elfclass == 32 else X86_64


def arch_of_task(regs: UserRegs) -> CFIArch:
    """The numbering and word size a task is walked with: i386 for a compat task."""
    return I386 if regs.compat else X86_64


#: an FDE of either reader: .eh_frame's (:mod:`.ehframe`) or .debug_frame's (pyelftools)
AnyFDE = EhFDE | FDE


class UnsupportedCFI(HarnessError):
    """The row uses a DWARF construct this oracle does not evaluate; names it."""


class CorruptCFI(UnsupportedCFI):
    """The image's ``.eh_frame``/``.debug_frame`` (or an expression in it) does not decode."""


# What pyelftools raises on bytes it cannot decode (its vendored construct, its own asserts,
# and plain Python errors from truncated or nonsensical fields).
_DECODE_ERRORS = (ELFError, DWARFError, ConstructError, struct.error, KeyError, IndexError, ValueError,
                  TypeError, AttributeError, AssertionError, EOFError, OverflowError, RecursionError)


@dataclass(frozen=True)
class _Lin:
    """A value while evaluating a CFA expression symbolically: ``base + const``, or with
    ``deref`` the word at ``base + const`` plus ``add`` (a constant added after the read)."""

    base: str | None
    const: int
    deref: bool = False
    add: int = 0

    @property
    def constant(self) -> bool:
        return self.base is None and not self.deref

    def plus(self, n: int) -> _Lin:
        return _Lin(self.base, self.const, True, self.add + n) if self.deref else _Lin(self.base, self.const + n)


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
_CONSTS = ("DW_OP_const1u", "DW_OP_const1s", "DW_OP_const2u", "DW_OP_const2s", "DW_OP_const4u",
           "DW_OP_const4s", "DW_OP_const8u", "DW_OP_const8s", "DW_OP_constu", "DW_OP_consts")
_CFA = _Lin("cfa", 0)


def _evaluate(ops, pc: int, arch: CFIArch, what: str, push_cfa: bool) -> _Lin:
    """Evaluate ``ops`` symbolically: the value on top as ``base + const``, or as the word read
    there (one ``DW_OP_deref``) plus a constant added after.  ``push_cfa``: the stack starts with
    the CFA (register rules, DWARF 5 section 6.4.2.3), else empty (the CFA rule)."""
    stack: list[_Lin] = [_CFA] if push_cfa else []
    mask = arch.mask
    name = "?"
    try:
        for op in ops:
            name = op.op_name
            if name.startswith("DW_OP_breg"):
                reg, off = (op.args[0], op.args[1]) if name == "DW_OP_bregx" else (int(name[10:]), op.args[0])
                stack.append(_Lin(None, (pc + off) & mask) if reg == arch.ip else _Lin(arch.base(reg), off))
            elif name.startswith("DW_OP_lit"):
                stack.append(_Lin(None, int(name[len("DW_OP_lit"):])))
            elif name in _CONSTS:
                stack.append(_Lin(None, op.args[0] & mask))
            elif name == "DW_OP_plus_uconst":
                stack.append(stack.pop().plus(op.args[0]))
            elif name in ("DW_OP_plus", "DW_OP_minus"):
                b, a = stack.pop(), stack.pop()
                if name == "DW_OP_minus":
                    if not b.constant:
                        raise UnsupportedCFI(f"{what}: DW_OP_minus of a register or memory value")
                    stack.append(a.plus(-b.const))
                elif b.constant:
                    stack.append(a.plus(b.const))
                elif a.constant:
                    stack.append(b.plus(a.const))
                else:
                    raise UnsupportedCFI(f"{what}: DW_OP_plus of two register or memory values")
            elif name in _CONST_BINOPS:
                b, a = stack.pop(), stack.pop()
                if not a.constant or not b.constant:
                    raise UnsupportedCFI(f"{what}: {name} of a register or memory value")
                stack.append(_Lin(None, _CONST_BINOPS[name](a.const, b.const) & mask))
            elif name == "DW_OP_deref":
                top = stack.pop()
                if top.deref:
                    raise UnsupportedCFI(f"{what}: DW_OP_deref of a value read by DW_OP_deref")
                if top.base is None:
                    raise UnsupportedCFI(f"{what}: DW_OP_deref of a constant address")
                stack.append(_Lin(top.base, top.const, True))
            else:
                raise UnsupportedCFI(f"{what}: op {name}")
    except IndexError as exc:  # pop from an empty stack, or an op without its argument
        raise UnsupportedCFI(f"{what}: stack underflow at {name}") from exc
    except ValueError as exc:
        raise UnsupportedCFI(f"{what}: op {name} does not parse") from exc
    # The result is the top entry; a register rule may leave the CFA it started with under it.
    if not stack or len(stack) > 2 or len(stack) == 2 and (not push_cfa or stack[0] != _CFA):
        raise UnsupportedCFI(f"{what} leaves {len(stack)} values on the stack")
    top = stack[-1]
    if top.base is None:
        raise UnsupportedCFI(f"{what} does not reduce to register + offset")
    return top


def eval_cfa_expression(ops, pc: int, arch: CFIArch = X86_64) -> ValueRule:
    """A CFA expression as ``base + offset`` (optionally dereferenced) for the given PC.

    ``arch`` gives the register numbering: ``DW_OP_breg16`` is rip on x86-64, ``DW_OP_breg8``
    eip on i386 (both read as ``pc``); constants wrap at its word size."""
    top = _evaluate(ops, pc, arch, "CFA expression", push_cfa=False)
    if top.base == "cfa":
        raise UnsupportedCFI("CFA expression based on the CFA")
    return ValueRule(top.base, top.const, top.deref, top.add)


def eval_register_expression(ops, pc: int, arch: CFIArch = X86_64, *, val: bool = False) -> ValueRule:
    """A register rule ``expression(E)`` (the register is saved at address E) or, with ``val``,
    ``val_expression(E)`` (E is the value), E evaluated with the CFA pushed first."""
    top = _evaluate(ops, pc, arch, "val_expression" if val else "expression", push_cfa=True)
    if top.deref and not val:
        raise UnsupportedCFI("expression rule with DW_OP_deref (a double dereference)")
    return ValueRule(top.base, top.const, True) if not val else ValueRule(top.base, top.const, top.deref, top.add)


#: rule_for_link answers kept per table before the memo starts again
RULE_CACHE_MAX = 1 << 16


class CFITable:
    """The FDEs of one ELF image, indexed by link-time address.

    A section that does not decode leaves the table empty of it and recorded in ``error``:
    every lookup then raises :class:`CorruptCFI` naming it (the walk stops there, typed)."""

    def __init__(self, image: ElfImage):
        self.image = image
        self.error: str | None = None
        self._indices: list[tuple[list[int], list[tuple[int, int, AnyFDE]]]] = []
        self._parser: DWARFExprParser | None = None
        #: rule_for_link's answers (a rule, None, or the UnsupportedCFI it raised) by its
        #: arguments: a run walks the same few call sites thousands of times
        self._rules: dict[tuple, FrameRule | None | UnsupportedCFI] = {}
        try:
            self.arch = arch_of(image)
            elf = image.elf
            if elf.has_dwarf_info():
                self._parser = DWARFExprParser(DWARFStructs(little_endian=elf.little_endian, dwarf_format=32,
                                                            address_size=elf.elfclass // 8))
                eh_frame = elf.get_section_by_name(".eh_frame")
                if eh_frame is not None:
                    self._add(".eh_frame", lambda: _eh_frame_fdes(elf, eh_frame))
                if any(elf.get_section_by_name(n) is not None for n in (".debug_frame", ".zdebug_frame")):
                    dwarf = elf.get_dwarf_info(follow_links=False)
                    if dwarf.has_CFI():
                        self._add(".debug_frame", lambda: [e for e in dwarf.CFI_entries() if isinstance(e, FDE)])
        except _DECODE_ERRORS as exc:
            self.arch = getattr(self, "arch", X86_64)
            self.error = f"{image.name}: DWARF sections do not decode ({type(exc).__name__}: {exc})"
        self._decoded: dict[int, tuple[list[int], list[dict], int]] = {}
        self._eh_data: dict[int, bool] = {}

    def _add(self, section: str, entries: Callable[[], list[AnyFDE]]) -> None:
        """Index the FDEs with a non-empty range of one section, or record why it does not decode."""
        try:
            fdes = sorted(((e["initial_location"], e["initial_location"] + e["address_range"], e)
                           for e in entries() if e["address_range"]), key=lambda t: t[0])
        except _DECODE_ERRORS as exc:
            self.error = f"{self.image.name}: {section} does not decode ({type(exc).__name__}: {exc})"
            return
        self._indices.append(([f[0] for f in fdes], fdes))

    def __len__(self) -> int:
        return sum(len(i[1]) for i in self._indices)

    def fdes(self) -> list[AnyFDE]:
        """Every FDE with a non-empty range, ``.eh_frame``'s first, each sorted by address."""
        return [f[2] for _, fdes in self._indices for f in fdes]

    def fde_for(self, link_pc: int) -> AnyFDE | None:
        for starts, fdes in self._indices:  # .eh_frame first, then .debug_frame
            i = bisect.bisect_right(starts, link_pc) - 1
            if i >= 0 and link_pc < fdes[i][1]:
                return fdes[i][2]
        return None

    def row_for(self, link_pc: int) -> tuple[dict, int] | None:
        """The decoded row in force at ``link_pc`` and the RA column, or None without an FDE."""
        fde = self.fde_for(link_pc)
        if fde is None:
            if self.error is not None:
                raise CorruptCFI(self.error)
            return None
        pcs, table, ra_col = self._rows(fde)
        i = bisect.bisect_right(pcs, link_pc) - 1
        if i < 0:
            return None
        return table[i], ra_col

    def _rows(self, fde: AnyFDE) -> tuple[list[int], list[dict], int]:
        key = id(fde)
        dec = self._decoded.get(key)
        if dec is None:
            try:
                table = fde.get_decoded().table
                ra_col = fde.cie["return_address_register"]
            except _DECODE_ERRORS as exc:
                raise CorruptCFI(f"{self.image.name}: FDE at {fde['initial_location']:#x} does not decode "
                                 f"({type(exc).__name__}: {exc})") from exc
            dec = self._decoded[key] = ([r["pc"] for r in table], table, ra_col)
        return dec

    def row_starts(self, lo: int, hi: int) -> list[int]:
        """The addresses in ``(lo, hi)`` where the row in force may change: the starts of rows
        and the bounds of FDEs (link-time addresses, sorted).  Raises :class:`CorruptCFI`."""
        if self.error is not None:
            raise CorruptCFI(self.error)
        out: set[int] = set()
        for starts, fdes in self._indices:
            i = max(bisect.bisect_right(starts, lo) - 1, 0)
            while i < len(fdes) and fdes[i][0] < hi:
                start, end, fde = fdes[i]
                if end > lo:
                    out.update((start, end))
                    out.update(self._rows(fde)[0])
                i += 1
        return sorted(a for a in out if lo < a < hi)

    def parse_expr(self, expr) -> list:
        """The ops of a DWARF expression (bytes of a CFA or register rule)."""
        if self._parser is None:
            raise CorruptCFI(f"{self.image.name}: an expression without DWARF structures")
        try:
            return self._parser.parse_expr(expr)
        except _DECODE_ERRORS as exc:
            raise CorruptCFI(f"{self.image.name}: DWARF expression {bytes(expr).hex()} does not decode "
                             f"({type(exc).__name__}: {exc})") from exc

    def _register_rule(self, rule: RegisterRule | None, what: str, default: ValueRule, pc: int) -> ValueRule:
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
            return ValueRule(self.arch.base(rule.arg), 0, False)
        if t in (RegisterRule.EXPRESSION, RegisterRule.VAL_EXPRESSION):
            try:
                return eval_register_expression(self.parse_expr(rule.arg), pc, self.arch,
                                                val=t == RegisterRule.VAL_EXPRESSION)
            except UnsupportedCFI as exc:
                raise type(exc)(f"{what} rule: {exc}") from exc
        raise UnsupportedCFI(f"{what} rule {t}")

    def saves_eh_data(self, link_pc: int) -> bool:
        """The FDE covering ``link_pc`` saves the EH data registers (rax and rdx; eax and edx on
        i386) in one of its rows.  Those are call-clobbered: GCC's prologue saves them only in a
        function that calls ``__builtin_eh_return`` (libgcc's _Unwind_RaiseException,
        _Unwind_Resume, _Unwind_ForcedUnwind, _Unwind_Resume_or_Rethrow), whose epilogue
        restores them as the landing pad's arguments.  Raises :class:`CorruptCFI`."""
        fde = self.fde_for(link_pc)
        if fde is None or not self.arch.eh_data:
            return False
        key = id(fde)  # asked at every stack's IP: once per FDE
        if key not in self._eh_data:
            _pcs, table, _ra = self._rows(fde)
            self._eh_data[key] = any(all(isinstance(row.get(r), RegisterRule) and row[r].type == RegisterRule.OFFSET
                                         for r in self.arch.eh_data) for row in table)
        return self._eh_data[key]

    def is_signal_frame(self, fde: AnyFDE) -> bool:
        """The FDE's CIE has augmentation 'S': a signal trampoline, whose caller is the
        interrupted context (an IP to look up at itself, not a return address)."""
        try:
            return b"S" in bytes(fde.cie["augmentation"] or b"")
        except _DECODE_ERRORS as exc:
            raise CorruptCFI(f"{self.image.name}: the CIE of the FDE at {fde['initial_location']:#x} "
                             f"does not decode ({type(exc).__name__}: {exc})") from exc

    def rule_for_link(self, link_pc: int, runtime_pc: int | None = None, *,
                      signal_ok: bool = False) -> FrameRule | None:
        """The row at ``link_pc`` as a FrameRule.  ``signal_ok``: a signal frame's row is
        returned (marked ``signal_frame``) instead of raising, for a static comparison of rules."""
        key = (link_pc, runtime_pc, signal_ok)
        try:
            got = self._rules[key]
        except KeyError:
            if len(self._rules) >= RULE_CACHE_MAX:
                self._rules.clear()
            try:
                got = self._rule_for_link(link_pc, runtime_pc, signal_ok)
            except UnsupportedCFI as exc:
                got = exc
            self._rules[key] = got
        if isinstance(got, UnsupportedCFI):
            raise got.with_traceback(None)
        return got

    def _rule_for_link(self, link_pc: int, runtime_pc: int | None, signal_ok: bool) -> FrameRule | None:
        found = self.row_for(link_pc)
        if found is None:
            return None
        signal = self.is_signal_frame(self.fde_for(link_pc))
        if signal and not signal_ok:
            # The walk ends here, typed: the rules (DW_CFA_expression over the saved ucontext or
            # sigcontext) give the interrupted registers, and the frame after this one is that
            # context, not a caller.  A caller that knows signal frames continues from there
            # (harness/oracles/cfi.py evaluates the frame for 64-bit tasks).
            raise UnsupportedCFI("signal frame (CIE augmentation 'S'): the caller is the interrupted context")
        row, ra_col = found
        pc = runtime_pc if runtime_pc is not None else link_pc
        arch = self.arch
        cfa = row["cfa"]
        if cfa.expr is not None:
            cfa_rule = eval_cfa_expression(self.parse_expr(cfa.expr), pc, arch)
        elif cfa.reg is None:
            raise UnsupportedCFI("row without a CFA rule")
        else:
            cfa_rule = ValueRule(arch.base(cfa.reg), cfa.offset)
        ra = row.get(ra_col)
        if ra is None:
            raise UnsupportedCFI("no rule for the return address")
        return FrameRule(cfa_rule, self._register_rule(ra, "RA", ValueRule(UNDEFINED), pc),
                         self._register_rule(row.get(arch.fp), arch.reg_name(arch.fp), ValueRule(SAME), pc),
                         signal)


def _eh_frame_fdes(elf: ELFFile, section: Section) -> list[EhFDE]:
    """The FDEs of ``.eh_frame`` as :mod:`.ehframe` reads them, at the section's address, its
    relocations applied as pyelftools applies them (an object's ``.rela.eh_frame``: none in a
    linked file, nor in an object :func:`harness.sframe.reloc.place_object` placed)."""
    data = section.data()
    handler = RelocationHandler(elf)
    rel = handler.find_relocations_for_section(section)
    if rel is not None:
        stream = io.BytesIO(data)
        handler.apply_section_relocations(stream, rel)
        data = stream.getvalue()
    got = elf.get_section_by_name(".got")
    return [e for e in parse_eh_frame(data, section["sh_addr"], address_size=elf.elfclass // 8,
                                      little_endian=elf.little_endian,
                                      datarel_base=got["sh_addr"] if got is not None else None)
            if isinstance(e, EhFDE)]


def cfi_table(image: ElfImage) -> CFITable:
    return image.cached("cfi", CFITable)


class CFIRules:
    """The rule provider of one mapped ELF (runtime PCs), shaped like an SFrame table."""

    def __init__(self, table: CFITable, bias: int):
        self.table = table
        self.bias = bias

    @property
    def arch(self) -> CFIArch:
        return self.table.arch

    @classmethod
    def for_mapped(cls, elf: MappedElf) -> CFIRules:
        return cls(cfi_table(elf.image), elf.bias)

    def rule_for(self, pc: int) -> FrameRule | None:
        return self.table.rule_for_link(pc - self.bias, pc)


def cfi_tables_for(space: AddressSpace) -> Callable[[int], CFIRules | None]:
    return space.tables_for(CFIRules.for_mapped)


# The instructions a task enters a system call by, which pt_regs' IP points past: ``syscall`` and
# ``int $0x80`` (a compat task's sysenter returns to the vDSO's landing pad right after one).
SYSCALL, INT80 = b"\x0f\x05", b"\xcd\x80"


def syscall_return(access: UserAccess, regs: UserRegs, mask: int) -> bool:
    """Whether the interrupted IP is where a system call returns to: the task is in one
    (:attr:`UserRegs.in_syscall`), the instruction before IP is a syscall instruction, and for
    ``syscall`` the IP is still the one that instruction saved in rcx (pt_regs' cx).

    The IP is then a return address, not an interrupted instruction: the task's frame is that
    of the function with the ``syscall`` in it, and the row at ``ip - 1`` (inside that
    instruction, which changes no register a row describes) is the one in force after it.  The
    IP itself is another function's where the syscall is its function's last instruction: a
    noreturn one (exit_group with ``__builtin_unreachable()`` after it, as in forkexec's and the
    soak's exit_from_here), whose next byte is the next function's entry (the shadow hook
    __cyg_profile_func_exit there), and that entry's rule (CFA = sp + 8) read the caller from
    the syscall's function's locals: 0 and 0x2000 were read at those children's exit stops.

    Each condition rules out registers whose IP merely follows a syscall instruction: an
    interrupt's at a function's entry whose previous function ends with one (orig_ax -1; the
    soak's hook is such a function, called at every instrumented function's return); those a
    successful execve or a signal's delivery installed (orig_ax still the syscall's, the IP the
    new image's entry or the handler, not what ``syscall`` saved in rcx).  ``int $0x80`` saves
    no IP in a register (ecx is an argument): a compat task's IP after one is taken for its
    return address on orig_ax and the code alone."""
    if not regs.in_syscall:
        return False
    try:
        insn = access.read_bytes((regs.ip - 2) & mask, 2)
    except AccessError:
        return False
    return insn == INT80 or insn == SYSCALL and regs.cx == regs.ip


def unwind_cfi(memory: Memory, regs: UserRegs, tables_for: Callable[[int], CFIRules | None], *,
               max_entries: int = UNWIND_MAX_ENTRIES, task_size_max: int = TASK_SIZE_MAX_4LEVEL) -> Trace:
    """Walk with DWARF CFI only.  Same Trace and StopReasons as the kernel model.

    A compat task (``regs.compat``) is walked as ``harness.unwind.user`` walks it: 4-byte words
    (``UserAccess(memory, 4, ...)``), registers and addresses wrapped to 32 bits, i386 CFI."""
    arch = arch_of_task(regs)
    mask = arch.mask
    access = UserAccess(memory, arch.ws, task_size_max)
    read_word = access.read_word if mask == (1 << 64) - 1 else (lambda addr: access.read_word(addr & mask))
    ip, sp, fp = regs.ip & mask, regs.sp & mask, regs.bp & mask
    trace = Trace(stopped_in=UnwinderType.CFI)
    frames = trace.frames
    frames.append(Frame(ip, sp, fp, UnwinderType.REGS))
    top_regs = dwarf_regs(regs)
    topmost = True
    # The topmost IP is looked up at itself, unless it is a system call's return address.
    top_lookup = (ip - 1) & mask if syscall_return(access, regs, mask) else ip

    def check(cfa: int) -> int:
        cfa &= mask
        if cfa <= sp:
            raise _Stop(Stop(StopReason.NON_MONOTONIC, cfa, f"sp={sp:#x}"))
        return cfa

    while True:
        if len(frames) >= max_entries:
            trace.stop = Stop(StopReason.LIMIT, None, f"{max_entries} entries")
            return trace
        lookup = top_lookup if topmost else (ip - 1) & mask
        provider = tables_for(lookup)
        if provider is not None and getattr(provider, "arch", arch) is not arch:
            trace.stop = Stop(StopReason.UNSUPPORTED_RULE, ip,
                              f"{provider.arch.name} CFI in a {arch.name} task")
            return trace
        try:
            rule = provider.rule_for(lookup) if provider is not None else None
        except UnsupportedCFI as exc:  # CorruptCFI included
            trace.stop = Stop(StopReason.UNSUPPORTED_RULE, ip, str(exc))
            return trace
        if rule is None:
            trace.stop = Stop(StopReason.NO_UNWIND_INFO, ip)
            return trace
        try:
            cfa, ra, new_fp = apply_rule(rule, sp, fp, read_word, top_regs if topmost else None, check)
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
        if ra & mask == 0:
            # A return address of 0 ends the stack as an undefined one does: the outermost
            # frame's caller slot, zeroed (Go's goroutine stacks below runtime.goexit, a thread's
            # start on some runtimes).  No frame at 0 is another frame of the trace.
            trace.stop = Stop(StopReason.END_OF_CHAIN, None, "return address 0 (outermost frame)")
            return trace
        ip, sp, fp = ra & mask, cfa, new_fp & mask
        topmost = False
        frames.append(Frame(ip, sp, fp, UnwinderType.CFI))


class _Stop(Exception):
    def __init__(self, stop: Stop):
        self.stop = stop
