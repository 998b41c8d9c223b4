"""The static checker's comparison is of the whole caller frame: ip (the return address), sp (the
CFA) and fp.  A step that recovers the right return address and CFA and the wrong frame pointer
is a disagreement: the walk's next step starts from that frame pointer.

The program is a generated one with one more function, ``fz_slot``, written in assembly: a
frame-pointer function that copies the caller's rbp to CFA-24, says so in its CFI, and clears
the slot at CFA-16 that the frame-pointer chain reads (code reusing its saved-rbp slot).  In
those rows the CFI's CFA (rbp + 16) and return address agree with a frame-pointer step; only the
caller's rbp differs.  The host's gas describes the same rows in SFrame (FP at CFA-24): the SFrame
step agrees, until a reader that takes the FP as saved at CFA-16 (where gcc's prologues put it)
is injected through the checker's SFrame provider.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import re
import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from harness.fuzz.build import BuildConfig, build, build_source, toolchain
from harness.fuzz.campaign import _blocks_at
from harness.fuzz.finding import build_failed
from harness.fuzz.render import render
from harness.fuzz.shape import Func, Shape
from harness.fuzz.static import (
    CALLER_FP,
    CFA,
    RA,
    STACK_LO,
    StaticChecker,
    cfi_rows,
    generated_functions,
    instructions,
    sframe_expressible,
    synthesize,
)
from harness.rule import DWARF_X86_64, SAME, UNDEFINED, FrameRule, ValueRule, apply_rule, outermost_rule
from harness.unwind.cfi import cfi_table
from harness.unwind.maps import ElfImage
from harness.unwind.sframe_check import LINKER_KINDS, check_binary, load
from tests.support.toolchains import need

SHAPE = Shape((Func("fp"),))
SLOT = r"""
__asm__(
"  .text\n"
"  .globl fz_slot\n"
"  .type fz_slot, @function\n"
"fz_slot:\n"
"  .cfi_startproc\n"
"  pushq %rbp\n"
"  .cfi_def_cfa_offset 16\n"
"  .cfi_offset rbp, -16\n"
"  movq %rsp, %rbp\n"
"  .cfi_def_cfa_register rbp\n"
"  pushq 0(%rbp)\n"
"  .cfi_offset rbp, -24\n"
"  movq $0, 0(%rbp)\n"
"  nop\n"
"  movq -8(%rbp), %rax\n"
"  movq %rax, 0(%rbp)\n"
"  .cfi_offset rbp, -16\n"
"  leave\n"
"  .cfi_def_cfa rsp, 8\n"
"  ret\n"
"  .cfi_endproc\n"
"  .size fz_slot, .-fz_slot\n"
/* fz_first: the first byte of an output section of its own (an orphan section) */
"  .section fz_orphan, \"ax\", @progbits\n"
"  .globl fz_first\n  .type fz_first, @function\nfz_first:\n  .cfi_startproc\n  nop\n  ret\n  .cfi_endproc\n"
"  .size fz_first, .-fz_first\n  .text\n");
"""
SLOT_ROWS = 4  # instructions whose CFI row has rbp at CFA-24: movq $0, nop, movq, movq
CONFIG = BuildConfig("host", "-O1", True, True, False, "bfd")


@functools.cache
def _built(dest: Path):
    need("host")
    built = build_source(SHAPE, render(SHAPE) + SLOT, "prog.c", CONFIG, dest)
    assert built.ok, built.error
    return built


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _built(tmp_path_factory.mktemp("fuzz-static"))


def _slot_rows(built) -> list[int]:
    image = ElfImage.from_path(built.binary)
    fn = next(f for f in generated_functions(image) if f.name == "fz_slot")
    cfi = cfi_table(image)
    rows = [pc for pc in instructions(image, fn) if cfi.rule_for_link(pc, signal_ok=True).fp.offset == -24]
    assert len(rows) == SLOT_ROWS
    return rows


def test_a_frame_pointer_step_that_differs_in_fp_alone_is_a_finding(built):
    checker = StaticChecker()
    findings = checker(built)
    fp = [f for f in findings if f.kind == "fp-step"]
    assert [(f.function, f.detail, f.count) for f in fp] == [
        ("fz_slot", "fp: cfi cfa=fp+N ra=*(cfa+N) fp=*(cfa+N)", SLOT_ROWS)], [f.message for f in findings]
    f = fp[0]
    assert f.addr == _slot_rows(built)[0]
    cfi, step = f.evidence["cfi"], f.evidence["fp"]
    assert (step["ip"], step["sp"]) == (cfi["ip"], cfi["sp"])  # the RA and the CFA agree
    assert cfi["fp"] == CALLER_FP and step["fp"] == 0  # the cleared slot
    # the host's SFrame says FP at CFA-24 there: its step agrees; nothing else differs
    assert [f.kind for f in findings] == ["fp-step"], [f.message for f in findings]
    assert checker.instructions > 0


class SixteenFP:
    """An SFrame reader that takes the FP as saved at CFA-16 whenever the FRE says it is saved."""

    def __init__(self, built, table):
        self.table = table

    def rule_for(self, pc: int) -> FrameRule | None:
        rule = self.table.rule_for(pc)
        if rule is not None and rule.fp.deref:
            return FrameRule(rule.cfa, rule.ra, ValueRule("cfa", -16, True), rule.signal_frame)
        return rule


def test_an_sframe_step_that_differs_in_fp_alone_is_a_finding(built):
    findings = StaticChecker(sframe_provider=SixteenFP)(built)
    steps = [f for f in findings if f.kind == "sframe-step"]
    assert [(f.function, f.detail, f.count) for f in steps] == [
        ("fz_slot", "fp: sframe cfa=fp+N ra=*(cfa+N) fp=*(cfa+N) vs cfi cfa=fp+N ra=*(cfa+N) fp=*(cfa+N)",
         SLOT_ROWS)], [f.message for f in findings]
    f = steps[0]
    assert f.addr == _slot_rows(built)[0]
    cfi, step = f.evidence["cfi"], f.evidence["sframe"]
    assert (step["ip"], step["sp"]) == (cfi["ip"], cfi["sp"]) and step["fp"] != cfi["fp"] == CALLER_FP
    assert f.evidence["sframe_rule"] == "cfa=fp+16 ra=*(cfa-8) fp=*(cfa-16)"
    assert f.evidence["cfi_rule"] == "cfa=fp+16 ra=*(cfa-8) fp=*(cfa-24)"


# ------------------------------------------------------------------------------ what is known behaviour


MIXED = Shape((Func("nofp", frozenset({"alloca", "realign"}), (1,), 2), Func("fp", frozenset(), (2,), 1), Func()))


@functools.cache
def _mixed(tc: str, opt: str, dest: Path):
    need(tc)
    built = build(MIXED, BuildConfig(tc, opt, False, True, False, "bfd"), dest)
    assert built.ok, built.error
    return built


@pytest.mark.parametrize("tc, opt", [("host", "-O2"), ("trixie", "-O3"), ("sid", "-O1")])
def test_what_frame_pointers_cannot_do_is_counted_by_the_rows_shape_and_nothing_is_flagged(tc, opt, tmp_path):
    """A realigned frameless function with alloca (DRAP), a frame-pointer function, a frameless
    one, main.  Each instruction is compared (every row here is synthesizable) and each
    frame-pointer step that differs is named by its CFI row, as the module says: CFA through
    memory or another register (fp-drap-cfa), sp-based in a function with no rbp-based row
    (frameless), before its first rbp-based row (prologue), after it (epilogue).  gas 2.40 and
    2.44 write no SFrame FDE for the DRAP function (sframe-function-without-fde: each of its
    instructions); 2.46+ describes it (V3 flex FDE), and its SFrame steps agree."""
    built = _mixed(tc, opt, tmp_path)
    checker = StaticChecker()
    findings = checker(built)
    assert not [f for f in findings if f.kind in ("sframe-step", "sframe-no-fre", "fp-step")], \
        [f.message for f in findings]
    image = ElfImage.from_path(built.binary)
    cfi = cfi_table(image)
    table, _ = load(built.binary)
    want: Counter = Counter()
    total = 0
    for fn in generated_functions(image):
        pcs = instructions(image, fn)
        total += len(pcs)
        rules = [cfi.rule_for_link(pc, signal_ok=True) for pc in pcs]
        fp_rows = [i for i, r in enumerate(rules) if r.cfa.base == "fp" and not r.cfa.deref]
        for i, r in enumerate(rules):
            if r.cfa.deref or r.cfa.base not in ("sp", "fp"):
                want["fp-drap-cfa"] += 1
            elif r.cfa.base == "sp":
                want["fp-frameless-function" if not fp_rows else
                     "fp-prologue-ip" if i < fp_rows[0] else "fp-epilogue-ip"] += 1
        if table.find_fde(fn.start) is None and not all(sframe_expressible(r) for r in rules):
            want["sframe-function-without-fde"] += len(pcs)
    assert [f.name for f in generated_functions(image)] == sorted(
        ["main", "fz_f0", "fz_f1", "fz_f2"], key=lambda n: next(f.start for f in generated_functions(image)
                                                                   if f.name == n))
    assert checker.instructions == total and dict(checker.expected) == dict(want)
    assert want["fp-drap-cfa"] and want["fp-frameless-function"] and want["fp-prologue-ip"] and want["fp-epilogue-ip"]
    assert bool(want["sframe-function-without-fde"]) == (tc != "sid")


def test_instructions_are_the_ones_objdump_decodes(built, tmp_path):
    """Capstone's boundaries, from each generated function's first byte, are objdump's: in ld.bfd's
    PIE (addresses equal to file offsets), its static non-PIE program (addresses from 0x400000) and
    lld's PIE (.text a page above its file offset, the sections before it not)."""
    static = build_source(SHAPE, render(SHAPE) + SLOT, "prog.c", dataclasses.replace(CONFIG, static=True),
                          tmp_path / "static")
    lld = build_source(SHAPE, render(SHAPE) + SLOT, "prog.c", dataclasses.replace(CONFIG, linker="lld"), tmp_path / "lld")
    assert static.ok and lld.ok, (static.error, lld.error)
    for b in (built, static, lld):
        image = ElfImage.from_path(b.binary)
        for fn in generated_functions(image):
            out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--disassemble={fn.name}", str(b.binary)],
                                 capture_output=True, text=True, check=True, timeout=60).stdout
            theirs = [int(m.group(1), 16) for m in re.finditer(r"^\s+([0-9a-f]+):\t", out, re.M)]
            assert instructions(image, fn) == theirs, fn.name
    assert min(f.start for f in generated_functions(ElfImage.from_path(static.binary))) > 0x400000


