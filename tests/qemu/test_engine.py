"""The main job on a real guest: every delivered stack checked, and a broken unwinder caught."""

from __future__ import annotations

import dataclasses

import pytest

from harness.engine import CATALOG, FOREIGN, Engine, programs_for
from harness.session import GuestSpec, Session

pytestmark = pytest.mark.qemu

SCENARIOS = ["fp-spin", "fp-syscall", "sframe-v3-nofp", "fp-seed-v10", "fp-timer", "sframe-v2-timer"]


@pytest.fixture(scope="module", params=[("default", 1), ("default", 2), ("bookworm", 1)],
                ids=lambda p: f"{p[0]}-smp{p[1]}")
def session(request):
    kernel, smp = request.param
    scenarios = [CATALOG[n] for n in SCENARIOS]
    with Session(GuestSpec(kernel=kernel, smp=smp, programs=programs_for(scenarios))) as s:
        yield s


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_has_no_unexpected_divergence(session, name, tmp_path):
    sc = dataclasses.replace(CATALOG[name], samples=30)
    if session.spec.smp > 1 and "nmi" in sc.requests:
        # QMP's NMI reaches vCPU 0 only (Linux masks LINT1 on the others): on SMP guests the
        # requests come from the timer interrupt on every vCPU.
        sc = dataclasses.replace(sc, requests=("timer",))
    with open(tmp_path / "log.jsonl", "w") as log:
        r = Engine(session, sc, log).run()
    assert not r.errors, r.errors
    assert not r.failures, "\n".join(r.failures[:3])
    assert not r.invariant_violations, r.invariant_violations[:3]
    # Requests that land in other tasks (init's shell, kernel threads) are handled by the
    # model's rules and counted, but only the program's own stacks have oracles.
    own = r.stacks - r.expected[FOREIGN]
    assert own >= 10, (f"only {own} of the program's stacks delivered from {sc.samples} requests: "
                       f"requests {dict(r.requests)}, expected {dict(r.expected)}, stops {r.stops}")
    assert r.checked["regs"] >= own // 2
    assert r.checked["cfi"] >= own // 2
    if sc.variant.shadow:
        assert r.checked["shadow"] >= own // 2
    # one cookie per entry, each tracer called once per entry, one walk per entry
    assert len(r.cookies) == r.stacks
    assert r.callbacks == sc.tracers * r.stacks
    assert r.walks == r.stacks
    assert (tmp_path / "log.jsonl").stat().st_size > 0


def test_a_broken_unwinder_is_caught(session):
    sc = dataclasses.replace(CATALOG["fp-spin"], name="broken-ra", samples=30, break_ra=True)
    if session.spec.smp > 1:
        sc = dataclasses.replace(sc, requests=("timer",))
    r = Engine(session, sc).run()
    own = r.stacks - r.expected[FOREIGN]
    assert own >= 5, f"requests {dict(r.requests)}, expected {dict(r.expected)}, stops {r.stops}, {r.errors}"
    assert len(r.failures) >= own // 2, "the oracles did not notice a wrong RA offset"
    assert any("differ" in f for f in r.failures)
