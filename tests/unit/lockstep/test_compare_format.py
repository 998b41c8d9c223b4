"""The event file of harness kernel-diff (``Event.to_dict``/``from_dict``: one JSON line per event,
``--replay`` reads it back): what a line holds, that every event comes back as it was written, and
what a malformed line says (issue 21: mutation testing found the format held by no test of its own,
and a request whose saved registers were not user mode written without them: replayed as a user-mode
request, a spurious difference)."""

from __future__ import annotations

import json

import pytest

from harness.deferred.profile import mainline
from harness.lockstep.compare import EVENT_KINDS, Event, LockstepError, replay

TASK, WORK = 0xFFFF888003A1C000, 0xFFFFFFFF82A0B000
EINVAL = -22


def line(ev: Event) -> dict:
    """The event as the event file holds it (through JSON, as the driver writes it)."""
    return json.loads(json.dumps(ev.to_dict()))


def test_a_line_holds_the_identity_of_its_event_always_and_other_fields_when_not_their_default():
    # seq, kind, task, pid, cpu and ret are written even when 0 or None; nothing else at its default
    assert line(Event(0, "walk", 0, 0, 0)) == {"seq": 0, "kind": "walk", "task": 0, "pid": 0, "cpu": 0, "ret": None}
    full = Event(5, "request", TASK, 100, 1, "prog", work=WORK, ret=1, cookie=7, task_id=7, mask=1, cache_nr=0,
                 context="nmi", user_mode=False, kthread=True, trace=(1, 2), walk_error="no mm", child=9,
                 point="return_irq")
    assert line(full) == {"seq": 5, "kind": "request", "task": TASK, "pid": 100, "cpu": 1, "comm": "prog",
                          "work": WORK, "ret": 1, "cookie": 7, "task_id": 7, "mask": 1, "cache_nr": 0,
                          "context": "nmi", "user_mode": False, "kthread": True, "trace": [1, 2],
                          "walk_error": "no mm", "child": 9, "point": "return_irq"}
    assert Event.from_dict(line(full)) == full


@pytest.mark.parametrize("changed", [
    {"comm": "prog"}, {"work": WORK}, {"ret": 0}, {"ret": EINVAL}, {"cookie": 1}, {"task_id": 1}, {"mask": 1},
    {"cache_nr": 0}, {"cache_nr": 1}, {"context": "nmi"}, {"context": "syscall"}, {"user_mode": False},
    {"kthread": True}, {"trace": (0x401000,)}, {"walk_error": "x"}, {"child": 1}, {"point": "return_irq"},
], ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()))
def test_every_field_comes_back_as_it_was_written(changed):
    kind = "request" if "ret" in changed else "task_work"
    ev = Event(3, kind, TASK, 100, 1, **({"ret": 0} if kind == "request" else {}) | changed)
    assert Event.from_dict(line(ev)) == ev


def test_a_request_refused_for_its_registers_replays_as_it_ran():
    """user_mode False (the task's saved registers are not user mode): the kernel and the model
    both refuse the request; the event file must say so, or its replay judges a user-mode request."""
    ev = Event(1, "request", TASK, 100, 0, work=WORK, ret=EINVAL, cookie=0, user_mode=False)
    live = replay([ev], mainline(), {WORK: "perf"})
    replayed = replay([Event.from_dict(line(ev))], mainline(), {WORK: "perf"})
    assert not live.differences and not replayed.differences, [d.describe() for d in replayed.differences]


def test_a_trace_comes_back_as_a_tuple_of_ints():
    ev = Event.from_dict({"seq": 1, "kind": "callback", "task": TASK, "pid": 1, "cpu": 0, "trace": [4198400, 4198656]})
    assert ev.trace == (0x401000, 0x401100) and isinstance(ev.trace, tuple)


def test_a_malformed_line_is_named_by_its_seq_or_a_question_mark():
    with pytest.raises(LockstepError, match=r"^event 7: unknown fields \['colour', 'size'\]$"):
        Event.from_dict({"seq": 7, "kind": "walk", "task": 1, "pid": 1, "cpu": 0, "colour": 3, "size": 1})
    with pytest.raises(LockstepError, match=r"^event \?: unknown fields \['colour'\]$"):
        Event.from_dict({"kind": "walk", "task": 1, "pid": 1, "cpu": 0, "colour": 3})
    with pytest.raises(LockstepError, match=r"^event 7: .*missing .*'task'") as exc:
        Event.from_dict({"seq": 7, "kind": "walk", "pid": 1, "cpu": 0})
    assert isinstance(exc.value.__cause__, TypeError)
    with pytest.raises(LockstepError, match=r"^event \?: .*missing .*'seq'"):
        Event.from_dict({"kind": "walk", "task": 1, "pid": 1, "cpu": 0})


def test_an_unknown_kind_is_named_with_the_known_ones():
    with pytest.raises(LockstepError) as exc:
        Event(4, "nmi", TASK, 1, 0)
    assert str(exc.value) == f"event 4: unknown kind 'nmi' (known: {', '.join(EVENT_KINDS)})"
    assert ", ".join(EVENT_KINDS).startswith("request, task_work, walk, callback, return")