# ------------------------------------------------------------------------------ the reproducer's tools.txt


def test_the_toolchains_blocks_at_an_address_are_the_ones_covering_it(built):
    """tools.txt cuts readelf's and objdump's output to the paragraphs that cover the finding's
    address: for each generated function's start and last byte, readelf's one FDE of it and
    objdump's one SFrame FDE of it; an address no paragraph covers keeps the whole text."""
    frames = subprocess.run(["readelf", "--debug-dump=frames", str(built.binary)], capture_output=True, text=True,
                            check=True, timeout=60).stdout
    sframe = subprocess.run(["objdump", "--sframe", str(built.binary)], capture_output=True, text=True, check=True,
                            timeout=60).stdout
    image = ElfImage.from_path(built.binary)
    for fn in generated_functions(image):
        for addr in (fn.start, fn.start + fn.size - 1):
            fdes = [ln for ln in _blocks_at(frames, addr).splitlines() if " FDE " in ln]
            assert len(fdes) == 1, (fn.name, fdes)
            lo, hi = (int(x, 16) for x in re.search(r"pc=([0-9a-f]+)\.\.([0-9a-f]+)", fdes[0]).groups())
            assert (lo, hi) == (fn.start, fn.start + fn.size)
            idx = [ln for ln in _blocks_at(sframe, addr).splitlines() if "func idx" in ln]
            assert idx == [ln for ln in sframe.splitlines() if f"pc = {fn.start:#x}, size = {fn.size} bytes" in ln]
    assert _blocks_at(frames, 0x10) == frames and _blocks_at(sframe, 0x10) == sframe


