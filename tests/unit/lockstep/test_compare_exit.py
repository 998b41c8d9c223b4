"""The comparator of harness/lockstep/compare.py at a task's exit and at a request's inputs:
rules mutmut found held by no test (issue 21).  An exit compares whether work was pending, and
the exit's walk and callbacks as a task work whenever either side had work pending; a missed
``exiting`` stop changes nothing; the request's inputs (a kernel thread, registers that are not
user mode) reach the model."""

from __future__ import annotations

from tests.support.lockstep_events import OTHER, TASK, WORK, cookie, ev, feed

EINVAL = -22


def exit_with_pending(task: int, c: int, exiting: bool = True) -> list[dict]:
    return [ev("request", task, work=WORK, ret=0, cookie=c, task_id=c),
            *([ev("exiting", task)] if exiting else []),
            ev("task_exit", task, mask=5, trace=(0x401000,)), ev("walk", task),
            ev("callback", task, work=WORK, cookie=c, trace=(0x401000,)), ev("task_exit_done", task)]


def test_an_exit_whose_exiting_stop_was_missed_is_judged_as_one_with_it():
    for exiting in (True, False):
        ls, s = feed(*exit_with_pending(TASK, cookie(0, 3), exiting))
        assert not s.differences, [d.describe() for d in s.differences]
        assert {w: s.compared[w] for w in ("exit_pending", "walks", "callbacks", "trace", "entry_walks")} == {
            "exit_pending": 1, "walks": 1, "callbacks": 1, "trace": 1, "entry_walks": 1}
        assert s.kernel["task_exit_pending"] == 1 and not ls.open_tasks()


def test_exits_with_work_pending_are_counted():
    _, s = feed(*exit_with_pending(TASK, cookie(0, 3)), *exit_with_pending(OTHER, cookie(0, 5)))
    assert not s.differences and s.kernel["task_exit_pending"] == 2
    _, s = feed(ev("exiting"), ev("task_exit", mask=0), ev("task_exit_done"))
    assert not s.differences and s.kernel["task_exit_pending"] == 0


def test_pending_work_the_model_does_not_have_is_compared_as_a_task_work_too():
    """The kernel ran process_unwind_deferred() (PENDING set) where the model has nothing pending:
    exit_pending differs, and the kernel's walk and callback are compared with the model's none."""
    c = cookie(0, 3)
    _, s = feed(ev("exiting"), ev("task_exit", mask=5, trace=(0x401000,)), ev("walk"),
                ev("callback", work=WORK, cookie=c, trace=(0x401000,)), ev("task_exit_done"))
    diffs = {d.what: (d.seq, d.kernel, d.model) for d in s.differences}
    assert diffs["exit_pending"] == (2, True, False)
    assert diffs["walks"] == (2, 1, 0) and diffs["callbacks"] == (2, [("perf", c)], [])
    assert diffs["entry_walks"] == (5, 1, 0)  # the entry ends at the exit's return


def test_a_kernel_threads_request_is_refused_and_one_after_its_exec_is_not():
    c = cookie(0, 3)
    _, s = feed(ev("request", work=WORK, ret=EINVAL, cookie=0, kthread=True),
                ev("request", work=WORK, ret=0, cookie=c, task_id=c))
    assert not s.differences, [d.describe() for d in s.differences]
    assert s.requests_by_ret == {EINVAL: 1, 0: 1}


def test_a_request_whose_saved_registers_are_not_user_mode_is_refused():
    _, s = feed(ev("request", work=WORK, ret=EINVAL, cookie=0, user_mode=False))
    assert not s.differences, [d.describe() for d in s.differences]
    _, s = feed(ev("request", work=WORK, ret=0, cookie=cookie(0, 3), user_mode=False))
    assert [(d.what, d.kernel, d.model) for d in s.differences][0] == ("request.ret", 0, EINVAL)


def test_a_request_of_a_tracer_not_registered_is_noted_by_its_address():
    _, s = feed(ev("request", work=0xFFFFFFFF8BAD0000, ret=0, cookie=cookie(0, 3)))
    assert s.n_compared == 0
    assert s.notes == ["#1: a request of unregistered work 0xffffffff8bad0000, not compared"]


def test_a_task_works_differences_carry_its_seq_and_a_callback_without_walk_is_a_reused_cache():
    c = cookie(0, 3)
    _, s = feed(ev("request", work=WORK, ret=0, cookie=c, task_id=c), ev("task_work", mask=5, trace=(1, 2)),
                ev("callback", work=WORK, cookie=c + 1, trace=(1, 3)), ev("return", point="return_irq"),
                ev("request", work=WORK, ret=0, cookie=cookie(0, 4), task_id=cookie(0, 4)),
                ev("task_work", mask=5, trace=(1, 2)),
                ev("callback", work=WORK, cookie=cookie(0, 4), trace=(1, 2)), ev("return", point="return_irq"))
    diffs = [(d.seq, d.what) for d in s.differences]
    assert diffs[:3] == [(2, "walks"), (2, "callbacks"), (2, "trace")]
    assert s.kernel["cache_reused"] == 2


def test_every_expected_difference_has_its_test():
    """A name without a test would make the default test decide; there is none to decide."""
    from harness.lockstep.compare import EXPECTED, EXPECTED_TEST
    assert {p: set(v) for p, v in EXPECTED.items()} == {p: set(v) for p, v in EXPECTED_TEST.items()}
