"""A frame lost inside recursion's run of equal return addresses, on real stacks.

guest_programs/recurse.c (the ``recurse`` scenario's build: frame pointers, SFrame, static,
shadow stack) stopped under gdb at ``rec``'s first instruction, a few levels and 363 levels down:
the FP walk (the kernel's entry rule off) takes the caller's rbp and skips the first rec+0x2a,
which CFI has.  Where the walk parts from CFI the two lists sit at the run's end (FP's
``descend`` against CFI's last rec+0x2a); the skip is explained at the run's first entry, and both
lists' indices move back to it so the frame before it is the IP in rec's prologue, where
``fp-prologue-ip`` looks.  Seen once in the QEMU suite (campaign run n7, 2026-12-05, 363 levels
down) as "fp and cfi differ from frame #363: no cause proves it", when only the oracle's index
moved back: the frame before the skip was then the 362nd rec+0x2a of FP's list, not the IP.
"""

from __future__ import annotations

import shutil

import pytest

from harness.images.programs import build_program
from harness.images.toolchain import get_toolchain
from harness.scenarios.catalog import CATALOG
from harness.tools.capture_gdb import StopPoint, capture_program
from harness.unwind.snapshot import Snapshot
from harness.verdicts.align import judge
from harness.verdicts.types import ENDS, EXPLAINED, LOST
from tests.support.cause_stacks import cfi_of, stack_of
from tests.support.gating import require

DEPTH = 600  # recurse's default: rec(600) is the outermost level, rec(0) calls bottom
LEVELS = (3, 363)


@pytest.fixture(scope="module")
def rec_entry(tmp_path_factory):
    """{level: (snapshot, {function: (start, end)})}: one gdb run per level (the stops share rec's
    first byte, told apart by rdi, the level's depth argument)."""
    require(shutil.which("gdb") is not None, "gdb")
    sc = CATALOG["recurse"]
    prog = build_program(sc.program, get_toolchain(sc.toolchain), sc.variant)
    root = tmp_path_factory.mktemp("recurse")
    out = {}
    for level in LEVELS:
        stop = StopPoint(f"rec-{level}", "break", "rec", condition=f"$rdi == {DEPTH - level}")
        (path,) = capture_program(prog, [str(DEPTH)], [stop], root / str(level), loaded_syscall="brk").values()
        out[level] = Snapshot.load(path)
    return out


@pytest.mark.parametrize("level", LEVELS)
def test_a_caller_lost_in_recursion_is_proven_at_the_ip(rec_entry, level):
    snap = rec_entry[level]
    stack = stack_of(snap, "fp")
    oracle, frames = cfi_of(stack)
    rec, ra = frames.ips[0], frames.ips[1]
    # CFI: the IP at rec's first byte, one rec+0x2a per level above, then descend and main
    assert frames.ips[1:level + 1] == (ra,) * level and frames.ips[level + 1] != ra
    # FP: one rec+0x2a fewer, the rest the same
    assert list(stack.trace.ips[:level + 1]) == [rec, *[ra] * (level - 1), frames.ips[level + 1]]
    v = judge(stack, oracle, frames)
    assert v.verdict == EXPLAINED, [d.text for d in v.divergences]
    lost, *rest = v.divergences
    assert (lost.kind, lost.cause, lost.got_index, lost.want_index) == (LOST, "fp-prologue-ip", 1, 1)
    assert lost.evidence["function"] == "rec"
    # ... and where FP ends (__libc_start_call_main keeps no frame pointer), only that
    assert [(d.kind, d.cause) for d in rest] == [(ENDS, "fp-frameless-function")]