def test_every_block_covering_an_address_is_kept_one_blank_line_apart(tmp_path):
    """In an object each text section starts at 0: frames.o's `plain` (.text) and `own_section`
    (.text.own) both cover address 1, in readelf's FDEs and in sid's objdump --sframe."""
    tc = need("sid")
    outer, inner = tc.workdir("fuzz-blocks")
    try:
        (outer / "frames.s").write_text((Path(__file__).resolve().parents[3] / "guest_programs" / "sframe_cases"
                                         / "frames.s").read_text())
        tc.run(["as", "--gsframe", "frames.s", "-o", "frames.o"], cwd=inner)
        texts = [tc.run(argv, cwd=inner).stdout for argv in (["readelf", "--debug-dump=frames", "frames.o"],
                                                              ["objdump", "--sframe", "frames.o"])]
    finally:
        shutil.rmtree(outer, ignore_errors=True)
    for text, marker in zip(texts, (" FDE ", "func idx"), strict=True):
        kept = _blocks_at(text, 1).split("\n\n")
        assert len(kept) == 2 and all(marker in blk and blk in text for blk in kept), kept


# ------------------------------------------------------------------------------ rows of other shapes


ODD = r"""
__asm__(
"  .text\n"
/* fz_escape: plain CFI and a DW_CFA_nop by .cfi_escape: gas 2.40 and 2.44 skip its SFrame FDE */
"  .globl fz_escape\n  .type fz_escape, @function\nfz_escape:\n  .cfi_startproc\n"
"  pushq %rbp\n  .cfi_def_cfa_offset 16\n  .cfi_offset rbp, -16\n  .cfi_escape 0x0\n"
"  popq %rbp\n  .cfi_def_cfa_offset 8\n  ret\n  .cfi_endproc\n  .size fz_escape, .-fz_escape\n"
/* fz_regfp: the caller's rbp kept in rbx (a register rule: no stack to build) */
"  .globl fz_regfp\n  .type fz_regfp, @function\nfz_regfp:\n  .cfi_startproc\n"
"  movq %rbp, %rbx\n  .cfi_register rbp, rbx\n  nop\n  movq %rbx, %rbp\n  .cfi_restore rbp\n  ret\n"
"  .cfi_endproc\n  .size fz_regfp, .-fz_regfp\n"
/* fz_nocfi: no CFI at all */
"  .globl fz_nocfi\n  .type fz_nocfi, @function\nfz_nocfi:\n  nop\n  ret\n  .size fz_nocfi, .-fz_nocfi\n"
/* fz_sig: a signal frame's rows (compared, as the rules say) */
"  .globl fz_sig\n  .type fz_sig, @function\nfz_sig:\n  .cfi_startproc\n  .cfi_signal_frame\n  nop\n  ret\n"
"  .cfi_endproc\n  .size fz_sig, .-fz_sig\n"
/* fz_mul: a CFA expression the CFI oracle does not evaluate (breg7 8; DW_OP_mul) */
"  .globl fz_mul\n  .type fz_mul, @function\nfz_mul:\n  .cfi_startproc\n"
"  .cfi_escape 0x0f, 0x03, 0x77, 0x08, 0x1e\n  nop\n  nop\n  ret\n  .cfi_endproc\n  .size fz_mul, .-fz_mul\n"
/* fz_twoexits: an early return right after the frame pointer is set (an sp-based row between
   the first two rbp-based ones: an epilogue) */
"  .globl fz_twoexits\n  .type fz_twoexits, @function\nfz_twoexits:\n  .cfi_startproc\n"
"  pushq %rbp\n  .cfi_def_cfa_offset 16\n  .cfi_offset rbp, -16\n  movq %rsp, %rbp\n  .cfi_def_cfa_register rbp\n"
"  .cfi_remember_state\n  popq %rbp\n  .cfi_def_cfa rsp, 8\n  ret\n"
"  .cfi_restore_state\n  nop\n  popq %rbp\n  .cfi_def_cfa rsp, 8\n  ret\n"
"  .cfi_endproc\n  .size fz_twoexits, .-fz_twoexits\n"
/* fz_outer: right after fz_twoexits, the outermost frame (RA undefined): gas 2.40 and 2.44
   describe it with the RA at CFA-8 (an sframe check "ra" finding at its first byte) */
"  .globl fz_outer\n  .type fz_outer, @function\nfz_outer:\n  .cfi_startproc\n  .cfi_undefined rip\n  nop\n"
"  ret\n  .cfi_endproc\n  .size fz_outer, .-fz_outer\n"
/* fz_late: rbx pushed before rbp: the CFA is rbp + 24, the frame-pointer step takes rbp + 16 */
"  .globl fz_late\n  .type fz_late, @function\nfz_late:\n  .cfi_startproc\n"
"  pushq %rbx\n  .cfi_def_cfa_offset 16\n  .cfi_offset rbx, -16\n  pushq %rbp\n  .cfi_def_cfa_offset 24\n"
"  .cfi_offset rbp, -24\n  movq %rsp, %rbp\n  .cfi_def_cfa_register rbp\n  nop\n  popq %rbp\n"
"  .cfi_def_cfa rsp, 16\n  popq %rbx\n  .cfi_def_cfa_offset 8\n  ret\n  .cfi_endproc\n  .size fz_late, .-fz_late\n");
"""


