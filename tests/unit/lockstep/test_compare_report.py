"""What kernel-diff prints and sums, and what it says of a kernel: ``Difference.describe`` (numbers
above 0xFFFF in hex, lists bracketed, strings quoted), ``Summary.merge`` (the scenarios' totals),
``deferred_support``'s answer and reason, and the offline entry points (``replay`` continuing the
kernel's per-CPU counters, ``renumber``); and which differences a profile may name (issue 21:
mutation testing found these held by no test of their own)."""

from __future__ import annotations

import collections
import dataclasses

import pytest

from harness.deferred.profile import mainline, seed_v10
from harness.kernel.btf import BtfLookupError
from harness.lockstep import compare
from harness.lockstep.compare import (
    Difference,
    Event,
    Lockstep,
    LockstepError,
    Summary,
    deferred_support,
    renumber,
    replay,
)
from tests.support.lockstep_events import TASK, TRACERS, WORK, cookie

# -- Difference.describe --------------------------------------------------------------------------------


@pytest.mark.parametrize("value, shown", [
    (0xFFFF, "65535"), (0x10000, "0x10000"), (-0x10000, "-0x10000"), (-5, "-5"), (True, "True"), (None, "None"),
    ("perf", "'perf'"), ([], "[]"), ([0x401000, 7, "perf"], "[0x401000, 7, 'perf']"),
    ([("perf", cookie(0, 3))], "[['perf', 0x300000001]]"), ((1, 2), "[1, 2]"),
    ({"perf": 2}, "{'perf': 2}"),
])
def test_a_difference_shows_each_side_as_a_reader_wants_it(value, shown):
    d = Difference(12, "trace", 100, 3, value, 0, "")
    assert d.describe() == f"#12 pid 100 entry 3: trace: kernel {shown} | model 0  [UNEXPLAINED]"


def test_a_named_difference_says_its_reason():
    d = Difference(1, "request.ret", 7, 1, 1, 2, "v10 returns 2")
    assert d.describe() == "#1 pid 7 entry 1: request.ret: kernel 1 | model 2  [expected (v10 returns 2)]"


# -- Summary ----------------------------------------------------------------------------------------------


def test_summaries_of_scenarios_add_up():
    d1, d2 = Difference(1, "trace", 1, 1, 1, 2), Difference(2, "walks", 2, 1, 0, 1, "named")
    a = Summary("mainline", collections.Counter({"trace": 2}), collections.Counter({"trace": 1}), [d1],
                collections.Counter({"request": 3}), collections.Counter({0: 2, 1: 1}), ["a"])
    b = Summary("mainline", collections.Counter({"trace": 1, "walks": 1}), collections.Counter({"trace": 1}), [d2],
                collections.Counter({"request": 1, "walk": 1}), collections.Counter({1: 1}), ["b"])
    a.merge(b)
    assert a == Summary("mainline", collections.Counter({"trace": 3, "walks": 1}), collections.Counter({"trace": 2}),
                        [d1, d2], collections.Counter({"request": 4, "walk": 1}), collections.Counter({0: 2, 1: 2}),
                        ["a", "b"])
    assert (a.n_compared, a.n_equal, a.unexplained, a.expected) == (4, 2, [d1], [d2])


def test_a_summary_is_of_its_profile():
    assert replay([], mainline(), TRACERS).profile == "mainline"
    assert replay([], seed_v10(), TRACERS).profile == "seed-v10"


# -- deferred_support -------------------------------------------------------------------------------------


class Btf:
    def __init__(self, has: bool, error=KeyError):
        self.has, self.error = has, error

    def member_offset(self, t, m):
        if not self.has:
            raise self.error(f"{t}.{m}")
        return 0x9A8

    def sizeof(self, t):
        if not self.has:
            raise self.error(t)
        return 24


NEED = ("unwind_deferred_request", "unwind_deferred_task_work", "unwind_deferred_task_exit",
        "process_unwind_deferred", "unwind_user", "unwind_user_faultable", "perf_unwind_work")


