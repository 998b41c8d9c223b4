"""What harness/lockstep/compare.py records besides the compared items: where one side did what the
other did not (the model walking where the kernel made no walk of ours, a kernel walk or callback
outside a task work of ours, an entry still open at the end), the kernel's own totals, and the seq
each difference is reported at (issue 21: mutation testing found these held by no test: the notes
and counters could have said anything)."""

from __future__ import annotations

from harness.deferred.profile import seed_v10
from tests.support.lockstep_events import TASK, TRACE, WORK, cookie, ev, feed

OTHER_WORK = 0xFFFFFFFF82A0C000

NO_WALK_OF_OURS = ("the model walked pid {} where the kernel made no walk of ours (no registers were read there): "
                   "an empty trace")


C = cookie(0, 3)


def request(ret: int = 0, work: int = WORK, c: int = C, **kw) -> dict:
    return ev("request", work=work, ret=ret, cookie=c, task_id=c, **kw)


def whats(s) -> dict:
    return {d.what: (d.seq, d.kernel, d.model) for d in s.differences}


# -- the model's side without the kernel's ------------------------------------------------------------


def test_a_task_work_only_the_model_ran_walks_an_empty_trace_and_is_compared_per_entry():
    """The kernel returned to user space without running the task work the model had queued: the
    model runs it at the return, walking where no registers of ours were read (an empty trace,
    noted); its walk and callback count in the entry's totals."""
    ls, s = feed(request(), ev("return", point="return_irq"))
    assert whats(s) == {"entry_walks": (2, 0, 1), "entry_callbacks": (2, {}, {"perf": 1})}
    assert s.notes == [NO_WALK_OF_OURS.format(ls.tasks[TASK].model.pid)]
    assert [d.trace for d in ls.model.deliveries] == [()]


def test_our_walk_belongs_to_its_entry_not_to_the_next():
    ls, s = feed(request(), ev("task_work", mask=5, trace=TRACE), ev("walk"),
                 ev("callback", work=WORK, cookie=C, trace=TRACE), ev("return"),
                 request(c=cookie(0, 5)), ev("return"))
    assert [d.trace for d in ls.model.deliveries] == [TRACE, ()]
    assert s.notes == [NO_WALK_OF_OURS.format(ls.tasks[TASK].model.pid)]
    assert set(whats(s)) == {"entry_walks", "entry_callbacks"}  # of the second entry only
    assert {d.seq for d in s.differences} == {7}


def test_a_task_work_whose_walk_we_could_not_make_gives_the_model_an_empty_trace_noted():
    ls, s = feed(request(), ev("task_work", mask=5, trace=TRACE, walk_error="no user registers"), ev("walk"),
                 ev("callback", work=WORK, cookie=C, trace=TRACE), ev("return"))
    assert [d.trace for d in ls.model.deliveries] == [()]
    assert s.notes == [NO_WALK_OF_OURS.format(ls.tasks[TASK].model.pid)]
    assert whats(s) == {"trace": (2, list(TRACE), [])}


def test_an_empty_walk_is_not_reused_a_second_task_work_in_the_entry_walks_again():
    """Two tracers, the first walk empty (nr_entries 0 is no cache): the second tracer's task work
    walks again, on both sides; the entry has two walks each."""
    tracers = {WORK: "perf", OTHER_WORK: "other"}
    _, s = feed(request(), ev("task_work", mask=5, trace=()), ev("walk"), ev("callback", work=WORK, cookie=C, trace=()),
                request(work=OTHER_WORK), ev("task_work", mask=7, trace=()), ev("walk"),
                ev("callback", work=OTHER_WORK, cookie=C, trace=()), ev("return"), tracers=tracers)
    assert not s.differences, [d.describe() for d in s.differences]
    assert (s.compared["walks"], s.compared["entry_walks"], s.equal["entry_walks"]) == (2, 1, 1)
    _, s = feed(request(), ev("task_work", mask=5, trace=()), ev("walk"), ev("callback", work=WORK, cookie=C, trace=()),
                request(work=OTHER_WORK), ev("task_work", mask=7, trace=()),
                ev("callback", work=OTHER_WORK, cookie=C, trace=()), ev("return"), tracers=tracers)
    assert whats(s) == {"walks": (6, 0, 1), "entry_walks": (8, 1, 2)}


