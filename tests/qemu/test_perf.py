"""The third oracle on the default guest: the kernel's own perf callchains against our unwinder.

The default (7.x) guest, from the pool; guest_programs/callchain (frame pointers) sampled by
guest_programs/perfcc.c for a few seconds, once with frame-pointer callchains and once with
defer_callchain.  About 15 s on TCG.
"""

from __future__ import annotations

import pytest

from harness.images.programs import Variant, program_facts
from harness.perf.capture import PERFCC, PerfSpec, capture, resolver
from harness.perf.oracle import check_capture
from harness.perfparse.records import parse_capture
from harness.report.perf import perf_table
from harness.session import GuestSpec

TARGET = ("callchain", "host", Variant(shadow=True))
ARGS = ["100000000", "raw"]  # syscalls from c(): samples in user and in kernel mode
SPEC = PerfSpec(seconds=3, freq=200)


GUEST = GuestSpec(programs=[PERFCC, TARGET])
POOL_GUESTS = [GUEST]  # the default guest, from the worker's pool (tests/conftest.py)
pytestmark = [pytest.mark.qemu, pytest.mark.pool_guest(GUEST)]


@pytest.fixture(scope="module")
def session(guest_pool):
    with guest_pool.take(GUEST) as s:
        yield s


def _run(session, defer: bool):
    prog = session.program(*TARGET)
    data = capture(session, [prog.guest_path, *ARGS], PerfSpec(seconds=SPEC.seconds, freq=SPEC.freq, defer=defer))
    cap = parse_capture(data)
    # held to the capture's declaration: perfcc's fork + exec of the target, callchain's own facts
    return cap, check_capture(cap, resolver([prog]), program_facts(prog.name, prog.toolchain))


def test_kernel_fp_callchains_equal_our_unwinder(session):
    cap, r = _run(session, defer=False)
    assert cap.info["defer"] == "off" and cap.info["release"] == session.machine.release
    assert r.failures == [], "\n\n".join(r.failures[:3])
    # The counts are the test's own: cpu-clock at 200 Hz for 3 s of the guest's clock, which runs in
    # real time however slow TCG is, and the target is the only busy task on the vCPU: ~600
    # samples, a third of them asked for.  raw mode spends a large share in getppid: both modes.
    assert r.compared >= 200, perf_table(r)
    assert r.compared_kernel_mode >= 20 and r.user_mode >= 20, perf_table(r)  # both kinds of sample
    assert r.equal + sum(r.expected.values()) == r.compared
    # every proven cause is one the capture's facts allow (harness/verdicts/causes.py's needs)
    assert r.declared is not None and r.undeclared == {}, perf_table(r)
    # c <- b <- a <- main is on every stack the program spends its time in: CFI agrees up to where
    # our walk stops (in glibc, which keeps no frame pointer), and goes on to _start.
    cfi_goes_on = sum(n for k, n in r.cfi.items() if k.startswith("ours vs cfi: ends "))
    assert cfi_goes_on >= 0.9 * r.cfi["walked"] > 0, perf_table(r)
    assert r.lost == 0


def test_deferred_callchains_checked(session):
    cap, r = _run(session, defer=True)
    major = int(session.machine.release.split(".")[0])
    assert major >= 7, f"the default guest should be 7.x, not {session.machine.release}"
    assert cap.info["defer"] == "on", cap.info  # 6.19+ accepts defer_callchain
    d = r.deferred
    assert d is not None
    assert d.violations == [], "\n".join(d.violations[:5])
    assert d.failures == [], "\n\n".join(d.failures[:3])
    assert d.samples >= 200 and d.records >= 200 and d.joined >= 200, perf_table(r)
    assert d.compared >= 200 and d.equal + sum(d.expected.values()) >= d.compared, perf_table(r)
    # every proven cause is one the capture's facts allow: perfcc execs the target, so a sample in
    # that window may be proven execve-replaced (seen once in a cold-cache CI run); none outside
    assert r.declared is not None and "execve-replaced" in r.declared and r.undeclared == {}, perf_table(r)
    # every cookie got its record: a sample without one only in the entry the task left by exiting
    assert sum(n for why, n in d.unjoined.items() if why != "at exit") == 0, perf_table(r)
    assert r.failures == [] and r.ok
