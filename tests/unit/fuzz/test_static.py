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
from pathlib import Path

import pytest

from harness.fuzz.build import BuildConfig, build_source
from harness.fuzz.render import render
from harness.fuzz.shape import Func, Shape
from harness.fuzz.static import CALLER_FP, StaticChecker, generated_functions, instructions
from harness.rule import FrameRule, ValueRule
from harness.unwind.cfi import cfi_table
from harness.unwind.maps import ElfImage
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