@functools.cache
def _odd(tc: str, dest: Path):
    need(tc)
    built = build_source(SHAPE, render(SHAPE) + ODD, "prog.c", BuildConfig(tc, "-O1", True, True, False, "bfd"), dest)
    assert built.ok, built.error
    return built


def _register_rule(v) -> bool:
    return v.base not in (SAME, UNDEFINED) and not v.deref


@pytest.mark.parametrize("tc", ["host", "trixie", "sid"])
def test_rows_of_every_shape_are_compared_skipped_or_named_as_the_module_says(tc, tmp_path):
    """A row in a register or an undefined RA (unsynthesizable), no row (no-cfi-row: no CFI, or
    CFI the oracle does not evaluate), a signal frame's rows (taken, and unsynthesizable: the CFI
    step gives no caller, the interrupted context is none), the frame-pointer classes by the rows'
    shape (an early return right after the frame pointer is set is an epilogue), and what each
    gas makes of them: the findings, each in its function, at its address."""
    built = _odd(tc, tmp_path)
    checker = StaticChecker()
    findings = checker(built)
    image = ElfImage.from_path(built.binary)
    cfi = cfi_table(image)
    table, _ = load(built.binary)
    want: Counter = Counter()
    compared = 0
    names = {f.name: f for f in generated_functions(image)}
    for fn in names.values():
        pcs = instructions(image, fn)
        rules, fp_rows = cfi_rows(cfi, pcs)
        no_fde = table.find_fde(fn.start) is None
        inexpressible = not all(r is None or sframe_expressible(r) for r in rules.values())
        for pc in pcs:
            r = rules[pc]
            if r is None:
                want["no-cfi-row"] += 1
                continue
            if _register_rule(r.ra) or _register_rule(r.fp) or r.ra.base == UNDEFINED:  # no RA on the stack
                want["unsynthesizable"] += 1
                continue
            compared += 1
            if r.signal_frame:  # the CFI step ends there: the caller is the interrupted context
                want["unsynthesizable"] += 1
                continue
            if r.cfa.deref or r.cfa.base not in ("sp", "fp"):
                want["fp-drap-cfa"] += 1
            elif r.cfa.base == "sp":
                want["fp-frameless-function" if not fp_rows else
                     "fp-prologue-ip" if pc < fp_rows[0] else "fp-epilogue-ip"] += 1
            if no_fde and inexpressible:
                want["sframe-function-without-fde"] += 1
    assert checker.instructions == compared and dict(checker.expected) == {k: v for k, v in want.items() if v}
    assert want["no-cfi-row"] == len(instructions(image, names["fz_nocfi"])) + len(instructions(image, names["fz_mul"]))
    assert want["unsynthesizable"] == 2 + len(instructions(image, names["fz_sig"])) + len(instructions(
        image, names["fz_outer"])) and want["fp-epilogue-ip"] >= 2
    got = sorted((f.kind, f.detail, f.function, f.addr, f.count) for f in findings)
    shape = "cfa=fp+N ra=*(cfa+N) fp=*(cfa+N)"
    late, two, outer, escape = (names[n].start for n in ("fz_late", "fz_twoexits", "fz_outer", "fz_escape"))
    want_findings = [("fp-step", f"ra,cfa: cfi {shape}", "fz_late", late + 5, 2)]  # its nop and pop
    if tc != "host":  # ld.bfd 2.44+'s .plt.got FRE
        want_findings.append(("sframe-check", "cfa in runtime code", None, 0x1030, 1))
    if tc != "sid":
        want_findings += [
            # gas 2.40 and 2.44: after .cfi_restore_state the SFrame FREs keep the early return's
            # sp-based CFA; the CFI restores rbp + 16 (2.46+ agrees with it)
            ("sframe-check", "cfa in generated code", "fz_twoexits", two + 6, 1),
            ("sframe-step", f"ra,cfa,fp: sframe cfa=sp+N ra=*(cfa+N) fp=*(cfa+N) vs cfi {shape}", "fz_twoexits",
             two + 6, 2),
            # their RA at CFA-8 where `.cfi_undefined rip` says outermost, at fz_outer's first byte,
            # which is fz_twoexits' end
            ("sframe-check", "ra in generated code", "fz_outer", outer, 1),
            # no SFrame FDE for plain CFI with a .cfi_escape: at each instruction
            ("sframe-no-fre", "no FDE", "fz_escape", escape, 3)]
        # each is gas's, so its object shows it before any linker, at the object's placed
        # addresses (harness/sframe/reloc.py), with no frame-pointer step (the program's)
        _, placed = load(built.object)
        at = {f.name: f.start for f in generated_functions(placed)}
        want_findings += [
            ("sframe-object", "check cfa", "fz_twoexits", at["fz_twoexits"] + 6, 1),
            ("sframe-object", f"step ra,cfa,fp: sframe cfa=sp+N ra=*(cfa+N) fp=*(cfa+N) vs cfi {shape}",
             "fz_twoexits", at["fz_twoexits"] + 6, 2),
            ("sframe-object", "check ra", "fz_outer", at["fz_outer"], 1),
            ("sframe-object", "no-fre no FDE", "fz_escape", at["fz_escape"], 3)]
    assert got == sorted(want_findings), [f.message for f in findings]
    # the object's instructions are compared as well (all of them again, placed)
    assert checker.object_instructions == compared
    assert two + names["fz_twoexits"].size == outer
    fp = next(f for f in findings if f.kind == "fp-step")
    assert fp.message.startswith("fz_late+0x5: the frame-pointer step gives {") and fp.message.endswith(
        f"(CFI row {cfi.rule_for_link(late + 5)})")
    assert fp.evidence["cfi_rule"] == "cfa=fp+24 ra=*(cfa-8) fp=*(cfa-24)"
    if tc != "sid":
        f = next(f for f in findings if f.kind == "sframe-no-fre")
        assert f.message == f"fz_escape+0x0: no SFrame FRE covers it; the CFI row is {cfi.rule_for_link(f.addr)}"
        assert f.evidence == {"cfi_rule": str(cfi.rule_for_link(f.addr)),
                              "cfi": {"ip": RA, "sp": CFA, "fp": CALLER_FP, "how": "cfi"}}


