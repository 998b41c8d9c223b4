"""Hand-made kernel events for the comparator's tests (tests/unit/lockstep/test_compare_*.py):
the task, the perf tracer's unwind work, cookies as unwind_deferred makes them, one event, and a
comparator fed a sequence of them."""

from __future__ import annotations

from harness.deferred.profile import mainline
from harness.lockstep.compare import Event, Lockstep

__all__ = ["CHILD", "OTHER", "TASK", "TRACE", "TRACERS", "WORK", "cookie", "ev", "feed"]

TASK, CHILD, OTHER = 0xFFFF888003A1C000, 0xFFFF888003A24000, 0xFFFF888003A20000  # task_structs
WORK = 0xFFFFFFFF82A0B000  # the tracer's struct unwind_work
TRACERS = {WORK: "perf"}
TRACE = (0x401136, 0x401182)


def cookie(cpu: int, cnt: int) -> int:
    """unwind_deferred's cookie: the per-CPU count above, the CPU + 1 below."""
    return (cnt << 32) | (cpu + 1)


def ev(kind: str, task: int = TASK, **kw) -> dict:
    """One event's fields: of TASK (pid 100) or, another task given, of pid 101."""
    return {"kind": kind, "task": task, "pid": 100 if task == TASK else 101, "cpu": 0, "comm": "callchain", **kw}


def feed(*events: dict, profile=None, tracers=TRACERS):
    """A comparator (mainline unless ``profile``) fed ``events`` in order, and its summary."""
    ls = Lockstep(profile or mainline(), tracers, {0: 0, 1: 0})
    for seq, e in enumerate(events, 1):
        ls.feed(Event(seq, **e))
    return ls, ls.finish()
