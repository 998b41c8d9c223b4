"""A frame lost inside recursion's run of equal return addresses, on real stacks.

guest_programs/recurse.c (the ``recurse`` scenario's build: frame pointers, SFrame, static,
shadow stack) stopped under gdb in ``rec`` where rbp is still (or again) its caller's, a few
levels and 363 levels down: at its first instruction, after its push %rbp, and at its ret.  The
FP walk (the kernel's entry rule off) takes the caller's rbp and skips the first rec+0x2a, which
CFI has.  Where the walk parts from CFI the two lists sit at the run's end (FP's
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
LEVELS = (3, 4, 363)  # 4: an even run, where a step of two would overshoot its start
# Where in rec the FP step skips the caller: (stop, the cause that proves it).  rdi is the level's
# depth argument until the call of __cyg_profile_func_enter; at the ret, rbx is the caller's (its
# depth: one more), restored from the frame just before leave.
STOPS = {
    "entry": ("fp-prologue-ip", lambda d: StopPoint("entry", "break", "rec", condition=f"$rdi == {d}")),
    "after-push": ("fp-prologue-ip", lambda d: StopPoint("after-push", "offset", "rec", offset=1,
                                                         condition=f"$rdi == {d}")),
    "ret": ("fp-epilogue-ip", lambda d: StopPoint("ret", "insn", "rec", "ret", condition=f"$rbx == {d + 1}")),
}


@pytest.fixture(scope="module")
def rec_stops(tmp_path_factory):
    """{(stop, level): snapshot}: one gdb run each (the stops share addresses, told apart by the
    level's depth)."""
    require(shutil.which("gdb") is not None, "gdb")
    sc = CATALOG["recurse"]
    prog = build_program(sc.program, get_toolchain(sc.toolchain), sc.variant)
    root = tmp_path_factory.mktemp("recurse")
    out = {}
    for name, (_, make) in STOPS.items():
        for level in LEVELS:
            (path,) = capture_program(prog, [str(DEPTH)], [make(DEPTH - level)], root / f"{name}-{level}",
                                      loaded_syscall="brk").values()
            out[name, level] = Snapshot.load(path)
    return out


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("stop", list(STOPS))
def test_a_caller_lost_in_recursion_is_proven_at_the_ip(rec_stops, stop, level):
    snap = rec_stops[stop, level]
    stack = stack_of(snap, "fp")
    oracle, frames = cfi_of(stack)
    ip, ra = frames.ips[0], frames.ips[1]
    # CFI: the IP in rec, one rec+0x2a per level above, then descend and main
    assert frames.ips[1:level + 1] == (ra,) * level and frames.ips[level + 1] != ra
    # FP: one rec+0x2a fewer, the rest the same
    assert list(stack.trace.ips[:level + 1]) == [ip, *[ra] * (level - 1), frames.ips[level + 1]]
    v = judge(stack, oracle, frames)
    assert v.verdict == EXPLAINED, [d.text for d in v.divergences]
    lost, *rest = v.divergences
    assert (lost.kind, lost.cause, lost.got_index, lost.want_index) == (LOST, STOPS[stop][0], 1, 1)
    assert lost.evidence["function"] == "rec"
    # ... and where FP ends (__libc_start_call_main keeps no frame pointer), only that
    assert [(d.kind, d.cause) for d in rest] == [(ENDS, "fp-frameless-function")]
