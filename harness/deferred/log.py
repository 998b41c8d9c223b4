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
``stack``          task, entry, frames, verdicts [epoch, cookie, point, comm, own, regs, request,
                   unwinder, stops]                a user stack delivered to a deferred callback, with the
                                         oracles' verdicts on it (below)
``end``            reason, stacks [failures, causes, requests, errors]   the log's last line
=================  =====================================================================

(Fields in brackets are optional.)  A ``stack`` record::

    {"seq": N, "ev": "stack", "task": PID, "entry": E, "epoch": P, "cookie": C,
     "point": "return_irq", "comm": "callchain-fp-sta", "own": "main" | "thread" | "child" | null,
     "regs": {"ip": INT, "sp": INT, "bp": INT},
     "request": {"where": "user mode" | KERNEL SYMBOL, "window": ENTRY ASM SYMBOL | null,
                 "syscall": INT | null, "regs": {"ip": INT, "sp": INT, "bp": INT}},
     "unwinder": "fp" | "sframe",
     "frames": {"fp": [[ADDR, "MODULE", "SYM+OFF"], ...], "cfi": [...], "shadow": [...], ...},
     "stops": {"fp": "fp < sp (fp=0x0 sp=0x7ffe...)", "cfi": "end of chain"},
     "verdicts": [{"unwinder": "fp", "oracle": "cfi",
                   "verdict": "agree" | "explained" | "failure" | "not checked",
                   "reason": "why not checked",
                   "divergences": [{"kind": "lost" | "extra" | "ends" | "past_end" | "differs" | "regs",
                                    "got_index": I, "want_index": J, "cause": "cause-name" | null,
                                    "evidence": {...}, "text": "one line"}]}]}

``frames`` maps the unwinder's name (``unwinder``) and each oracle's name to its frames: address
(int), module basename (``""`` if unknown), ``"symbol+0xoff"`` (``""`` if unknown).  ``entry`` and
``epoch`` are the task's counters as in its other events; ``cookie`` is the cookie delivered.  A
verdict is ``"failure"`` when some divergence has cause null (no known cause explains it), or,
with no divergence, when something else failed (``reason`` says what).  In a
verdict, ``unwinder``, ``oracle``, ``verdict`` are required; ``reason`` (a string) and
``divergences`` (a list, default empty) are optional.  In a divergence, ``kind``, ``cause`` and
``text`` are required; ``got_index``/``want_index`` (int or null) and ``evidence`` (an object) are
optional.

The ``end`` record::

    {"seq": N, "ev": "end", "reason": "complete" | "error" | "interrupted", "stacks": N,
     "failures": N, "causes": {"cause-name": COUNT, ...}, "requests": N, "errors": ["...", ...]}

``stacks`` counts the log's ``stack`` records, ``failures`` those with at least one ``"failure"``
verdict, ``causes`` the divergences each cause explained over the whole log
(:func:`stack_counts` computes them from the records).  A log without ``end`` as its last line was
cut short (the writer died, or the file was copied while being written).

``epoch`` counts the task's stretches between two resets that cleared the unwind state.  It equals
the kernel entry except when ``unwind_reset_info()`` found PENDING set (a request from an NMI after
the task work ran) and kept the state, cookie and cache, for the next entry.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from ..errors import EXIT_INFRA, EXIT_USAGE, HarnessError
from ..verdicts.types import KINDS as DIVERGENCE_KINDS
from ..verdicts.types import VERDICTS

LOG_VERSION = 1


class LogFormatError(HarnessError):
    """A log line that is not a well-formed event; names the line."""

    exit_code = EXIT_USAGE  # bad input

    def __init__(self, line_no: int, message: str, text: str = ""):
        self.line_no = line_no
        self.text = text
        super().__init__(f"line {line_no}: {message}" + (f": {text[:120]!r}" if text else ""))


class LogWriteError(HarnessError):
    """A log line could not be written (a full disk, a failing device): the log keeps its whole
    lines before it and nothing after (the error names the file and how many lines it keeps)."""

    exit_code = EXIT_INFRA  # infrastructure