# ------------------------------------------------------------------------------ the synthesized stack


def V(base, offset=0, deref=False, add=0):  # noqa: N802 (a rule, as the CFI reads it)
    return ValueRule(base, offset, deref, add)


SYNTHESIZABLE = [
    FrameRule(V("sp", 8), V("cfa", -8, True), V(SAME)),  # function entry
    FrameRule(V("sp", 16), V("cfa", -8, True), V("cfa", -16, True)),  # after push %rbp
    FrameRule(V("fp", 16), V("cfa", -8, True), V("cfa", -16, True)),  # the frame-pointer body
    FrameRule(V("sp", 0x30), V("cfa", -8, True), V("cfa", -0x28, True)),  # fp saved deep
    FrameRule(V("r10", 16), V("cfa", -8, True), V(SAME)),  # DRAP's prologue: CFA in r10
    FrameRule(V("fp", -8, True), V("cfa", -8, True), V("fp", 0, True)),  # DRAP's body: *(rbp-8), rbp at *(rbp)
    FrameRule(V("r10", 8, True), V("cfa", -8, True), V(SAME)),  # a CFA read through r10
    FrameRule(V("sp", 8, True, 8), V("cfa", -8, True), V(SAME)),  # OpenSSL's perlasm: *(rsp+8)+8
    FrameRule(V("sp", 16), V("sp", 8, True), V("sp", 0, True)),  # RA and FP found from sp
    FrameRule(V("sp", 16), V("cfa", -8, True, 4), V("cfa", -16, True, -8)),  # words plus constants
    FrameRule(V("sp", 16), V(SAME), V("cfa", -16, True)),  # an RA kept (no word): the FP still built
    FrameRule(V("sp", 0x3FF8), V("cfa", -8, True), V(SAME)),  # sp just above the stack's bottom
    FrameRule(V("sp", 16), V("cfa", 0xFF8, True), V("cfa", -0x4000, True)),  # words at the stack's two ends
    FrameRule(V("sp", 8), V("cfa", -8, True), V(SAME), signal_frame=True),
]
UNSYNTHESIZABLE = [
    FrameRule(V("sp", 8), V(UNDEFINED), V(SAME)),  # the outermost frame: no caller
    FrameRule(V(SAME), V("cfa", -8, True), V(SAME)),
    FrameRule(V(UNDEFINED), V("cfa", -8, True), V(SAME)),
    FrameRule(V("sp", 8), V("cfa", -8), V(SAME)),  # val_offset: RA is a value, not a word
    FrameRule(V("sp", 16), V("cfa", -8, True), V("r3")),  # the caller's rbp in rbx
    FrameRule(V("sp", 16), V("cfa", -8, True), V("cfa", -8, True)),  # RA and FP in one word
    FrameRule(V("sp", 16), V("cfa", -4, True), V(SAME)),  # a misaligned word
    FrameRule(V("sp", 16), V("cfa", 0x1000, True), V(SAME)),  # a word above the stack
    FrameRule(V("sp", 16), V("cfa", -8, True), V("cfa", -0x4008, True)),  # a word below it
    FrameRule(V("sp", 0x4000), V("cfa", -8, True), V(SAME)),  # sp at the stack's bottom
    FrameRule(V("sp", 0), V("cfa", -8, True), V(SAME)),  # sp at the CFA
    FrameRule(V("r99", 8), V("cfa", -8, True), V(SAME)),  # no such register (it crashed: IndexError)
    FrameRule(V("sp", 16), V("r12", 8, True), V(SAME)),  # an RA next to a register's value: no stack word
    FrameRule(V("sp", 16), V("r17", 8, True), V(SAME)),  # DWARF 17: no general register
    FrameRule(V("sp", 16), V("r99", 8, True), V(SAME)),
    FrameRule(V("r17", 8, True), V("cfa", -8, True), V(SAME)),
]


