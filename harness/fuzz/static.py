"""The static checker: every instruction of every generated function, three unwinders, no guest.

For a built program (:class:`~harness.fuzz.build.Built`) it

1. runs :func:`harness.unwind.sframe_check.check_binary` (SFrame against ``.eh_frame``, and what
   the linker did with the inputs' sections) when the build asked for SFrame;
2. for each function named ``fz_*`` (and ``main``) in the symbol table, disassembles it
   (Capstone: instruction boundaries) and at each instruction address takes the DWARF CFI row
   (the ground truth: :class:`harness.unwind.cfi.CFITable`), builds a stack in memory that row
   describes (:func:`synthesize`: a caller's frame under the function, a return address, a saved
   frame pointer, registers consistent with the row; every value distinct so that two rules
   that differ give different frames), and takes one step with each unwinder: the CFI walk
   (:func:`harness.unwind.cfi.unwind_cfi`), the kernel model with SFrame
   (:class:`harness.unwind.user.UserUnwinder` with the program's SFrame table) and the kernel
   model with frame pointers only.  The caller frames (ip, sp, fp) are compared.

What is a disagreement (a :class:`~harness.fuzz.finding.Finding`, see its kinds) and what is
known behaviour, counted by name in :attr:`StaticChecker.expected` and never flagged:

* the SFrame step differs from the CFI step at an instruction that has an FRE -- always a
  finding (``sframe-step``);
* no FRE at an instruction -- a finding (``sframe-no-fre``) unless the function's CFI uses a rule
  SFrame cannot express (a CFA in another register or through memory: DRAP; gas then emits no
  FDE for it): ``sframe-function-without-fde``, the name harness/verdicts/causes.py uses;
* the frame-pointer step differs from the CFI step -- a finding (``fp-step``) only where the
  CFI's CFA is rbp + offset (the function's frame-pointer body).  Elsewhere it is what frame
  pointers cannot do, named as the causes name it: ``fp-frameless-function`` (no rbp-based CFA
  anywhere in the function), ``fp-prologue-ip`` (before its first rbp-based row),
  ``fp-epilogue-ip`` (after one), and ``fp-drap-cfa`` (the CFA is read through memory or
  another register: a realigned frame, whose rbp + 16 is the copy of the return address the
  prologue pushed, not the CFA);
* a row the synthesis cannot build a stack for (a register rule other than "saved at an
  address" or "same", an RA that is not saved on the stack) is skipped and counted as
  ``unsynthesizable``; an instruction without a CFI row as ``no-cfi-row``.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import capstone
from elftools.elf.sections import SymbolTableSection

from ..memory import BufferMemory
from ..regs import USER_CS_32, USER_CS_64, UserRegs
from ..rule import DWARF_I386, DWARF_X86_64, SAME, UNDEFINED, FrameRule
from ..sframe.errors import SFrameError
from ..unwind.cfi import CFIRules, UnsupportedCFI, cfi_table, unwind_cfi
from ..unwind.maps import ElfImage
from ..unwind.sframe_check import LINKER_KINDS, check_binary, check_table, load
from ..unwind.user import RuleProvider, UnwindConfig, UnwinderType, unwind_user
from .build import Built
from .finding import Finding, build_failed, dedupe

GENERATED_PREFIX = "fz_"
#: linker findings after which the section, read as its header says, describes other addresses
UNREADABLE_AS_HEADER_SAYS = ("concatenated-not-merged", "pcrel-starts-unflagged")
EXPECTED = {
    "sframe-linker-unmerged": "a program whose linker concatenated the .sframe sections or left PC-relative "
                              "starts unflagged (a sframe-check finding): its SFrame steps are not compared",
    "sframe-function-without-fde": "no SFrame FDE for a function whose CFI SFrame cannot express (gas skips it)",
    "fp-frameless-function": "frame-pointer step in a function with no rbp-based CFA",
    "fp-prologue-ip": "frame-pointer step before the function's frame pointer is set up",
    "fp-epilogue-ip": "frame-pointer step after the frame pointer is popped",
    "fp-drap-cfa": "frame-pointer step in a realigned (DRAP) frame: rbp + 16 is not the CFA",
    "sframe-dropped-function": "a generated function whose object's FDE the linker dropped (the sframe-dropped "
                               "finding names them): no FRE in the program, not flagged again per instruction",
    "sframe-i386-skipped": "an i386 (-m32) program: SFrame defines no i386 ABI (no --gsframe with -m32), so "
                           "sframe check and the SFrame step are not run; its CFI and compat frame-pointer steps are",
    "unsynthesizable": "a CFI row no stack is built for (skipped)",
    "no-cfi-row": "an instruction without a CFI row (skipped)",
}

# The synthesized stack: the CFA, the caller's frame pointer (saved), a value rbp holds when the
# row says it was saved (so "saved" and "same" give different answers), the return address.
CFA = 0x7FFF_F000_0000
CALLER_FP = CFA + 0x200
CLOBBERED_FP = CFA + 0x480
RA = 0x5555_0000_1234
STACK_LO, STACK_HI = CFA - 0x4000, CFA + 0x1000
REGISTER_VALUE = {name: 0x1111_0000 + 0x100 * i for i, name in enumerate(DWARF_X86_64)}


@dataclass(frozen=True)
class SynthArch:
    """What a synthesized stack is made of for one ABI: the word size, the DWARF register
    numbering, the CFA, the caller's frame pointer and return address the step must recover, and
    the saved CS that tells the walks which ABI the task has (a compat task: 4-byte words, i386
    CFI, the kernel's compat frame-pointer walk)."""

    ws: int
    names: tuple[str, ...]
    cfa: int
    ra: int
    cs: int

    @property
    def caller_fp(self) -> int:
        return self.cfa + 0x200

    @property
    def clobbered_fp(self) -> int:
        return self.cfa + 0x480

    @property
    def stack(self) -> tuple[int, int]:
        return self.cfa - 0x4000, self.cfa + 0x1000


X86_64_SYNTH = SynthArch(8, DWARF_X86_64, CFA, RA, USER_CS_64)
#: i386 (-m32): every value below 4 GiB (a compat task's registers and words are 32 bits)
I386_SYNTH = SynthArch(4, DWARF_I386, 0xBFFF_0000, 0x0805_1234, USER_CS_32)

SFrameProvider = Callable[[Built, RuleProvider], RuleProvider]


@dataclass(frozen=True)
class Synth:
    memory: BufferMemory
    regs: UserRegs


def _register(base: str, names: tuple[str, ...] = DWARF_X86_64) -> str | None:
    """The register a rule's ``rN`` base names (DWARF numbering), None for a number past them."""
    if re.fullmatch(r"r\d+", base) and int(base[1:]) < len(names):
        return names[int(base[1:])]
    return None


def _base_value(base: str, regs: dict[str, int], cfa: int, names: tuple[str, ...] = DWARF_X86_64) -> int | None:
    if base == "cfa":
        return cfa
    if base in ("sp", "fp"):
        return regs["sp" if base == "sp" else "bp"]
    reg = _register(base, names)
    return regs[reg] if reg is not None else None


def synthesize(rule: FrameRule, arch: SynthArch = X86_64_SYNTH) -> Synth | None:
    """Registers and memory a CFI row describes, or None for a row this cannot build; ``arch``:
    the ABI's (an i386 row's registers are i386-numbered, its words 4 bytes)."""
    names, cfa = arch.names, arch.cfa
    regs = {name: 0x1111_0000 + 0x100 * i for i, name in enumerate(names)}
    cfa_rule = rule.cfa
    if rule.ra.base == UNDEFINED or cfa_rule.base in (SAME, UNDEFINED):
        return None
    fp_saved = rule.fp.base != SAME
    regs["bp"] = arch.clobbered_fp if fp_saved else arch.caller_fp
    words: dict[int, int] = {}
    if cfa_rule.deref:
        # a realigned frame: the CFA is read from memory at base + offset, below it
        frame = (cfa - 0x100) & ~31
        if cfa_rule.base == "fp":
            regs["bp"] = frame
        elif cfa_rule.base != "sp":
            reg = _register(cfa_rule.base, names)
            if reg is None:
                return None
            regs[reg] = frame
        regs["sp"] = frame - 0x40
        where = _base_value(cfa_rule.base, regs, 0, names)
        if where is None:
            return None
        words[where + cfa_rule.offset] = cfa - cfa_rule.add
    elif cfa_rule.base == "sp":
        regs["sp"] = cfa - cfa_rule.offset
    elif cfa_rule.base == "fp":
        regs["bp"] = cfa - cfa_rule.offset
        regs["sp"] = regs["bp"] - 0x48
    elif _register(cfa_rule.base, names) is not None:
        regs[_register(cfa_rule.base, names)] = cfa - cfa_rule.offset
        regs["sp"] = (cfa - 0x100) & ~31
    else:
        return None
    for value, vr in ((arch.ra, rule.ra), (arch.caller_fp, rule.fp)):
        if vr.base == SAME:
            continue
        if not vr.deref:
            return None  # a value rule (val_offset, a register): nothing on the stack to build
        base = _base_value(vr.base, regs, cfa, names)
        stored = value - vr.add  # the word the rule reads, before what it adds
        if base is None or words.get(base + vr.offset, stored) != stored:
            return None
        words[base + vr.offset] = stored
    lo, hi = arch.stack
    ws = arch.ws
    if not lo < regs["sp"] < cfa or any(not lo <= a <= hi - ws or a & (ws - 1) for a in words):
        return None
    buf = bytearray(hi - lo)
    for addr, value in words.items():
        struct.pack_into("<Q" if ws == 8 else "<I", buf, addr - lo, value & ((1 << (8 * ws)) - 1))
    ur = UserRegs(**{k: v for k, v in regs.items() if k not in ("ip",)}, ip=0, cs=arch.cs)
    return Synth(BufferMemory({lo: bytes(buf)}), ur)


_NUM = re.compile(r"[+-]\d+")


def rule_shape(rule: FrameRule) -> str:
    """A rule without its offsets (a signature's detail names no addresses or sizes)."""
    return _NUM.sub("+N", str(rule))


def sframe_expressible(rule: FrameRule) -> bool:
    """A CFI row the SFrame V1/V2 format can express: CFA = sp/fp + N, RA at CFA + N, FP saved
    at CFA + N or kept."""
    c = rule.cfa
    ra_ok = rule.ra.base == UNDEFINED or (rule.ra.base == "cfa" and rule.ra.deref)
    fp_ok = rule.fp.base == SAME or (rule.fp.base == "cfa" and rule.fp.deref)
    return c.base in ("sp", "fp") and not c.deref and ra_ok and fp_ok


@dataclass(frozen=True)
class _Function:
    name: str
    start: int
    size: int


def generated_functions(image: ElfImage) -> list[_Function]:
    symtab = image.elf.get_section_by_name(".symtab")
    if not isinstance(symtab, SymbolTableSection):
        return []
    out = {}
    for s in symtab.iter_symbols():
        if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] and (
                s.name.startswith(GENERATED_PREFIX) or s.name == "main"):
            out[s["st_value"]] = _Function(s.name, s["st_value"], s["st_size"])
    return sorted(out.values(), key=lambda f: f.start)


