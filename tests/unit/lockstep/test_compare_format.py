"""The event file of harness kernel-diff (``Event.to_dict``/``from_dict``: one JSON line per event,
``--replay`` reads it back): what a line holds, that every event comes back as it was written, and
what a malformed line says (issue 21: mutation testing found the format held by no test of its own,
and a request whose saved registers were not user mode written without them: replayed as a user-mode
request, a spurious difference)."""

from __future__ import annotations

import json

import pytest

from harness.deferred.profile import mainline
from harness.lockstep.compare import Event, replay

TASK, WORK = 0xFFFF888003A1C000, 0xFFFFFFFF82A0B000
EINVAL = -22


def line(ev: Event) -> dict:
    """The event as the event file holds it (through JSON, as the driver writes it)."""
    return json.loads(json.dumps(ev.to_dict()))


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
