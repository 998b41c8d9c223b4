"""Where harness/verdicts/align.py places a lost or extra frame inside a run of equal entries
(recursion: the same return address again and again): at the run's first entry, with both lists'
indices moved back together, and never onto entry 0 (the IP, where the walk and the oracle start
from the same registers and must agree).

The causes are planted: these tests pin the alignment's index bookkeeping, not a cause's
judgement (tests/unit/verdicts/test_align_recursion.py does both on real gdb stops), so
``explain`` is replaced by one that accepts a divergence by its indices alone and records every
divergence it is asked about."""

from __future__ import annotations

import pytest

from harness.oracles.base import OracleFrames
from harness.regs import UserRegs
from harness.verdicts import align
from harness.verdicts.types import ENDS, EXTRA, LOST
from tests.unit.verdicts.test_align_gaps import stack_of

IP, A, R, OUT = 0x401136, 0x401182, 0x4011A4, 0x4011C0


@pytest.fixture
def planted(monkeypatch):
    """``accept(d) -> bool`` sets which divergences a cause proves; returns the asked list."""
    asked = []

    def use(accept):
        def explain(stack, d):
            asked.append(d)
            return d.proven("planted", {}) if accept(d) else d
        monkeypatch.setattr(align, "explain", explain)
        return asked
    return use


def judge(got, want):
    stack = stack_of(got, UserRegs(ip=got[0], sp=0x7FFFFFFFE000, bp=0x7FFFFFFFE030))
    return align._align(stack, "cfi", tuple(got), OracleFrames(tuple(want)))


def test_an_extra_frame_in_a_run_is_placed_at_the_runs_start_in_both_lists(planted):
    # the unwinder has one more R than the oracle: whichever R is extra, the lists read the same
    # as with the run's first one extra, and only there is the frame before it (A) one frame of both
    got, want = (IP, A, R, R, R, R, OUT), (IP, A, R, R, R, OUT)
    planted(lambda d: d.kind == EXTRA and d.got[d.got_index - 1] == A and d.want[d.want_index - 1] == A)
    ok, divs = judge(got, want)
    assert ok
    assert [(d.kind, d.got_index, d.want_index) for d in divs] == [(EXTRA, 2, 2)]


def test_a_lost_frame_in_a_run_is_placed_at_the_runs_start_in_both_lists(planted):
    got, want = (IP, A, R, R, OUT), (IP, A, R, R, R, OUT)
    planted(lambda d: d.kind == LOST and d.got[d.got_index - 1] == A and d.want[d.want_index - 1] == A)
    ok, divs = judge(got, want)
    assert ok
    assert [(d.kind, d.got_index, d.want_index) for d in divs] == [(LOST, 2, 2)]


@pytest.mark.parametrize("kind", [LOST, EXTRA])
def test_a_run_that_starts_at_the_ip_never_moves_a_divergence_onto_it(planted, kind):
    # An IP right after a recursive call returned equals the return addresses above it: the run
    # of equal entries then starts at entry 0 in both lists.  Two frames lost (or extra) in it:
    # the second is moved back as far as the lists agree, but not onto the IP, which is no
    # return address and no frame a cause may call "the frame before".
    short, long_ = (R, R, R, OUT), (R, R, R, R, R, OUT)
    got, want = (short, long_) if kind == LOST else (long_, short)
    asked = planted(lambda d: d.kind == kind)
    ok, divs = judge(got, want)
    assert ok
    assert all(d.got_index >= 1 and d.want_index >= 1 for d in asked), \
        [(d.kind, d.got_index, d.want_index) for d in asked if d.got_index < 1 or d.want_index < 1]
    # each at the run's start but for the IP, in the list that has the frame one further on
    expect = [(1, 1), (1, 2)] if kind == LOST else [(1, 1), (2, 1)]
    assert [(d.kind, d.got_index, d.want_index) for d in divs] == [(kind, *e) for e in expect]


def test_without_a_cause_the_run_is_a_failure(planted):
    planted(lambda d: False)
    ok, divs = judge((IP, A, R, R, R, R, OUT), (IP, A, R, R, R, OUT))
    assert not ok
    assert divs and all(not d.explained for d in divs)


def test_frames_past_the_unwinders_last_are_its_walk_ending_not_lost_frames(planted):
    # The oracle has two frames after the unwinder's last: the walk ended early (ENDS), which a
    # cause of lost frames does not explain; no LOST is ever asked after the unwinder's last frame.
    asked = planted(lambda d: d.kind == LOST)
    ok, divs = judge((IP, A), (IP, A, R, OUT))
    assert not ok
    assert [(d.kind, d.got_index, d.want_index) for d in divs] == [(ENDS, 2, 2)]
    assert not [d for d in asked if d.kind == LOST and d.got_index >= 2]