def instructions(image: ElfImage, fn: _Function) -> list[int]:
    """The instruction addresses of ``fn``, decoded from its first byte (Capstone)."""
    for sec in image.elf.iter_sections():
        lo = sec["sh_addr"]
        if sec["sh_type"] == "SHT_PROGBITS" and lo <= fn.start and fn.start + fn.size <= lo + sec["sh_size"]:
            off = sec["sh_offset"] + fn.start - lo
            code = image.data[off:off + fn.size]
            mode = capstone.CS_MODE_32 if image.elf.elfclass == 32 else capstone.CS_MODE_64
            cs = capstone.Cs(capstone.CS_ARCH_X86, mode)
            return [addr for addr, _size, _m, _o in cs.disasm_lite(code, fn.start)]
    return []


def _frame(trace):
    return trace.frames[1] if len(trace.frames) > 1 else None


def _frame_json(trace) -> dict:
    f = _frame(trace)
    if f is None:
        return {"stop": str(trace.stop)}
    return {"ip": f.ip, "sp": f.sp, "fp": f.fp, "how": f.how.value}


def _differs(a, b) -> list[str]:
    if a is None or b is None:
        return ["stop"] if (a is None) != (b is None) else []
    return [name for name, x, y in (("ra", a.ip, b.ip), ("cfa", a.sp, b.sp), ("fp", a.fp, b.fp)) if x != y]


