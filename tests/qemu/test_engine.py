"""The main job on a real guest: every delivered stack checked, and a broken unwinder caught."""

from __future__ import annotations

import dataclasses

import pytest

from harness.engine import (
    CATALOG,
    EXEC_REPLACED,
    SHADOW_NOT_PRESENT,
    Engine,
    programs_for,
)
from harness.session import GuestSpec, Session

pytestmark = pytest.mark.qemu

BASE = ["fp-spin", "fp-syscall", "sframe-v3-nofp", "fp-seed-v10", "fp-timer", "sframe-v2-timer"]
# Which scenarios each guest runs: everything on the default 7.x guest with one vCPU; on two
# vCPUs (timer-interrupt or syscall-entry requests on both) the ones where a second CPU matters;
# on 6.1 the ones whose kernel entry and exit paths differ there.
GUESTS = {
    ("default", 1): BASE + ["fp-syscall-entry", "threads", "forkexec", "forkexec-syscall", "signal",
                            "signal-syscall", "vdso", "recurse", "prologues", "prologues-sframe", "compat-fp"],
    ("default", 2): BASE + ["threads", "forkexec-syscall", "signal", "fp-syscall-entry"],
    ("bookworm", 1): BASE + ["fp-syscall-entry", "threads", "forkexec-syscall", "signal", "vdso", "recurse",
                             "prologues", "compat-fp"],
}
SAMPLES = 30
# Syscall-entry requests are cheap (about two stops each) and a fork/exec/exit round takes ~15
# of them: enough to see children and deliveries in do_exit.
SAMPLES_FOR = {"forkexec-syscall": 60}


def _guest_id(guest) -> str:
    return f"{guest[0]}-smp{guest[1]}"


@pytest.fixture(scope="module")
def session(request):
    kernel, smp = request.param
    scenarios = [CATALOG[n] for n in GUESTS[request.param]]
    with Session(GuestSpec(kernel=kernel, smp=smp, programs=programs_for(scenarios))) as s:
        yield s


def _scenario(session, name):
    sc = dataclasses.replace(CATALOG[name], samples=SAMPLES_FOR.get(name, SAMPLES))
    if session.spec.smp > 1 and "nmi" in sc.requests:
        # QMP's NMI reaches vCPU 0 only (Linux masks LINT1 on the others): on SMP guests the
        # requests come from the timer interrupt on every vCPU.
        sc = dataclasses.replace(sc, requests=("timer",))
    return sc


def _check_scenario(session, name, tmp_path):
    sc = _scenario(session, name)
    with open(tmp_path / "log.jsonl", "w") as log:
        r = Engine(session, sc, log).run()
    assert not r.errors, r.errors
    assert not r.failures, "\n".join(r.failures[:3])
    assert not r.invariant_violations, r.invariant_violations[:3]
    # Requests that land in other tasks (init's shell, kernel threads) are handled by the
    # model's rules and counted, but only the program's own stacks have oracles.
    own = r.own_stacks
    assert own >= 8, (f"only {own} of the program's stacks delivered from {sc.samples} requests: "
                      f"requests {dict(r.requests)}, expected {dict(r.expected)}, stops {r.stops}")
    assert r.checked["regs"] >= own // 2
    # Every stack of the program is accounted for by each oracle: it agrees, or every frame in
    # which it differs is explained by name (the side-by-side of the first of each kind is kept).
    assert r.checked["cfi"] + r.diverged["cfi"] == own, (dict(r.checked), dict(r.diverged))
    if sc.variant.shadow:
        not_shadow = r.expected[SHADOW_NOT_PRESENT]
        assert r.checked["shadow"] + r.diverged["shadow"] + not_shadow == own, (dict(r.checked), dict(r.diverged))
        assert r.checked["shadow"] >= 1
    # one cookie per entry, each tracer called once per entry, one walk per entry
    assert len(r.cookies) == r.stacks
    assert r.callbacks == sc.tracers * r.stacks
    assert r.walks == r.stacks
    assert (tmp_path / "log.jsonl").stat().st_size > 0
    EXPECT.get(name, lambda r, sc: None)(r, sc)