@pytest.mark.parametrize("rule", SYNTHESIZABLE, ids=str)
def test_a_synthesized_stack_is_the_one_its_row_describes(rule):
    """Evaluated by the one rule evaluator every unwinder shares (harness.rule.apply_rule), the
    row gives the CFA, the return address and the caller's frame pointer the stack was built
    with; the current rbp differs from the caller's whenever the row saves it (so that "saved"
    and "kept" give different answers)."""
    s = synthesize(rule)
    assert s is not None
    regs = {f"r{i}": getattr(s.regs, name) for i, name in enumerate(DWARF_X86_64[:16])}

    def word(addr: int) -> int:
        return struct.unpack("<Q", s.memory.read(addr, 8))[0]

    cfa, ra, fp = apply_rule(rule, s.regs.sp, s.regs.bp, word, regs=regs)
    saved = rule.fp.base != SAME
    assert (cfa, ra, fp) == (CFA, RA if rule.ra.base != SAME else None, CALLER_FP if saved else s.regs.bp)
    assert s.regs.bp != CALLER_FP if saved else s.regs.bp in (CALLER_FP, CFA - rule.cfa.offset)
    assert STACK_LO < s.regs.sp < CFA


@pytest.mark.parametrize("rule", UNSYNTHESIZABLE, ids=str)
def test_a_row_no_stack_can_be_built_for_is_none(rule):
    assert synthesize(rule) is None


@pytest.mark.parametrize("rule, expressible", [
    (FrameRule(V("sp", 8), V("cfa", -8, True), V(SAME)), True),
    (FrameRule(V("fp", 16), V("cfa", -8, True), V("cfa", -16, True)), True),
    (FrameRule(V("sp", 8), V(UNDEFINED), V(SAME)), True),  # the outermost frame: an FRE says so
    (FrameRule(V("r10", 0), V("cfa", -8, True), V(SAME)), False),  # a CFA in another register
    (FrameRule(V("fp", -8, True), V("cfa", -8, True), V("cfa", -16, True)), False),  # through memory
    (FrameRule(V("sp", 8), V("cfa", -8), V(SAME)), False),  # an RA that is a value
    (FrameRule(V("sp", 8), V("r12", 8, True), V(SAME)), False),  # an RA in another register's frame
    (FrameRule(V("sp", 8), V(SAME), V(SAME)), False),
    (FrameRule(V("sp", 16), V("cfa", -8, True), V("r3")), False),  # an FP in a register
    (FrameRule(V("sp", 16), V("cfa", -8, True), V("fp", 0, True)), False),  # an FP saved off the CFA
    (FrameRule(V("sp", 16), V("cfa", -8, True), V("cfa", -16)), False),  # an FP that is a value
], ids=lambda x: str(x))
def test_what_sframe_v1_v2_can_express(rule, expressible):
    """The V1/V2 FRE: CFA = SP or FP + offset; RA at CFA + offset, or none (outermost); FP at
    CFA + offset, or not saved."""
    assert sframe_expressible(rule) is expressible


# ------------------------------------------------------------------------------ broken readers


class Outermost:
    """An SFrame reader that says "outermost frame" inside fz_slot: its step stops."""

    def __init__(self, built, table):
        self.table = table
        fn = next(f for f in generated_functions(ElfImage.from_path(built.binary)) if f.name == "fz_slot")
        self.range = (fn.start, fn.start + fn.size)

    def rule_for(self, pc: int) -> FrameRule | None:
        rule = self.table.rule_for(pc)
        if rule is not None and self.range[0] <= pc < self.range[1]:
            return outermost_rule()
        return rule


class CfaPlus8(Outermost):
    """A reader that adds 8 to the CFA offset of every FRE in fz_slot: RA, CFA and FP all differ."""

    def rule_for(self, pc: int) -> FrameRule | None:
        rule = self.table.rule_for(pc)
        if rule is not None and self.range[0] <= pc < self.range[1]:
            return FrameRule(V(rule.cfa.base, rule.cfa.offset + 8), rule.ra, rule.fp, rule.signal_frame)
        return rule


class LosesTheLastFre(Outermost):
    """A reader that finds no FRE at fz_slot's last instruction (its FDE is there)."""

    def rule_for(self, pc: int) -> FrameRule | None:
        return None if pc == self.range[1] - 1 else self.table.rule_for(pc)


def test_a_step_that_stops_where_the_cfi_goes_on_is_a_finding(built):
    fn = _slot_fn(built)
    findings = [f for f in StaticChecker(sframe_provider=Outermost)(built) if f.kind == "sframe-step"]
    assert {f.function for f in findings} == {"fz_slot"}
    assert all(f.detail.startswith("stop: sframe cfa=undefined ra=undefined fp=same vs cfi cfa=") for f in findings)
    assert sum(f.count for f in findings) == len(instructions(ElfImage.from_path(built.binary), fn))
    f = min(findings, key=lambda f: f.addr)
    assert f.addr == fn.start and f.detail.endswith("vs cfi cfa=sp+N ra=*(cfa+N) fp=same")
    assert f.evidence["sframe"] == {"stop": "end of chain (return address undefined (outermost frame))"}
    assert f.evidence["cfi"] == {"ip": RA, "sp": CFA, "fp": CALLER_FP, "how": "cfi"}