def test_seed_v10_calls_a_tracer_twice_in_an_entry_and_the_model_counts_both():
    """v10's claim replaces the mask, dropping the bits of tracers already called: a request of
    perf after other's request queues perf again in the same entry.  Kernel events that do what v10
    does agree with the model under seed-v10, both calls of perf counted."""
    tracers = {WORK: "perf", OTHER_WORK: "other"}
    t = 1_000_000  # the model's first timestamp
    _, s = feed(request(c=t), ev("task_work", mask=5, trace=TRACE), ev("walk"),
                ev("callback", work=WORK, cookie=t, trace=TRACE),
                request(work=OTHER_WORK, c=t), request(c=t), ev("task_work", mask=7, trace=TRACE),
                ev("callback", work=OTHER_WORK, cookie=t, trace=TRACE), ev("callback", work=WORK, cookie=t, trace=TRACE),
                ev("return"), profile=seed_v10(), tracers=tracers)
    assert not s.differences, [d.describe() for d in s.differences]
    assert s.equal["entry_callbacks"] == 1
    assert s.notes == ["#10: pid 100: the kernel called perf 2 times in one entry"]


# -- the kernel's side without the model's ----------------------------------------------------------


def test_a_kernel_walk_or_callback_outside_a_task_work_of_ours_is_noted_and_counted_for_the_entry():
    _, s = feed(request(), ev("walk"), ev("callback", work=WORK, cookie=C, trace=TRACE), ev("return"))
    assert s.notes[:2] == ["#2: pid 100: unwind_user() outside a task work of ours",
                           "#3: pid 100: a callback outside a task work of ours"]
    assert "walks" not in s.compared and s.equal["entry_walks"] == 1 and s.equal["entry_callbacks"] == 1


def test_an_entry_the_kernel_had_walked_in_and_was_still_open_at_the_end_is_noted():
    for tail, noted in (([ev("walk")], True), ([ev("walk"), ev("callback", work=WORK, cookie=C, trace=TRACE)], True),
                        ([], False), ([ev("walk"), ev("callback", work=WORK, cookie=C, trace=TRACE), ev("return")], False)):
        _, s = feed(request(), ev("task_work", mask=5, trace=TRACE), *tail)
        assert s.notes == (["pid 100: its last entry was still open at the end (not compared)"] if noted else []), tail
        assert "entry_walks" in s.compared or noted or not tail


def test_one_callback_per_tracer_in_an_entry_is_no_note():
    _, s = feed(request(), ev("task_work", mask=5, trace=TRACE), ev("walk"),
                ev("callback", work=WORK, cookie=C, trace=TRACE), ev("return"))
    assert not s.differences and s.notes == []


def test_a_cookie_the_task_does_not_hold_is_noted_for_a_request_that_got_one():
    """task->unwind_info.id after the request is the cookie handed back (ret 0 or 1); a request
    that failed (ret < 0) got none, whatever the id holds."""
    other = cookie(0, 5)
    for ret, c, task_id, noted in ((0, C, other, True), (1, C, other, True), (0, C, C, False), (1, C, C, False),
                                   (-22, 0, other, False)):
        _, s = feed(ev("request", work=WORK, ret=ret, cookie=c, task_id=task_id))
        assert s.notes == ([f"#1: pid 100: the kernel returned cookie {C:#x} but task->unwind_info.id is {other:#x}"]
                           if noted else []), (ret, c, task_id)


# -- the kernel's totals --------------------------------------------------------------------------------


def test_task_works_that_found_the_cache_valid_are_counted():
    _, s = feed(request(), ev("task_work", mask=5, trace=TRACE, cache_nr=2), ev("return"),
                request(c=cookie(0, 5)), ev("task_work", mask=5, trace=TRACE, cache_nr=3), ev("return"),
                request(c=cookie(0, 7)), ev("task_work", mask=5, trace=TRACE, cache_nr=0), ev("return"),
                request(c=cookie(0, 9)), ev("task_work", mask=5, trace=TRACE), ev("return"))
    assert s.kernel["cache_valid_at_task_work"] == 2 and s.kernel["task_work"] == 4


def test_a_task_work_with_neither_walk_nor_callback_is_no_reused_cache():
    _, s = feed(request(), ev("task_work", mask=5, trace=TRACE), ev("return"))
    assert s.kernel["cache_reused"] == 0 and whats(s)["walks"] == (2, 0, 1)


# -- where a difference is reported ---------------------------------------------------------------------


def test_each_difference_is_reported_at_its_event():
    """A request's at the request, a task work's at the task work, an entry's at its return."""
    _, s = feed(ev("return"), request(ret=1), ev("task_work", mask=5, trace=TRACE), ev("walk"),
                ev("callback", work=WORK, cookie=C + 1, trace=TRACE), ev("return"))
    assert [(d.seq, d.what) for d in s.differences] == [(2, "request.ret"), (3, "callbacks")]
    _, s = feed(request(), ev("task_work", mask=5, trace=TRACE), ev("walk"), ev("walk"),
                ev("callback", work=WORK, cookie=C, trace=TRACE), ev("callback", work=WORK, cookie=C, trace=TRACE),
                ev("return"))
    assert [(d.seq, d.what) for d in s.differences] == [(2, "walks"), (2, "callbacks"), (7, "entry_walks"),
                                                         (7, "entry_callbacks")]