class JsonlFile:
    """A JSONL log file that holds whole lines only, whatever happens to the disk.

    :class:`EventLog` writes each record as one ``write()`` call.  Each call goes to the file
    with ``os.write`` (unbuffered: nothing waits in a buffer to be lost or half-written at
    close); when the disk refuses part of it (``ENOSPC`` after a short write), the file is cut
    back to the end of the last whole line and :class:`LogWriteError` is raised.  From then on
    every write raises the same error without writing, so the file stays a valid prefix of the
    log (no ``end`` record: a reader sees it was cut).  A text file from ``open()`` would keep a
    half line on a full disk and raise again at ``close()``.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.size = 0  # bytes of whole lines in the file
        self.lines = 0
        self.failed: LogWriteError | None = None

    def write(self, text: str) -> int:
        if self.failed is not None:
            raise self.failed
        if self.fd is None:
            raise ValueError(f"{self.path}: write to a closed log")
        data = text.encode()
        done = 0
        try:
            while done < len(data):
                done += os.write(self.fd, data[done:])
        except OSError as exc:
            try:
                os.ftruncate(self.fd, self.size)
                os.lseek(self.fd, self.size, os.SEEK_SET)
                kept = f"it keeps its first {self.lines} whole line(s)"
            except OSError as cut:
                kept = f"cutting it back to its last whole line failed too ({cut.strerror})"
            self.failed = LogWriteError(f"cannot write {self.path}: {exc.strerror or exc}; {kept}")
            raise self.failed from exc
        self.size += len(data)
        self.lines += text.count("\n")
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered: each :meth:`write` is in the file when it returns."""

    @property
    def closed(self) -> bool:
        return self.fd is None

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def __enter__(self) -> JsonlFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def trace_hash(trace: Iterable[int]) -> str:
    """A short stable digest of a user stack (list of return addresses)."""
    h = hashlib.sha1()
    for ip in trace:
        h.update(int(ip).to_bytes(8, "little", signed=False))
    return h.hexdigest()[:16]


class EventLog:
    """Writes events as JSON lines to ``fp`` and flushes each one; keeps them in memory too.

    It counts the ``stack`` records it writes, so that :meth:`end` writes the ``end`` record's
    counts (even with ``keep=False``)."""

    def __init__(self, fp: IO[str] | None = None, keep: bool = True):
        self.fp = fp
        self.keep = keep
        self.events: list[dict] = []
        self.seq = 0
        self.stacks = 0
        self.failures = 0
        self.causes: Counter[str] = Counter()

    def emit(self, ev: str, **fields) -> dict:
        self.seq += 1
        event = {"seq": self.seq, "ev": ev, **fields}
        if self.fp is not None:
            self.fp.write(json.dumps(event, separators=(",", ":")) + "\n")
            self.fp.flush()
        if self.keep:
            self.events.append(event)
        if ev == "stack":
            self.stacks += 1
            self.failures += stack_failed(event)
            self.causes.update(stack_causes(event))
        return event

    def end(self, reason: str = "complete", *, requests: int | None = None, errors: Iterable[str] = ()) -> dict:
        """Write the ``end`` record (``reason``: complete, error or interrupted) with the counts of
        the ``stack`` records written so far; it must be the log's last line."""
        if reason not in END_REASONS:
            raise ValueError(f"end reason must be one of {END_REASONS}, not {reason!r}")
        fields: dict = {"reason": reason, "stacks": self.stacks, "failures": self.failures,
                        "causes": dict(sorted(self.causes.items()))}
        if requests is not None:
            fields["requests"] = requests
        fields["errors"] = [str(x) for x in errors]
        return self.emit("end", **fields)


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
    "stack": ("task", "entry", "frames", "verdicts"),
    "end": ("reason", "stacks"),
}

END_REASONS = ("complete", "error", "interrupted")

