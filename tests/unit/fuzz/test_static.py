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

import functools
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from harness.fuzz.build import BuildConfig, build, build_source
from harness.fuzz.campaign import _blocks_at
from harness.fuzz.render import render
from harness.fuzz.shape import Func, Shape
from harness.fuzz.static import CALLER_FP, StaticChecker, generated_functions, instructions, sframe_expressible
from harness.rule import FrameRule, ValueRule
from harness.unwind.cfi import cfi_table
from harness.unwind.maps import ElfImage
from harness.unwind.sframe_check import load
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
"  .size fz_slot, .-fz_slot\n");
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


def test_instructions_are_the_ones_objdump_decodes(built):
    """Capstone's boundaries, from each generated function's first byte, are objdump's."""
    image = ElfImage.from_path(built.binary)
    for fn in generated_functions(image):
        out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--disassemble={fn.name}", str(built.binary)],
                             capture_output=True, text=True, check=True, timeout=60).stdout
        theirs = [int(m.group(1), 16) for m in re.finditer(r"^\s+([0-9a-f]+):\t", out, re.M)]
        assert instructions(image, fn) == theirs, fn.name


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
