"""The model's event log: one JSON object per line (JSONL), flushed as written.

Every line has ``"ev"`` (the event name) and ``"seq"`` (its 1-based line number).  The first line is
a ``header`` naming the profile, so the checker (``check.py``) can replay a log offline with the
revision's rules.  Events and their fields:

=================  =====================================================================
``header``         profile, word_bits, max_entries, version
``init``           tracer, bit, ret                       (``unwind_deferred_init``)
``cancel``         tracer, bit        list_del + bit = -1 (``unwind_deferred_cancel`` begins)
``cancel_done``    tracer             after synchronize_srcu and clearing every task's bit
``task``           task, flags        a task the model knows from the start (or a kthread)
``fork``           task (the parent), child               (``copy_process`` -> ``unwind_task_init``)
``enter``          task, entry, how   the task entered the kernel from user space
``request``        tracer, task, entry, epoch, cpu, context, user_mode, ret, cookie
``walk``           task, entry, epoch, nr, truncated, trace_hash, trace   (an actual unwind)
``trace``          task, entry, epoch, ret, nr, cached, trace_hash        (direct faultable walk)
``task_work``      task, entry, epoch, bits, cookie       (``process_unwind_deferred`` starts)
``callback``       tracer, task, entry, epoch, cookie, nr, trace_hash
``callback_done``  tracer, task
``reset``          task, entry, epoch, cleared            (``unwind_reset_info``)
``return_to_user`` task, entry
``exit``           task, entry            PF_EXITING set   (``do_exit``)
``exit_done``      task                   mm gone, cache freed
=================  =====================================================================

``epoch`` counts the task's stretches between two resets that cleared the unwind state.  It equals
the kernel entry except when ``unwind_reset_info()`` found PENDING set (a request from an NMI after
the task work ran) and kept the state, cookie and cache, for the next entry.
"""

from __future__ import annotations

import hashlib
import json
from ..errors import HarnessError
from typing import IO, Iterable, Iterator

LOG_VERSION = 1


class LogFormatError(HarnessError):
    """A log line that is not a well-formed event; names the line."""

    def __init__(self, line_no: int, message: str, text: str = ""):
        self.line_no = line_no
        self.text = text
        super().__init__(f"line {line_no}: {message}" + (f": {text[:120]!r}" if text else ""))


def trace_hash(trace: Iterable[int]) -> str:
    """A short stable digest of a user stack (list of return addresses)."""
    h = hashlib.sha1()
    for ip in trace:
        h.update(int(ip).to_bytes(8, "little", signed=False))
    return h.hexdigest()[:16]


class EventLog:
    """Writes events as JSON lines to ``fp`` and flushes each one; keeps them in memory too."""

    def __init__(self, fp: IO[str] | None = None, keep: bool = True):
        self.fp = fp
        self.keep = keep
        self.events: list[dict] = []
        self.seq = 0

    def emit(self, ev: str, **fields) -> dict:
        self.seq += 1
        event = {"seq": self.seq, "ev": ev, **fields}
        if self.fp is not None:
            self.fp.write(json.dumps(event, separators=(",", ":")) + "\n")
            self.fp.flush()
        if self.keep:
            self.events.append(event)
        return event


# Required fields per event (beyond "ev"), checked when a log is read back.
REQUIRED: dict[str, tuple[str, ...]] = {
    "header": ("profile",),
    "init": ("tracer", "bit", "ret"),
    "cancel": ("tracer",),
    "cancel_done": ("tracer",),
    "task": ("task",),
    "fork": ("task", "child"),
    "enter": ("task", "entry"),
    "request": ("tracer", "task", "entry", "epoch", "ret", "cookie"),
    "walk": ("task", "entry", "epoch", "nr", "trace_hash"),
    "trace": ("task", "entry", "epoch", "ret"),
    "task_work": ("task", "entry", "epoch"),
    "callback": ("tracer", "task", "entry", "epoch", "cookie", "trace_hash"),
    "callback_done": ("tracer", "task"),
    "reset": ("task", "entry", "epoch", "cleared"),
    "return_to_user": ("task", "entry"),
    "exit": ("task", "entry"),
    "exit_done": ("task",),
}

_INT_FIELDS = ("bit", "ret", "task", "child", "entry", "epoch", "cookie", "nr", "cpu")


def parse_line(line_no: int, text: str) -> dict:
    """Parse and validate one JSONL line; raise :class:`LogFormatError` naming the line."""
    try:
        event = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LogFormatError(line_no, f"not JSON ({exc.msg})", text) from exc
    if not isinstance(event, dict):
        raise LogFormatError(line_no, "not a JSON object", text)
    ev = event.get("ev")
    if ev not in REQUIRED:
        raise LogFormatError(line_no, f"unknown or missing event name {ev!r}", text)
    missing = [f for f in REQUIRED[ev] if f not in event]
    if missing:
        raise LogFormatError(line_no, f"{ev} event lacks field(s) {', '.join(missing)}", text)
    for f in _INT_FIELDS:
        if f in event and (not isinstance(event[f], int) or isinstance(event[f], bool)):
            raise LogFormatError(line_no, f"{ev} field {f!r} must be an integer, not {event[f]!r}", text)
    event["line"] = line_no
    return event


def read_events(lines: Iterable[str]) -> Iterator[dict]:
    """Parse JSONL text lines (blank lines are skipped but counted)."""
    for line_no, text in enumerate(lines, 1):
        if text.strip():
            yield parse_line(line_no, text)