# Field types, wherever the field appears (end's counts are checked by _check_end).
_INT_FIELDS = ("seq", "bit", "ret", "task", "child", "entry", "epoch", "cookie", "nr", "cpu", "bits", "flags",
               "word_bits", "max_entries", "version")
_STR_FIELDS = ("profile", "tracer", "trace_hash", "how", "context", "point", "comm", "unwinder")


class _Bad(Exception):
    """A field of the right name and the wrong shape; parse_line turns it into LogFormatError."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value, what: str) -> None:
    if not _is_int(value) or value < 0:
        raise _Bad(f"{what} must be a non-negative integer, not {value!r}")


def _string(value, what: str, null: bool = False) -> None:
    if not (isinstance(value, str) or (null and value is None)):
        raise _Bad(f"{what} must be a string{' or null' if null else ''}, not {value!r}")


def _check_stack(e: dict) -> None:
    frames = e["frames"]
    if not isinstance(frames, dict):
        raise _Bad(f"frames must be an object (name -> list of frames), not {frames!r}")
    for name, rows in frames.items():
        if not isinstance(rows, list):
            raise _Bad(f"frames[{name!r}] must be a list, not {rows!r}")
        for i, row in enumerate(rows):
            if not (isinstance(row, list) and len(row) == 3 and _is_int(row[0])
                    and isinstance(row[1], str) and isinstance(row[2], str)):
                raise _Bad(f"frames[{name!r}][{i}] must be [address (int), module (str), symbol (str)], "
                           f"not {row!r}")
            if not 0 <= row[0] < 1 << 64:  # an address is a u64 (trace_hash packs it in 8 bytes)
                raise _Bad(f"frames[{name!r}][{i}]: address {row[0]} is not a 64-bit address")
    if "own" in e:
        _string(e["own"], "own", null=True)
    if "regs" in e:
        regs = e["regs"]
        if not isinstance(regs, dict) or not all(_is_int(v) for v in regs.values()):
            raise _Bad(f"regs must be an object of integers, not {regs!r}")
    if "stops" in e:
        stops = e["stops"]
        if not isinstance(stops, dict) or not all(isinstance(v, str) for v in stops.values()):
            raise _Bad(f"stops must be an object of strings, not {stops!r}")
    verdicts = e["verdicts"]
    if not isinstance(verdicts, list):
        raise _Bad(f"verdicts must be a list, not {verdicts!r}")
    for i, v in enumerate(verdicts):
        where = f"verdicts[{i}]"
        if not isinstance(v, dict):
            raise _Bad(f"{where} must be an object, not {v!r}")
        missing = [f for f in ("unwinder", "oracle", "verdict") if f not in v]
        if missing:
            raise _Bad(f"{where} lacks field(s) {', '.join(missing)}")
        _string(v["unwinder"], f"{where}.unwinder")
        _string(v["oracle"], f"{where}.oracle")
        if not isinstance(v["verdict"], str) or v["verdict"] not in VERDICTS:
            raise _Bad(f"{where}.verdict must be one of {', '.join(map(repr, VERDICTS))}, not {v['verdict']!r}")
        if "reason" in v:
            _string(v["reason"], f"{where}.reason", null=True)
        divergences = v.get("divergences", [])
        if not isinstance(divergences, list):
            raise _Bad(f"{where}.divergences must be a list, not {divergences!r}")
        for j, d in enumerate(divergences):
            dwhere = f"{where}.divergences[{j}]"
            if not isinstance(d, dict):
                raise _Bad(f"{dwhere} must be an object, not {d!r}")
            missing = [f for f in ("kind", "cause", "text") if f not in d]
            if missing:
                raise _Bad(f"{dwhere} lacks field(s) {', '.join(missing)}")
            if not isinstance(d["kind"], str) or d["kind"] not in DIVERGENCE_KINDS:
                raise _Bad(f"{dwhere}.kind must be one of {', '.join(map(repr, DIVERGENCE_KINDS))}, "
                           f"not {d['kind']!r}")
            _string(d["cause"], f"{dwhere}.cause", null=True)
            _string(d["text"], f"{dwhere}.text")
            for f in ("got_index", "want_index"):
                if d.get(f) is not None and not _is_int(d[f]):
                    raise _Bad(f"{dwhere}.{f} must be an integer or null, not {d[f]!r}")
            if "evidence" in d and not isinstance(d["evidence"], dict):
                raise _Bad(f"{dwhere}.evidence must be an object, not {d['evidence']!r}")


def _check_end(e: dict) -> None:
    if not isinstance(e["reason"], str) or e["reason"] not in END_REASONS:
        raise _Bad(f"reason must be one of {', '.join(map(repr, END_REASONS))}, not {e['reason']!r}")
    for f in ("stacks", "failures", "requests"):
        if f in e:
            _count(e[f], f)
    if "causes" in e:
        causes = e["causes"]
        if not isinstance(causes, dict):
            raise _Bad(f"causes must be an object (cause -> count), not {causes!r}")
        for name, n in causes.items():
            _count(n, f"causes[{name!r}]")
    if "errors" in e:
        errors = e["errors"]
        if not isinstance(errors, list) or not all(isinstance(x, str) for x in errors):
            raise _Bad(f"errors must be a list of strings, not {errors!r}")


_CHECKS = {"stack": _check_stack, "end": _check_end}


def stack_failed(event: dict) -> bool:
    """A stack record with at least one ``"failure"`` verdict."""
    return any(v.get("verdict") == "failure" for v in event.get("verdicts", ()))


def stack_causes(event: dict) -> Iterator[str]:
    """The cause of each explained divergence of a stack record (one per divergence)."""
    for v in event.get("verdicts", ()):
        for d in v.get("divergences", ()):
            if d.get("cause") is not None:
                yield d["cause"]


def stack_counts(stacks: Iterable[dict]) -> dict:
    """The ``end`` record's counts of these ``stack`` records: ``stacks``, ``failures``, ``causes``."""
    n = failures = 0
    causes: Counter[str] = Counter()
    for event in stacks:
        n += 1
        failures += stack_failed(event)
        causes.update(stack_causes(event))
    return {"stacks": n, "failures": failures, "causes": dict(sorted(causes.items()))}


