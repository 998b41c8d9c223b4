"""The main job on a real guest: every delivered stack checked, and a broken unwinder caught."""

from __future__ import annotations

import dataclasses

import pytest

from harness.engine import CATALOG, Engine, programs_for
from harness.session import GuestSpec, Session

pytestmark = pytest.mark.qemu

SCENARIOS = ["fp-spin", "fp-syscall", "sframe-v3-nofp", "fp-seed-v10"]


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
    with open(tmp_path / "log.jsonl", "w") as log:
        r = Engine(session, sc, log).run()
    assert not r.errors, r.errors
    assert not r.failures, "\n".join(r.failures[:3])
    assert not r.invariant_violations, r.invariant_violations[:3]
    assert r.stacks >= 20, f"only {r.stacks} stacks delivered from {sc.samples} NMIs"
    assert r.checked["cfi"] >= 20
    assert r.checked["regs"] >= 20
    if sc.variant.shadow:
        assert r.checked["shadow"] >= 15
    # one cookie per entry, each tracer called once per entry, one walk per entry
    assert len(r.cookies) == r.stacks
    assert r.callbacks == sc.tracers * r.stacks
    assert r.walks == r.stacks
    assert (tmp_path / "log.jsonl").stat().st_size > 0


def test_a_broken_unwinder_is_caught(session):
    sc = dataclasses.replace(CATALOG["fp-spin"], name="broken-ra", samples=10, break_ra=True)
    r = Engine(session, sc).run()
    assert r.stacks >= 5
    assert len(r.failures) >= r.stacks // 2, "the oracles did not notice a wrong RA offset"
    assert any("differ" in f for f in r.failures)