def _slot_fn(built):
    return next(f for f in generated_functions(ElfImage.from_path(built.binary)) if f.name == "fz_slot")


def test_a_step_wrong_in_everything_names_ra_cfa_and_fp(built):
    findings = [f for f in StaticChecker(sframe_provider=CfaPlus8)(built) if f.kind == "sframe-step"]
    # where the FP is saved all three differ; where it is kept, RA and CFA
    assert {f.detail.split(":")[0] for f in findings} == {"ra,cfa,fp", "ra,cfa"}
    for f in findings:
        assert f.evidence["sframe"]["sp"] == f.evidence["cfi"]["sp"] + 8 and f.evidence["sframe"]["how"] == "sframe"
        assert f.message.startswith(f"fz_slot+{f.addr - _slot_fn(built).start:#x}: the SFrame step (FRE ")


def test_an_fde_without_an_fre_at_an_instruction_is_a_finding(built):
    fn = _slot_fn(built)
    (f,) = [f for f in StaticChecker(sframe_provider=LosesTheLastFre)(built) if f.kind == "sframe-no-fre"]
    assert (f.function, f.detail, f.addr, f.count) == ("fz_slot", "FDE without an FRE here", fn.start + fn.size - 1, 1)
    assert f.message.startswith(f"fz_slot+{fn.size - 1:#x}: no SFrame FRE covers it; the CFI row is cfa=sp+8 ")


# ------------------------------------------------------------------------------ what sframe check says


def test_a_build_that_failed_is_its_finding_for_the_static_checker(tmp_path):
    need("host")
    failed = build_source(SHAPE, render(SHAPE) + "\nint fz_bad __attribute__((aligned(3))) = 1;\n", "prog.c",
                          CONFIG, tmp_path)
    assert StaticChecker()(failed) == build_failed(failed)


def test_an_sframe_section_removed_or_broken_is_named(built, tmp_path):
    """objcopy --remove-section .sframe of gold's output (no PT_GNU_SFRAME either: a link that
    dropped the section): sframe-missing; of ld.bfd's, whose PT_GNU_SFRAME is left pointing at
    nothing: sframe-check "empty-section"; a broken magic: sframe-check "unreadable", with the
    reader's words."""
    need("host")
    gold = build_source(SHAPE, render(SHAPE) + SLOT, "prog.c", dataclasses.replace(CONFIG, linker="gold"),
                        tmp_path / "gold")
    for b, name in ((gold, "gold"), (built, "bfd")):
        subprocess.run(["objcopy", "--remove-section", ".sframe", str(b.binary), str(tmp_path / f"{name}-gone")],
                       check=True, timeout=60)
    findings = StaticChecker()(dataclasses.replace(gold, binary=tmp_path / "gold-gone"))
    missing = [f for f in findings if f.kind.startswith("sframe")]
    assert [(f.kind, f.detail, f.config) for f in missing] == [("sframe-missing", "", gold.config)]
    assert "no SFrame section" in missing[0].message or "no .sframe" in missing[0].message
    findings = StaticChecker()(dataclasses.replace(built, binary=tmp_path / "bfd-gone"))
    # a section of 0 bytes is what a link that kept none of its inputs leaves (ld.bfd 2.47.50 on
    # clang's V2): empty-section, and the object's FDEs are gone from the program
    assert sorted((f.kind, f.detail) for f in findings if f.kind.startswith("sframe")) == [
        ("sframe-check", "empty-section"), ("sframe-dropped", "")]
    assert "section of 0 bytes" in findings[0].message
    data = bytearray(built.binary.read_bytes())
    off = ELFFile(io.BytesIO(bytes(data))).get_section_by_name(".sframe")["sh_offset"]
    data[off] ^= 0xFF
    broken = tmp_path / "broken"
    broken.write_bytes(bytes(data))
    findings = StaticChecker()(dataclasses.replace(built, binary=broken))
    assert [(f.kind, f.detail) for f in findings if f.kind.startswith("sframe")] == [("sframe-check", "unreadable")]
    assert "magic" in findings[0].message and findings[0].config == built.config


@pytest.mark.parametrize("tc, linker, opt", [("trixie", "bfd", "-O1"), ("host", "gold", "-O2"), ("host", "lld", "-O2")])
def test_sframe_checks_findings_are_passed_on_with_where_they_are(tc, linker, opt, tmp_path):
    """Each finding of sframe check (the checker's own, run on the binary here) is one of the
    static checker's: its kind, "in generated code" or "in runtime code" for one at an address
    (not for what the linker did with the whole section), the generated function it is in, its
    address, its message and both rules.  A section the linker left as concatenated or PC-relative
    (gold, lld) is named and its steps are not compared."""
    need(tc)
    b = build(MIXED, BuildConfig(tc, opt, False, True, False, linker), tmp_path)
    assert b.ok, b.error
    checker = StaticChecker()
    got = {(f.detail, f.addr): f for f in checker(b) if f.kind == "sframe-check"}
    r = check_binary(b.binary, expect_binutils=(2, 44) if (tc, linker) == ("trixie", "bfd") else None)
    funcs = generated_functions(ElfImage.from_path(b.binary))
    seen = set()
    for c in r.findings:
        fn = next((g for g in funcs if c.addr is not None and g.start <= c.addr < g.start + g.size), None)
        where = "" if c.addr is None or c.kind in LINKER_KINDS else " in generated code" if fn else " in runtime code"
        detail = c.kind + where
        if detail in seen:
            continue  # one finding a signature: the first
        seen.add(detail)
        f = got[(detail, c.addr)]
        assert (f.function, f.message) == (fn.name if fn and where else None, c.message)
        assert f.evidence == {"message": c.message, "sframe": str(c.sframe) if c.sframe else None,
                              "cfi": str(c.cfi) if c.cfi else None}
    assert len(got) == len(seen) > 0
    unmerged = any(c.kind in ("concatenated-not-merged", "pcrel-starts-unflagged") for c in r.findings)
    assert checker.expected["sframe-linker-unmerged"] == (1 if unmerged else 0)
    assert unmerged == (linker != "bfd")


