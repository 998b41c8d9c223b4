"""The ``walk`` record's ``truncated`` flag when the walker itself stops at the limit.

The model cuts a walk at ``max_entries``.  The engine's and the shell's walkers (unwind_user() on
the delivery's snapshot, harness/scenarios/snapshot.py) stop there themselves, as the kernel's
loop does: their trace has exactly ``max_entries`` entries and StopReason.LIMIT.  Such a walk was
recorded with ``"truncated": false`` (tests/data/run-small/recurse.jsonl, written before the fix,
has two of them); it is a walk stopped at the limit, and the record says so.
"""

from __future__ import annotations

import io
import json

import pytest

from harness.deferred import IRQ, Context, DeferredModel, EventLog, UnwindWork, check_lines, mainline, seed_v10
from harness.unwind.mixed import sframe_tables_for
from harness.unwind.synth import fp_chain
from harness.unwind.user import StopReason, Trace, UnwindConfig, unwind_user


def deliver(profile, walk) -> tuple[dict, tuple, list[str]]:
    """One request and its delivery on a model whose walker is ``walk(max_entries) -> Trace``: the
    walk record, the trace the tracer got, and the log's lines."""
    fp = io.StringIO()
    model = DeferredModel(profile, lambda task: walk(profile.max_entries).ips, log=EventLog(fp))
    got = []
    work = UnwindWork(lambda w, trace, cookie: got.append(trace), "t")
    assert model.init(work) == 0
    t = model.spawn()
    model.enter_kernel(t)
    assert model.request(work, t, 0, Context(IRQ))[0] == 0
    model.return_to_user(t)
    lines = fp.getvalue().splitlines()
    walks = [json.loads(x) for x in lines if '"ev":"walk"' in x]
    assert len(walks) == 1 and len(got) == 1
    return walks[0], got[0], lines


PROFILES = [pytest.param(mainline(), id="mainline-510"), pytest.param(seed_v10(), id="v10-512")]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("extra", [-1, 0, 1, 490])
def test_synthetic_chain_truncated_iff_the_walk_stopped_at_the_limit(profile, extra):
    """fp_chain of max_entries + extra frames, walked by unwind_user() with the profile's limit:
    one frame short ends at the chain's end, exactly the limit and beyond stop at the limit."""
    s = fp_chain(profile.max_entries + extra)
    traces: list[Trace] = []

    def walk(limit):
        traces.append(unwind_user(s.memory, s.regs, UnwindConfig(max_entries=limit)))
        return traces[-1]

    rec, trace, lines = deliver(profile, walk)
    limited = traces[0].stop.reason is StopReason.LIMIT
    assert limited == (extra >= 0)
    assert rec["nr"] == len(trace) == min(len(s.ips), profile.max_entries)
    assert rec["truncated"] is limited
    assert check_lines(lines).clean


@pytest.mark.parametrize("unwinder", ["fp", "sframe"])
@pytest.mark.parametrize("profile", PROFILES)
def test_real_recursion_walk_is_recorded_truncated(recurse_snaps, profile, unwinder):
    """recurse.c 600 stopped at rec(0)'s call of bottom (606 frames), walked as the engine walks a
    delivery (StackChecker.walk: unwind_user() with UNWIND_MAX_ENTRIES, SFrame tables for
    "sframe"): the trace stops at the limit and the walk record says truncated."""
    snap = recurse_snaps.snaps["rec-bottom"]
    tables = sframe_tables_for(snap.address_space()) if unwinder == "sframe" else None
    traces: list[Trace] = []

    def walk(limit):
        traces.append(unwind_user(snap.memory(), snap.regs, UnwindConfig(max_entries=limit, tables_for=tables)))
        return traces[-1]

    rec, trace, lines = deliver(profile, walk)
    assert traces[0].stop.reason is StopReason.LIMIT
    assert rec["nr"] == len(trace) == profile.max_entries
    assert rec["truncated"] is True
    assert check_lines(lines).clean