def _binutils(version: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def cfi_rows(cfi, pcs: list[int]) -> tuple[dict[int, FrameRule | None], list[int]]:
    """The CFI row at each instruction (None where the oracle cannot evaluate it), and the
    instructions whose CFA is rbp-based (the frame-pointer body)."""
    rules: dict[int, FrameRule | None] = {}
    for pc in pcs:
        try:
            rules[pc] = cfi.rule_for_link(pc, signal_ok=True)
        except UnsupportedCFI:
            rules[pc] = None
    fp_rows = [pc for pc in pcs if rules[pc] is not None and rules[pc].cfa.base == "fp" and not rules[pc].cfa.deref]
    return rules, fp_rows


class StaticChecker:
    """The ``--static`` checker: ``checker(built) -> [Finding]`` (one per signature).

    ``sframe_provider(built, table)`` returns the SFrame rule provider the SFrame step uses (the
    table itself by default): a test injects a broken reader there.  :attr:`expected` counts the
    known classes met (by name, :data:`EXPECTED`), :attr:`instructions` the addresses compared."""

    name = "static"

    def __init__(self, sframe_provider: SFrameProvider | None = None):
        self.sframe_provider = sframe_provider or (lambda built, table: table)
        self.expected: Counter[str] = Counter()
        self.instructions = 0
        self.object_instructions = 0  # compared in the compilers' objects (placed)

    def __call__(self, built: Built) -> list[Finding]:
        cfg = built.config
        if not built.ok:
            return build_failed(built)
        path = built.binary
        image = ElfImage.from_path(path)
        findings: list[Finding] = []
        table = None
        if cfg.bits == 32:
            # SFrame is 64-bit only (its ABIs are x86-64, aarch64 and s390x; gas refuses --gsframe
            # for -m32): sframe check, the object's SFrame and the SFrame step have nothing to
            # read.  Skipped by name, never silently; the CFI and frame-pointer steps run below.
            self.expected["sframe-i386-skipped"] += 1
        if cfg.sframe:
            try:
                table, _ = load(path, strict=False)
            except SFrameError as exc:
                no_section = "no .sframe" in str(exc)  # harness/sframe/elf.py's two words for it
                # an output section of 0 bytes: the linker kept the section and none of its inputs
                # (ld.bfd 2.47.50 ignoring clang's V2 in a static link): the link's finding
                empty = "section of 0 bytes" in str(exc)
                kind, detail = (("sframe-missing", "") if no_section else
                                ("sframe-check", "empty-section") if empty else ("sframe-check", "unreadable"))
                findings.append(Finding(kind, detail, cfg, str(exc)))
            if table is not None:
                checked = self._sframe_check(built, image)
                findings += checked
                if any(f.detail.split(" ")[0] in UNREADABLE_AS_HEADER_SAYS for f in checked):
                    # the section read as its header says names the wrong functions: every step
                    # would differ for that one reason, which the linker's finding already names
                    self.expected["sframe-linker-unmerged"] += 1
                    table = None
        dropped: set[str] = set()
        if cfg.sframe and built.object is not None:
            obj_findings, in_object = self._object(built)
            findings += obj_findings
            dropped = self._dropped(built, image, table, in_object, findings)
        cfi = cfi_table(image)
        provider = self.sframe_provider(built, table) if table is not None else None
        for fn in generated_functions(image):
            findings += self._function(built, image, cfi, provider, table, fn, dropped=fn.name in dropped)
        return dedupe(findings)

    def _object(self, built: Built) -> tuple[list[Finding], set[str]]:
        """The compiler's object judged alone, placed (harness/sframe/reloc.py): ``sframe check``
        of it, and the SFrame step against the CFI step at every instruction of its generated
        functions -- the assembler's SFrame (clang's integrated assembler, or gas), before any
        linker.  Returns the findings (kind ``sframe-object``) and the generated functions the
        object has an FDE for."""
        cfg = built.config
        try:
            table, image = load(built.object, strict=False)
        except SFrameError as exc:
            if "no .sframe" in str(exc):
                return [Finding("sframe-object", "missing", cfg, f"the object has no SFrame section: {exc}")], set()
            return [Finding("sframe-object", "unreadable", cfg, str(exc))], set()
        out: list[Finding] = []
        try:
            r = check_table(table, image)
        except SFrameError as exc:
            return [Finding("sframe-object", "unreadable", cfg, str(exc))], set()
        funcs = generated_functions(image)
        for f in r.findings:
            fn = next((g for g in funcs if f.addr is not None and g.start <= f.addr < g.start + g.size), None)
            ev = {"message": f.message, "sframe": str(f.sframe) if f.sframe else None,
                  "cfi": str(f.cfi) if f.cfi else None, "object": True}
            out.append(Finding("sframe-object", f"check {f.kind}", cfg, f"the object: {f.message}",
                               fn.name if fn else None, f.addr, ev))
        cfi = cfi_table(image)
        provider = self.sframe_provider(built, table)
        saved, self.expected = self.expected, Counter()  # the object's known classes are the program's again
        before = self.instructions
        try:
            for fn in funcs:
                for f in self._function(built, image, cfi, provider, table, fn, fp=False):
                    kind = {"sframe-step": "step", "sframe-no-fre": "no-fre"}[f.kind]
                    out.append(Finding("sframe-object", f"{kind} {f.detail}", cfg, f"the object: {f.message}",
                                       f.function, f.addr, {**f.evidence, "object": True}, f.count))
        finally:
            self.expected = saved
            self.object_instructions += self.instructions - before
            self.instructions = before
        return out, {fn.name for fn in funcs if table.find_fde(fn.start) is not None}

    def _dropped(self, built: Built, image: ElfImage, table, in_object: set[str], findings: list[Finding]) -> set[str]:
        """The generated functions the object has an SFrame FDE for and the linked program not:
        one ``sframe-dropped`` finding naming them (unless the program has no SFrame section at
        all: ``sframe-missing`` says it)."""
        if not in_object or (table is None and not any(f.detail == "empty-section" for f in findings)):
            return set()
        gone = sorted(fn.name for fn in generated_functions(image)
                      if fn.name in in_object and (table is None or table.find_fde(fn.start) is None))
        if gone:
            findings.append(Finding("sframe-dropped", "", built.config,
                                    f"the linked program has no SFrame FDE for {', '.join(gone)} (the object "
                                    f"{built.object.name} has one for each): the linker dropped or ignored its "
                                    ".sframe", gone[0], None, {"functions": gone}, len(gone)))
        return set(gone)

    def _sframe_check(self, built: Built, image: ElfImage) -> list[Finding]:
        cfg = built.config
        expect = _binutils(built.binutils) if cfg.linker == "bfd" and built.link_toolchain == cfg.toolchain else None
        try:
            r = check_binary(built.binary, expect_binutils=expect)
        except SFrameError as exc:
            return [Finding("sframe-check", "unreadable", cfg, str(exc))]
        funcs = generated_functions(image)
        out = []
        for f in r.findings:
            where = ""
            if f.addr is not None and f.kind not in LINKER_KINDS:
                fn = next((g for g in funcs if g.start <= f.addr < g.start + g.size), None)
                where = " in generated code" if fn else " in runtime code"
            else:
                fn = None
            ev = {"message": f.message, "sframe": str(f.sframe) if f.sframe else None,
                  "cfi": str(f.cfi) if f.cfi else None}
            out.append(Finding("sframe-check", f.kind + where, cfg, f.message, fn.name if fn else None, f.addr, ev))
        if r.no_verdict:
            # a check that compared nothing (no FDE, no FRE over an address, .eh_frame that does not
            # decode) is no "clean": a finding of its own, whatever else it found
            out.append(Finding("sframe-check", "no-verdict", cfg, f"sframe check gave no verdict: {r.no_verdict}"))
        return out

    def _function(self, built: Built, image: ElfImage, cfi, provider, table, fn: _Function, *,
                  fp: bool = True, dropped: bool = False) -> list[Finding]:
        """One function's instructions, each stepped by the CFI, the frame pointers (``fp``) and
        SFrame; ``dropped``: the linker dropped the function's FDE (no ``sframe-no-fre`` then)."""
        cfg = built.config
        pcs = instructions(image, fn)
        arch = I386_SYNTH if image.elf.elfclass == 32 else X86_64_SYNTH
        rules, fp_rows = cfi_rows(cfi, pcs)
        expressible = all(r is None or sframe_expressible(r) for r in rules.values())
        cfi_provider = CFIRules(cfi, 0)
        out: list[Finding] = []
        for pc in pcs:
            rule = rules[pc]
            if rule is None:
                self.expected["no-cfi-row"] += 1
                continue
            synth = synthesize(rule, arch)
            if synth is None:
                self.expected["unsynthesizable"] += 1
                continue
            self.instructions += 1
            regs = synth.regs
            regs = UserRegs(**{**regs.__dict__, "ip": pc})
            truth = unwind_cfi(synth.memory, regs, lambda _pc: cfi_provider, max_entries=2)
            want = _frame(truth)
            if want is None:
                self.expected["unsynthesizable"] += 1
                continue
            where = f"{fn.name}+{pc - fn.start:#x}"
            # the frame-pointer step
            fp_trace = unwind_user(synth.memory, regs, UnwindConfig(max_entries=2)) if fp else None
            diff = _differs(_frame(fp_trace), want) if fp else []
            if diff:
                if rule.cfa.deref or rule.cfa.base not in ("sp", "fp"):
                    self.expected["fp-drap-cfa"] += 1
                elif rule.cfa.base == "sp":
                    name = ("fp-frameless-function" if not fp_rows else
                            "fp-prologue-ip" if pc < fp_rows[0] else "fp-epilogue-ip")
                    self.expected[name] += 1
                else:
                    out.append(Finding("fp-step", f"{','.join(diff)}: cfi {rule_shape(rule)}", built.config,
                                       f"{where}: the frame-pointer step gives {_frame_json(fp_trace)}, "
                                       f"the CFI step {_frame_json(truth)} (CFI row {rule})",
                                       fn.name, pc, {"cfi_rule": str(rule), "cfi": _frame_json(truth),
                                                     "fp": _frame_json(fp_trace)}))
            if provider is None:
                continue
            sf_rule = provider.rule_for(pc)
            if sf_rule is None:
                if table is not None and table.find_fde(pc) is None and not expressible:
                    self.expected["sframe-function-without-fde"] += 1
                    continue
                if dropped:
                    self.expected["sframe-dropped-function"] += 1
                    continue
                fde = table.find_fde(pc) if table is not None else None
                out.append(Finding("sframe-no-fre", "no FDE" if fde is None else "FDE without an FRE here", cfg,
                                   f"{where}: no SFrame FRE covers it; the CFI row is {rule}", fn.name, pc,
                                   {"cfi_rule": str(rule), "cfi": _frame_json(truth)}))
                continue
            sf_trace = unwind_user(synth.memory, regs, UnwindConfig(max_entries=2, tables_for=lambda _pc: provider))
            diff = _differs(_frame(sf_trace), want)
            if diff:
                out.append(Finding("sframe-step", f"{','.join(diff)}: sframe {rule_shape(sf_rule)} vs cfi "
                                                  f"{rule_shape(rule)}", cfg,
                                   f"{where}: the SFrame step (FRE {sf_rule}) gives {_frame_json(sf_trace)}, the "
                                   f"CFI step (row {rule}) {_frame_json(truth)}", fn.name, pc,
                                   {"cfi_rule": str(rule), "sframe_rule": str(sf_rule), "cfi": _frame_json(truth),
                                    "sframe": _frame_json(sf_trace)}))
            elif sf_trace.frames[1].how is not UnwinderType.SFRAME:
                self.expected["unsynthesizable"] += 1
        return out