def test_support_is_said_with_its_reason():
    there = (True, "unwind_deferred and perf's deferred callchains are there")
    assert deferred_support(Btf(True)) == there  # BTF alone (not booted yet)
    assert deferred_support(Btf(True), dict.fromkeys(NEED, 0xFFFFFFFF81000000)) == there
    for error in (KeyError, BtfLookupError):
        assert deferred_support(Btf(False, error)) == deferred_support(Btf(False, error), dict.fromkeys(NEED, 1)) == (
            False, "no deferred user unwinding: task_struct has no unwind_info in its BTF "
                   "(unwind_deferred is in 6.17+, perf's deferred callchains in 6.19+)")


def test_kallsyms_lacking_a_point_is_no_support_and_names_what_it_lacks():
    syms = dict.fromkeys(NEED, 1)
    del syms["unwind_user"], syms["perf_unwind_work"]
    assert deferred_support(Btf(True), syms) == (
        False, "no perf deferred callchains or unwind_deferred points: kallsyms lacks unwind_user, perf_unwind_work")
    assert deferred_support(Btf(True), {})[0] is False


# -- replay, renumber, the order of events ---------------------------------------------------------------


def test_replay_continues_the_kernels_per_cpu_counters():
    c = cookie(1, 0x41 + 2)
    events = [Event(0, "request", TASK, 100, 1, work=WORK, ret=0, cookie=c, task_id=c)]
    assert not replay(events, mainline(), TRACERS, {0: 0, 1: 0x41}).differences
    assert [d.what for d in replay(events, mainline(), TRACERS).differences] == ["request.cookie"]


def test_renumber_counts_from_zero_or_from_where_it_is_told():
    evs = [Event(9, "walk", TASK, 1, 0), Event(3, "walk", TASK, 1, 0)]
    assert [e.seq for e in renumber(evs)] == [0, 1]
    assert [e.seq for e in renumber(evs, 5)] == [5, 6]


def test_the_first_event_may_be_seq_0_and_none_before_it():
    ls = Lockstep(mainline(), TRACERS)
    with pytest.raises(LockstepError, match="events must come in order"):
        ls.feed(Event(-1, "walk", TASK, 1, 0))
    ls.feed(Event(0, "walk", TASK, 1, 0))


# -- which differences a profile names ---------------------------------------------------------------------


def test_the_kernels_own_profile_names_no_difference_whatever_expected_holds(monkeypatch):
    """Only a profile that is not the kernel's own (mainline unless told) has expected differences."""
    monkeypatch.setitem(compare.EXPECTED, "mainline", {"request.ret": "a reason"})
    monkeypatch.setitem(compare.EXPECTED_TEST, "mainline", {"request.ret": lambda k, m: True})
    for ls, named in ((Lockstep(mainline(), TRACERS), False),
                      (Lockstep(mainline(), TRACERS, kernel_profile="seed-v10"), True)):
        st = ls._task(Event(1, "request", TASK, 100, 0, work=WORK, ret=1))
        ls._compare(1, "request.ret", st, 1, 2)
        assert ls.summary.differences[0].expected == ("a reason" if named else "")
    ls = Lockstep(seed_v10(), TRACERS, kernel_profile="seed-v10")  # a v10 kernel against its own profile
    st = ls._task(Event(1, "request", TASK, 100, 0, work=WORK, ret=1))
    ls._compare(1, "request.ret", st, 1, 2)
    assert ls.summary.unexplained


def test_a_profile_without_named_differences_leaves_each_unexplained():
    ls = Lockstep(dataclasses.replace(mainline(), name="mainline-512"), TRACERS)
    st = ls._task(Event(1, "request", TASK, 100, 0, work=WORK, ret=1))
    assert not ls._compare(1, "request.ret", st, 1, 2)
    assert ls.summary.unexplained and ls.summary.profile == "mainline-512"
