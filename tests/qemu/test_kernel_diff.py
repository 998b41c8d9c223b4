"""harness kernel-diff on real guests: the kernel's own unwind_deferred against the model.

The default (7.x) guest on 1 and 2 vCPUs, short runs (perf with defer_callchain sampling catalog
programs; every kernel event fed to the model): no unexplained difference and a non-trivial
number of events; the seed-v10 control on the same kernel finds its cookie mismatches and names
them; 6.1 is skipped with the reason, without a boot.  About a minute on TCG.
"""

from __future__ import annotations

import pytest

from harness.lockstep.compare import EXPECTED
from harness.lockstep.driver import KernelDiff, check_support
from harness.lockstep.points import resolve_points
from harness.perf.capture import PERFCC
from harness.report.lockstep import lockstep_lines
from harness.scenarios.catalog import CATALOG, programs_for
from harness.session import GuestSpec

pytestmark = pytest.mark.qemu

SCENARIOS = [CATALOG["threads"], CATALOG["forkexec"]]


def _spec(smp: int) -> GuestSpec:
    return GuestSpec(smp=smp, programs=programs_for(SCENARIOS) + [PERFCC])


POOL_GUESTS = [_spec(1), _spec(2)]  # from the worker's pool of guests (tests/conftest.py)


@pytest.fixture(scope="module")
def one_cpu(guest_pool):
    with guest_pool.take(_spec(1)) as s:
        yield s


def _diff(sess, scenario, profile="mainline", requests=80):
    ok, why = check_support(sess)
    assert ok, f"the default kernel must have deferred unwinding: {why}"  # a failure, not a skip
    r = KernelDiff(sess, scenario, profile, requests, points=resolve_points(sess)).run()
    assert not r.errors, r.errors
    return r


def _assert_equal(r):
    s = r.summary
    detail = "\n".join(lockstep_lines(s, show=20))
    # The counts are the test's own: the run goes on until the kernel's tracer has made the 80
    # requests asked (perfcc's window is sized for ~10 times as many: KernelDiff.run), and most
    # of them are an entry's first (task_work, a walk, a callback).  What may differ from the
    # model is the profile's declaration (harness/kernel/lockstep.py: EXPECTED), none on mainline.
    assert s.kernel["request"] >= 80 and s.kernel["task_work"] >= 5 and s.kernel["callback"] >= 5, detail
    assert s.compared["trace"] >= 5 and s.n_compared >= 200, detail
    assert not s.unexplained, detail
    assert not s.differences, detail


@pytest.mark.pool_guest(_spec(1))
@pytest.mark.parametrize("name", ["threads", "forkexec"])
def test_one_vcpu_the_model_does_what_the_kernel_does(one_cpu, name):
    r = _diff(one_cpu, CATALOG[name])
    _assert_equal(r)
    if name == "forkexec":
        assert r.summary.kernel["fork"] >= 2 and r.summary.kernel["exiting"] >= 2


@pytest.mark.pool_guest(_spec(2))
def test_two_vcpus_the_model_does_what_the_kernel_does(guest_pool):
    with guest_pool.take(_spec(2)) as sess:
        r = _diff(sess, CATALOG["threads"], requests=80)
    _assert_equal(r)
    assert sess.spec.smp == 2 and r.summary.kernel["request"] >= 80


@pytest.mark.pool_guest(_spec(1))
def test_the_seed_v10_control_shows_its_cookie_mismatches(one_cpu):
    r = _diff(one_cpu, CATALOG["threads"], profile="seed-v10")
    s = r.summary
    cookies = [d for d in s.differences if d.what == "request.cookie"]
    assert len(cookies) == sum(n for ret, n in s.requests_by_ret.items() if ret >= 0) > 0
    assert all(d.expected == EXPECTED["seed-v10"]["request.cookie"] for d in cookies)
    assert not s.unexplained, "\n".join(d.describe() for d in s.unexplained[:10])
    text = "\n".join(lockstep_lines(s, show=3))
    assert "expected: " in text and "seed-v10 cookie scheme" in text


def test_kernel_diff_on_6_1_is_a_plain_skip(capsys):
    """No guest is booted: the kernel's BTF says it has no deferred unwinding."""
    from harness.cli import main

    assert main(["kernel-diff", "--kernel", "bookworm", "threads"]) == 0
    out = capsys.readouterr().out
    assert "6.1." in out and "no deferred user unwinding" in out and "skipped" in out
