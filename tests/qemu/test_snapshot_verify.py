"""The delivery snapshot gives the same checks as the live guest (issue #13).

With ``Engine(verify=True)`` every delivery is also walked and judged on the live guest at its
stop, before the guest runs on, and the snapshot's walk, frames, stops and verdicts are compared
with those: any difference, or any read the snapshot had not captured, is a problem of the run.
The scenarios cover the memory the checks read beyond the stack top: signal frames (below the
handler's stack, and the frame rt_sigreturn restored from), per-thread shadow stacks (fs_base),
the vDSO, 32-bit tasks, a stack deeper than UNWIND_MAX_ENTRIES, children after fork and exec.
"""

from __future__ import annotations

import dataclasses

import pytest

from harness.scenarios.catalog import CATALOG, programs_for
from harness.scenarios.engine import Engine
from harness.session import GuestSpec, Session

pytestmark = pytest.mark.qemu

GUESTS = {
    1: ["fp-spin", "signal", "signal-syscall", "threads", "vdso", "compat-fp", "recurse", "forkexec-syscall",
        "sframe-v3-nofp", "fp-dynamic"],
    2: ["threads", "signal-syscall"],
}


@pytest.fixture(scope="module", params=sorted(GUESTS), ids=lambda n: f"smp{n}")
def guest(request):
    smp = request.param
    with Session(GuestSpec(smp=smp, programs=programs_for([CATALOG[n] for n in GUESTS[smp]]))) as s:
        yield s, GUESTS[smp]


def test_snapshot_checks_equal_live_checks(guest):
    session, names = guest
    for name in names:
        sc = dataclasses.replace(CATALOG[name], samples=20)
        if session.spec.smp > 1 and "nmi" in sc.requests:
            sc = dataclasses.replace(sc, requests=("timer",))
        engine = Engine(session, sc, verify=True, keep_snapshots=True)
        r = engine.run()
        assert r.stacks > 0, (name, r.notes, r.errors)
        assert not r.errors, (name, r.errors)
        differs = [p for p in r.problems if "differ" in p or "did not capture" in p]
        assert not differs, (name, differs)
        for snap, rec in engine.snapshots:
            assert not snap.memory.misses, (name, rec["seq"], snap.memory.misses)
            assert snap.expected is not None
        assert not r.failures, (name, [f["verdicts"] for f in r.failures[:2]])
