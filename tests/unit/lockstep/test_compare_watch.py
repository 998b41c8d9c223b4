"""Which tasks the live driver must watch returning to user space (``Lockstep.open_tasks``: the
return-to-user breakpoints are armed while it is not empty; ``wants_return``: whether one task's
return is an event): a task is open while it owes the model an event, each reason on its own
(issue 21: mutation testing found these reached by no selected test; a task left out would have its
reset missed, and the next entry's cookie and return value judged against stale state)."""

from __future__ import annotations

import pytest

from harness.deferred.profile import mainline
from harness.lockstep.compare import Event, Lockstep
from tests.support.lockstep_events import OTHER, TASK, TRACERS, WORK, cookie


def fresh(*tasks: int) -> Lockstep:
    ls = Lockstep(mainline(), TRACERS, {0: 0})
    for addr in tasks:
        ls._task(Event(0, "walk", addr, 100, 0))
    return ls


def _gen():
    yield "irqs_off"


OWES = {  # one reason each, on a task that has nothing else
    "unwind_mask": lambda st: setattr(st.model.info, "unwind_mask", 4),
    "id": lambda st: setattr(st.model.info, "id_cpu", 1),
    "timestamp (v10)": lambda st: setattr(st.model.info, "timestamp", 1_000_000),
    "task work queued": lambda st: setattr(st.model, "task_work_queued", 1),
    "a task work of ours in progress": lambda st: setattr(st, "work", object()),
    "a return to user suspended": lambda st: setattr(st, "return_gen", _gen()),
    "an exit under way": lambda st: setattr(st, "exit_gen", _gen()),
}


def test_a_task_with_nothing_owed_is_not_open():
    ls = fresh(TASK)
    assert ls.open_tasks() == [] and not ls.wants_return(TASK)
    assert not ls.wants_return(OTHER)  # a task the run has not seen


@pytest.mark.parametrize("reason", OWES)
def test_a_task_that_owes_the_model_an_event_is_open_whatever_the_reason(reason):
    ls = fresh(TASK, OTHER)
    OWES[reason](ls.tasks[OTHER])
    assert ls.open_tasks() == [OTHER]
    assert ls.wants_return(OTHER) and not ls.wants_return(TASK)


@pytest.mark.parametrize("reason", OWES)
def test_a_dead_task_is_never_open_and_the_tasks_after_it_still_are(reason):
    ls = fresh(TASK, OTHER)
    OWES[reason](ls.tasks[TASK])
    OWES[reason](ls.tasks[OTHER])
    ls.tasks[TASK].model.dead = True
    assert ls.open_tasks() == [OTHER]
    assert not ls.wants_return(TASK) and ls.wants_return(OTHER)


def test_an_entry_with_something_of_ours_wants_its_return_even_with_nothing_owed():
    """The entry's walks and callbacks are compared at its return: after the reset nothing is
    owed, but the return must still be seen."""
    ls = fresh(TASK)
    ls.tasks[TASK].entry_active = True
    assert ls.open_tasks() == [] and ls.wants_return(TASK)


def test_open_and_closed_along_an_entry():
    c = cookie(0, 3)
    ls = Lockstep(mainline(), TRACERS, {0: 0})
    seen = []
    for seq, (kind, kw) in enumerate([("request", {"work": WORK, "ret": 0, "cookie": c, "task_id": c}),
                                      ("task_work", {"mask": 5, "trace": (1,)}), ("walk", {}),
                                      ("callback", {"work": WORK, "cookie": c, "trace": (1,)}), ("return", {})]):
        ls.feed(Event(seq, kind, TASK, 100, 0, **kw))
        seen.append((ls.open_tasks(), ls.wants_return(TASK)))
    assert seen == [([TASK], True)] * 4 + [([], False)]
