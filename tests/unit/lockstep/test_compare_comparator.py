"""The comparator kernel-diff's "0 differences" rests on (harness/kernel/lockstep.py), pinned:
what is compared, that equal is counted only when equal, what a difference carries (kernel side
first), when a difference is named expected; and two comparisons mutation testing found unpinned
(issue 21): ``entry_walks`` against the model's count (not against itself) and ``task_work``
against whether the model had task work queued (not always true)."""

from __future__ import annotations

import pytest

from harness.deferred.profile import mainline, seed_v10
from harness.lockstep.compare import COMPARED, EXPECTED, Difference, Event, Lockstep
from tests.support.lockstep_events import TASK, TRACE, TRACERS, WORK, cookie, ev, feed


def entry(*middle: dict, c: int = cookie(0, 3)) -> list[dict]:
    """One kernel entry: a request returning 0, the task work with the walk and the callback."""
    return [ev("request", work=WORK, ret=0, cookie=c, task_id=c), ev("task_work", mask=5, trace=TRACE),
            *middle, ev("callback", work=WORK, cookie=c, trace=TRACE), ev("return", point="return_irq")]


def test_an_entry_as_the_model_does_it_is_every_item_compared_and_equal():
    _, s = feed(*entry(ev("walk")))
    assert not s.differences
    assert {w: s.compared[w] for w in COMPARED if s.compared[w]} == {
        "request.ret": 1, "request.cookie": 1, "task_work": 1, "walks": 1, "callbacks": 1, "trace": 1,
        "entry_walks": 1, "entry_callbacks": 1}
    assert s.equal == s.compared and s.n_equal == s.n_compared == 8


def test_a_second_walk_in_the_entry_differs_in_walks_and_in_entry_walks():
    _, s = feed(*entry(ev("walk"), ev("walk")))
    diffs = {d.what: (d.kernel, d.model) for d in s.differences}
    assert diffs == {"walks": (2, 1), "entry_walks": (2, 1)}
    assert s.compared["entry_walks"] == 1 and s.equal["entry_walks"] == 0


def test_a_walk_the_kernel_did_not_make_differs_in_entry_walks_too():
    _, s = feed(*entry())
    assert {d.what: (d.kernel, d.model) for d in s.differences} == {"walks": (0, 1), "entry_walks": (0, 1)}


def test_a_task_work_the_model_has_not_queued_is_a_difference():
    # no request in this entry: the model has no task work queued when the kernel runs one
    _, s = feed(ev("task_work", mask=0, trace=TRACE), ev("return", point="return_irq"))
    (d,) = s.differences
    assert (d.seq, d.what, d.pid, d.kernel, d.model, d.expected) == (1, "task_work", 100, True, False, "")
    assert s.compared["task_work"] == 1 and s.equal["task_work"] == 0


def test_a_difference_carries_the_event_the_task_both_sides_kernel_first():
    c = cookie(0, 3)
    _, s = feed(ev("request", work=WORK, ret=0, cookie=c + (2 << 32), task_id=c + (2 << 32)))
    (d,) = s.differences
    assert d == Difference(1, "request.cookie", 100, 1, c + (2 << 32), c, "")
    assert d.describe() == f"#1 pid 100 entry 1: request.cookie: kernel {c + (2 << 32):#x} | model {c:#x}  [UNEXPLAINED]"
    assert s.unexplained == [d] and s.expected == []
    assert (s.compared["request.ret"], s.equal["request.ret"]) == (1, 1)
    assert (s.compared["request.cookie"], s.equal["request.cookie"]) == (1, 0)


@pytest.mark.parametrize("kernel, model, equal", [
    (0, 0, True), (0, 1, False), (1, True, True),  # Python's ==: 1 == True, as the kernel's int and the model's
    ([("perf", 5)], [("perf", 5)], True), ([("perf", 5)], [("perf", 6)], False), ([], [("perf", 5)], False),
    ({"perf": 1}, {"perf": 1}, True), ({"perf": 1}, {"perf": 2}, False), ({"perf": 1}, {}, False),
    ([1, 2], [1, 2, 3], False), (None, 0, False),
])
def test_the_comparator_counts_equal_only_when_equal(kernel, model, equal):
    ls = Lockstep(mainline(), TRACERS)
    st = ls._task(Event(7, "walk", TASK, 100, 0))
    assert ls._compare(7, "trace", st, kernel, model) is equal
    s = ls.summary
    assert s.compared["trace"] == 1 and s.equal["trace"] == int(equal)
    assert s.differences == ([] if equal else [Difference(7, "trace", 100, st.model.entry, kernel, model, "")])


def test_a_difference_is_expected_only_under_a_control_profile_and_only_when_its_test_passes():
    reason = EXPECTED["seed-v10"]["request.ret"]
    for kernel, model, named in ((1, 2, True), (0, 2, False), (1, 0, False)):
        ls = Lockstep(seed_v10(), TRACERS)
        st = ls._task(Event(1, "request", TASK, 100, 0, work=WORK, ret=kernel))
        assert not ls._compare(1, "request.ret", st, kernel, model)
        (d,) = ls.summary.differences
        assert d.expected == (reason if named else ""), (kernel, model)
        assert (ls.summary.expected, ls.summary.unexplained) == (([d], []) if named else ([], [d]))
        assert d.describe().endswith(f"[expected ({reason})]" if named else "[UNEXPLAINED]")
    ls = Lockstep(mainline(), TRACERS)  # the kernel's own profile: nothing is expected
    st = ls._task(Event(1, "request", TASK, 100, 0, work=WORK, ret=1))
    ls._compare(1, "request.ret", st, 1, 2)
    assert ls.summary.differences[0].expected == ""
    # an item the control profile has no reason for stays unexplained under it
    ls = Lockstep(seed_v10(), TRACERS)
    st = ls._task(Event(1, "task_work", TASK, 100, 0))
    ls._compare(1, "task_work", st, True, False)
    assert ls.summary.unexplained and not ls.summary.expected


def test_seed_v10_cookies_are_named_and_an_entry_otherwise_equal():
    # the same mainline kernel events under the seed-v10 control: the cookie scheme differs (named),
    # nothing else does
    _, s = feed(*entry(ev("walk")), profile=seed_v10())
    assert s.differences and not s.unexplained
    assert {d.what for d in s.expected} == {"request.cookie", "callbacks"}