def _named(r, prefix: str) -> int:
    return sum(n for kind, n in r.expected.items() if kind.startswith(prefix))


def _threads(r, sc):
    assert len(r.tasks) >= 2, f"stacks from {len(r.tasks)} threads only"


def _forkexec_syscall(r, sc):
    assert r.children >= 1, "no stack of a forked child was checked"
    assert r.at_exit >= 1, "no request was pending at exit (delivered in do_exit)"
    assert r.expected[EXEC_REPLACED] <= r.children


def _signal(r, sc):
    assert _named(r, "fp: interrupted IP lost across a signal frame") >= 1, dict(r.expected)


def _vdso(r, sc):
    # samples in the vDSO, whose image (and .eh_frame) comes from guest memory
    assert _named(r, "shadow: no frame for uninstrumented code (__vdso_") >= 1, dict(r.expected)


def _recurse(r, sc):
    assert r.truncated >= 1
    assert _named(r, "fp: truncated at 510 entries") >= 1, dict(r.expected)


def _prologues(r, sc):
    assert r.expected["fp: caller lost at a prologue IP (entry rule off)"] >= 1, dict(r.expected)


def _prologues_sframe(r, sc):
    # SFrame describes every instruction of our own code: at a prologue the caller is not lost
    assert not _named(r, "fp: caller lost at a prologue"), dict(r.expected)


def _compat(r, sc):
    # every stack of the 32-bit task is checked by the i386 CFI oracle too (CFI no longer skips it)
    assert r.checked["cfi"] + r.diverged["cfi"] == r.own_stacks, (dict(r.checked), dict(r.diverged))
    assert r.checked["cfi"] >= 1, (dict(r.checked), dict(r.expected))
    assert r.checked["shadow"] >= r.own_stacks // 2


EXPECT = {
    "threads": _threads,
    "forkexec-syscall": _forkexec_syscall,
    "signal": _signal,
    "signal-syscall": _signal,
    "vdso": _vdso,
    "recurse": _recurse,
    "prologues": _prologues,
    "prologues-sframe": _prologues_sframe,
    "compat-fp": _compat,
}


def _scenario_test(guest):
    """``test_scenario_has_no_unexpected_divergence`` on one guest.  One test function per guest
    keeps the session parameter module-scoped (one boot per guest) while the scenario name stays a
    function-scoped parameter: a (guest, name) pair as one indirect parameter would boot per test."""

    @pytest.mark.parametrize("session", [guest], ids=[_guest_id(guest)], indirect=True)
    @pytest.mark.parametrize("name", GUESTS[guest])
    def test(session, name, tmp_path):
        _check_scenario(session, name, tmp_path)

    test.__name__ = test.__qualname__ = f"test_scenario_has_no_unexpected_divergence_{_guest_id(guest).replace('-', '_')}"
    return test


for _guest in GUESTS:
    _t = _scenario_test(_guest)
    globals()[_t.__name__] = _t
del _guest, _t


@pytest.mark.parametrize("session", list(GUESTS), ids=[_guest_id(g) for g in GUESTS], indirect=True)
def test_a_broken_unwinder_is_caught(session):
    sc = dataclasses.replace(CATALOG["fp-spin"], name="broken-ra", samples=30, break_ra=True)
    if session.spec.smp > 1:
        sc = dataclasses.replace(sc, requests=("timer",))
    r = Engine(session, sc).run()
    own = r.own_stacks
    assert own >= 5, f"requests {dict(r.requests)}, expected {dict(r.expected)}, stops {r.stops}, {r.errors}"
    assert len(r.failures) >= own // 2, "the oracles did not notice a wrong RA offset"
    assert any("differ" in f for f in r.failures)