def test_the_checker_counts_across_programs_and_reads_an_unmerged_section_with_no_reader(built, tmp_path):
    """One checker over two programs linked by gold (their .sframe sections concatenated, starts
    PC-relative and unflagged): sframe-linker-unmerged counted once a program, and no SFrame step
    taken -- an injected reader is never given a section read the wrong way."""
    checker = StaticChecker(sframe_provider=CfaPlus8)
    for i in range(2):
        gold = build_source(SHAPE, render(SHAPE) + SLOT, "prog.c", dataclasses.replace(CONFIG, linker="gold"),
                            tmp_path / str(i))
        findings = checker(gold)
        assert not [f for f in findings if f.kind == "sframe-step"]
        # the frame-pointer steps are compared at every instruction still
        assert [(f.function, f.count) for f in findings if f.kind == "fp-step"] == [("fz_slot", SLOT_ROWS)]
    assert checker.expected["sframe-linker-unmerged"] == 2


def test_a_section_read_strictly_would_refuse_is_checked_not_refused(built, tmp_path):
    """fz_slot's FRE 1 moved back onto FRE 0 (the static checker reads unstrict, as sframe check
    does): an sframe check fre-start finding in generated code, not "unreadable"."""
    table, _ = load(built.binary)
    fn = _slot_fn(built)
    fde = table.find_fde(fn.start)
    first, second = table.section.fres(fde)[:2]
    data = bytearray(built.binary.read_bytes())
    at = ELFFile(io.BytesIO(bytes(data))).get_section_by_name(".sframe")["sh_offset"] + second.offset
    size = {0: 1, 1: 2, 2: 4}[fde.fre_type]
    assert int.from_bytes(data[at:at + size], "little") == second.start
    data[at:at + size] = first.start.to_bytes(size, "little")
    moved = tmp_path / "moved"
    moved.write_bytes(bytes(data))
    got = [(f.kind, f.detail, f.function) for f in StaticChecker()(dataclasses.replace(built, binary=moved))
           if f.kind == "sframe-check"]
    assert ("sframe-check", "fre-start in generated code", "fz_slot") in got  # (and what FRE 1's rule now covers)
    assert "unreadable" not in {d for _, d, _ in got}


BIGFRAME = Shape((Func("build", frozenset({"bigframe"}), (1,), 0), Func()))


def _objdump_fres(tc_name: str, path: Path, function: str) -> list[str]:
    """The FRE rows objdump --sframe of the toolchain's own binutils prints for ``function``'s FDE
    in a linked program (an object's FDEs all say pc = 0x0 before relocation)."""
    tc = toolchain(tc_name)
    out = subprocess.run(["objdump", "-t", str(path)], capture_output=True, text=True, timeout=60).stdout
    start = next(int(line.split()[0], 16) for line in out.splitlines() if line.endswith(" " + function))
    d, inner = tc.workdir("fres")
    try:
        shutil.copy(path, d / "x.o")
        text = tc.run(["objdump", "--sframe=.sframe", "x.o"], cwd=inner).stdout
    finally:
        shutil.rmtree(d, ignore_errors=True)
    for block in text.split("func idx")[1:]:
        if re.search(rf"pc = 0x{start:x},", block):
            return [line.split() for line in block.splitlines()[2:] if line.strip()]
    return []


@pytest.mark.parametrize("tc", ["host", "trixie", "sid"])
def test_a_stack_clash_probe_loop_is_judged_against_the_cfi(tc, tmp_path):
    """bigframe: gcc -O2 -fstack-clash-protection probes a 32 KiB frame in a loop with the CFA on
    r11 (.cfi_def_cfa 11, 32776).  gas 2.40 (Debian 12's) writes that row as sp+32776, a CFA 32 KiB
    above the real one, so an SFrame unwinder in the loop reads its return address from the
    caller's locals: a finding in the object and in the program, in objdump's own words.  gas 2.44
    leaves the function without an FDE (it warns), 2.47.50 writes a V3 flexible row on r11: no
    finding there."""
    need(tc)
    b = build(BIGFRAME, BuildConfig(tc, "-O2", False, True, False, "bfd"), tmp_path)
    assert b.ok, b.error
    found = {(f.kind, f.function) for f in StaticChecker()(b) if f.kind.startswith("sframe")}
    fres = _objdump_fres(tc, b.binary, "fz_f0")
    if tc == "host":
        assert {("sframe-object", "fz_f0"), ("sframe-step", "fz_f0")} <= found, found
        assert ["sp+32776", "u", "u"] in [row[1:] for row in fres], fres  # objdump: the CFA on sp
    else:
        assert not {k for k, fn in found if fn == "fz_f0"}, found
        if tc == "trixie":
            assert fres == []  # gas 2.44: "skipping SFrame FDE; non-SP/FP register 11 in .cfi_def_cfa"
        else:
            assert ["r11+32776", "u", "f"] in [row[1:] for row in fres], fres