def parse_line(line_no: int, text: str) -> dict:
    """Parse and validate one JSONL line; raise :class:`LogFormatError` naming the line."""
    try:
        event = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; too many digits; nesting too deep
        raise LogFormatError(line_no, f"not JSON ({getattr(exc, 'msg', None) or exc})", text) from exc
    if not isinstance(event, dict):
        raise LogFormatError(line_no, "not a JSON object", text)
    ev = event.get("ev")
    if not isinstance(ev, str) or ev not in REQUIRED:
        raise LogFormatError(line_no, f"unknown or missing event name {ev!r}", text)
    missing = [f for f in REQUIRED[ev] if f not in event]
    if missing:
        raise LogFormatError(line_no, f"{ev} event lacks field(s) {', '.join(missing)}", text)
    for f in _INT_FIELDS:
        if f in event and not _is_int(event[f]):
            raise LogFormatError(line_no, f"{ev} field {f!r} must be an integer, not {event[f]!r}", text)
    for f in _STR_FIELDS:
        if f in event and not isinstance(event[f], str):
            raise LogFormatError(line_no, f"{ev} field {f!r} must be a string, not {event[f]!r}", text)
    if ev in _CHECKS:
        try:
            _CHECKS[ev](event)
        except _Bad as exc:
            raise LogFormatError(line_no, f"{ev} record: {exc}", text) from None
    event["line"] = line_no
    return event


def read_events(lines: Iterable[str]) -> Iterator[dict]:
    """Parse JSONL text lines (blank lines are skipped but counted)."""
    for line_no, text in enumerate(lines, 1):
        if text.strip():
            yield parse_line(line_no, text.rstrip("\r\n"))
