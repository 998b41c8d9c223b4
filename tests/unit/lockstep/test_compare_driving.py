"""What harness/lockstep/compare.py hands the model: the same calls as the kernel made, for the same
task, on the same CPU, in the same context (issue 21: mutation testing found the CPU, the request's
context and the forked child's identity reaching the model held by no test).  The model's own log
(``DeferredModel.log``) is what shows it."""

from __future__ import annotations

import pytest

from harness.lockstep.compare import Event, Lockstep, LockstepError
from tests.support.lockstep_events import CHILD, TASK, TRACE, WORK, cookie, ev, feed


def model_log(ls: Lockstep, what: str) -> list[dict]:
    return [e for e in ls.model.log.events if e["ev"] == what]


def test_each_request_reaches_the_model_on_its_cpu_in_its_context():
    c0, c1 = cookie(0, 3), cookie(1, 3)
    ls, s = feed(ev("request", cpu=1, work=WORK, ret=0, cookie=c1, task_id=c1, context="nmi"),
                 ev("request", cpu=1, work=WORK, ret=1, cookie=c1, task_id=c1, context="syscall"),
                 ev("task_work", cpu=1, mask=5, trace=TRACE), ev("walk", cpu=1),
                 ev("callback", cpu=1, work=WORK, cookie=c1, trace=TRACE), ev("return", cpu=1),
                 ev("request", cpu=0, work=WORK, ret=0, cookie=c0, task_id=c0, context="irq"),
                 ev("task_work", cpu=0, mask=5, trace=TRACE), ev("walk", cpu=0),
                 ev("callback", cpu=0, work=WORK, cookie=c0, trace=TRACE), ev("return", cpu=0))
    assert not s.differences, [d.describe() for d in s.differences]
    assert [(r["cpu"], r["context"]) for r in model_log(ls, "request")] == [(1, "nmi"), (1, "syscall"), (0, "irq")]
    # each entry of the task begins on the CPU of its first event; the task is where it was seen last
    assert [(e["entry"], e["cpu"]) for e in model_log(ls, "enter")] == [(1, 1), (2, 0)]
    assert ls.tasks[TASK].model.cpu == 0


def test_a_task_that_moves_to_another_cpu_within_an_entry_is_followed():
    c = cookie(0, 3)
    ls, _ = feed(ev("request", cpu=0, work=WORK, ret=0, cookie=c, task_id=c), ev("task_work", cpu=1, mask=5, trace=TRACE))
    assert [e["cpu"] for e in model_log(ls, "enter")] == [0]
    assert ls.tasks[TASK].model.cpu == 1


def test_a_context_that_is_none_of_the_three_is_bad_input():
    with pytest.raises(LockstepError, match=r"^event 3: unknown context 'hardirq' \(known: nmi, irq, syscall\)$"):
        Event(3, "request", TASK, 100, 0, work=WORK, ret=0, context="hardirq")


def test_a_forked_child_is_a_task_of_its_own_named_at_its_first_event():
    """The child starts with no pid of its own (the fork event is the parent's) and the parent's
    comm; its first event names it.  A task the run had not seen takes pid and comm from its event,
    and an event without a comm keeps the one it had."""
    c = cookie(0, 3)
    ls, s = feed(ev("fork", child=CHILD))
    child = ls.tasks[CHILD]
    assert (child.pid, child.comm) == (0, "callchain") and child.model is not ls.tasks[TASK].model
    assert child.model.in_kernel and child.model.pid != ls.tasks[TASK].model.pid
    ls, s = feed(ev("fork", child=CHILD), ev("request", CHILD, work=WORK, ret=0, cookie=c, task_id=c),
                 ev("task_work", CHILD, mask=5, trace=TRACE), ev("return", CHILD, comm=""))
    child = ls.tasks[CHILD]
    assert (child.pid, child.comm) == (101, "callchain")
    assert s.differences and {d.pid for d in s.differences} == {101}  # no walk, no callback: differences of the child
    ls, _ = feed(ev("return", pid=7, comm="sh"))
    assert (ls.tasks[TASK].pid, ls.tasks[TASK].comm) == (7, "sh")
