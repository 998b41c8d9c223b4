"""The model's event log: one JSON object per line (JSONL), flushed as written.

Every line has ``"ev"`` (the event name) and ``"seq"`` (its 1-based line number).  The first line is
a ``header`` naming the profile, so the checker (``check.py``) can replay a log offline with the
revision's rules.  :data:`RECORDS` declares every event's fields and their types, once: the writer
(:meth:`EventLog.emit`) refuses what it does not declare, and the reader (:class:`LogReader`)
refuses a log whose header is missing or wrong (a version of :data:`LOG_VERSIONS`, a word size of
32 or 64), whose seq is not its line number, or that has a record of another kind, a field of
another type, or a field no writer writes.  Events and their fields:

=================  =====================================================================
``header``         profile, word_bits (32 or 64), max_entries, version (2; 1 before the digest)
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
``end``            reason, stacks [failures, causes, requests, errors, invariant_violations,
                   program_output], digest              the log's last line
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
     "failures": N, "causes": {"cause-name": COUNT, ...}, "requests": N, "errors": ["...", ...],
     "cross": {"confirmed" | "contradicted" | "unverifiable": COUNT, ...}}

``stacks`` counts the log's ``stack`` records, ``failures`` those with at least one ``"failure"``
verdict, ``causes`` the divergences each cause explained over the whole log
(:func:`stack_counts` computes them from the records).  A log without ``end`` as its last line was
cut short (the writer died, or the file was copied while being written).

``digest`` (version 2) seals the log: the sha256 (hex) of every line before the end record, as
written, each with its newline, then of the end record's own line without the digest.  The end
line must be its record as the writer writes it (:func:`canonical`, the digest its last field),
and no line may repeat a key within an object (:func:`loads`): so every byte of a sealed log is
under the digest, and no reader can take a value the digest did not cover.

What the seal proves, and what it does not: the digest is unkeyed, so it detects accidents --
a log cut short or copied while being written, a line lost, doubled or corrupted on the way, an
edit by a tool that does not know the seal -- and not a deliberate edit: whoever changes a record
can compute the sha256 of the result and write it into the end record, and ``harness check``
then says clean.  Telling a run's own log from an edited one would need a key the editor does not
have (an HMAC, or a signature, kept apart from the log); the harness has none.  A version 1 log
has no digest and reads as "unsealed".

``epoch`` counts the task's stretches between two resets that cleared the unwind state.  It equals
the kernel entry except when ``unwind_reset_info()`` found PENDING set (a request from an NMI after
the task work ran) and kept the state, cookie and cache, for the next entry.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

from orjson import OPT_APPEND_NEWLINE as _NEWLINE
from orjson import dumps as _orjson_dumps

from .. import signals
from ..errors import EXIT_INFRA, EXIT_USAGE, HarnessError
from ..verdicts.types import KINDS as DIVERGENCE_KINDS
from ..verdicts.types import VERDICTS

#: The log's one JSON encoder, built once: ``json.dumps(..., separators=...)`` builds a new
#: JSONEncoder at every call, half of a record's 10 us (12 records a trace in bench deferred).
#: The same settings as those dumps, so the lines (and the digest over them) are the same bytes.
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


def _line(event: dict) -> bytes:
    """A record's line as bytes, its newline included: exactly those of ``_ENCODE(event) + "\\n"``.

    orjson writes a record about 10 times faster than the json module (0.3 against 3.9 us; with
    the newline appended by orjson, not by a copy, EventLog.emit's 12 records a trace in bench
    deferred 74-81 -> 43-46 us, docs/benchmarks.md) and gives the same bytes for what
    the records hold: str keys, ints below 2**64, strings, bools, None, lists and dicts.  Where
    the two would differ the json module writes the line: a float anywhere (orjson spells 1e-05
    as 0.00001 and NaN as null), which only a divergence's free-form ``evidence`` or
    ``testimony`` may hold (every other field is typed, and the reader refuses a float nested in
    one: such a record may be spelled otherwise), so a stack record with a float there goes to
    json whole, as does a record with a float field;
    a string outside ASCII or with DEL (json escapes both as ``\\uXXXX``, orjson writes UTF-8
    and a raw DEL; every other ASCII character it spells as json does); an int of
    2**64 or more, or a key that is not a string (orjson refuses both)."""
    if float in map(type, event.values()) or (event["ev"] == "stack" and _free_floats(event)):
        return (_ENCODE(event) + "\n").encode()
    try:
        line = _orjson_dumps(event, option=_NEWLINE)
    except TypeError:  # orjson.JSONEncodeError: a big int, a non-str key, a type it does not know
        return (_ENCODE(event) + "\n").encode()
    return line if line.isascii() and b"\x7f" not in line else (_ENCODE(event) + "\n").encode()


def _free_floats(stack: dict) -> bool:
    """Whether a stack record may hold a float where its fields are free-form: a divergence's
    ``evidence`` or ``testimony`` (a verdict or a divergence that is not a dict: maybe)."""
    for v in stack.get("verdicts") or ():
        if type(v) is not dict:
            return True
        for d in v.get("divergences") or ():
            if type(d) is not dict or _holds_float(d.get("evidence")) or _holds_float(d.get("testimony")):
                return True
    return False


def _holds_float(value) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(map(_holds_float, value.values()))
    if isinstance(value, (list, tuple)):
        return any(map(_holds_float, value))
    return False


LOG_VERSION = 2  # what EventLog writes (LOG_VERSIONS: what LogReader reads)


class LogFormatError(HarnessError):
    """A log line that is not a well-formed event; names the line."""

    exit_code = EXIT_USAGE  # bad input

    def __init__(self, line_no: int, message: str, text: str = ""):
        self.line_no = line_no
        self.text = text
        super().__init__(f"line {line_no}: {message}" + (f": {text[:120]!r}" if text else ""))


class LogDigestError(LogFormatError):
    """A version 2 log whose end record's digest is not that of its lines: well-formed, but not
    the log its writer wrote (a value or a line changed after it was written)."""


class _DuplicateKey(ValueError):
    """A JSON object that names one key twice (:func:`loads`; a ValueError, as json.loads raises
    for what is not JSON: :func:`parse_line` turns it into a LogFormatError naming the line)."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"the key {key!r} twice in one object")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return d


_DECODE = json.JSONDecoder(object_pairs_hook=_unique_keys).decode


def loads(text: str):
    """:func:`json.loads` that refuses an object naming a key twice (:class:`_DuplicateKey`).  The
    writer never writes one; a reader that took one would keep one of the two values (Python's
    json the last, others the first, or refuse), and an end record read so could say what its
    digest never covered.  About a quarter slower than json.loads (its pairs go through Python)."""
    return _DECODE(text)


class LogWriteError(HarnessError):
    """A log line could not be written (a full disk, a failing device): the log keeps its whole
    lines before it and nothing after (the error names the file and how many lines it keeps)."""

    exit_code = EXIT_INFRA  # infrastructure


class JsonlFile:
    """A JSONL log file that holds whole lines only, whatever happens to the disk.

    :class:`EventLog` writes each record as one ``write_bytes()`` call (others ``write()`` text).
    Each call goes to the file with ``os.write`` (unbuffered: nothing waits in a buffer to be lost or half-written at
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
        self.write_bytes(text.encode())
        return len(text)

    def write_bytes(self, data: bytes) -> None:
        """:meth:`write` of text already encoded (UTF-8): :class:`EventLog`'s lines."""
        if self.failed is not None:
            raise self.failed
        if self.fd is None:
            raise ValueError(f"{self.path}: write to a closed log")
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
        self.lines += data.count(b"\n")

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
    if type(trace) is tuple:
        return _tuple_hash(trace)
    return _digest(trace)


def _digest(trace: Iterable[int]) -> str:
    return hashlib.sha1(b"".join(int(ip).to_bytes(8, "little", signed=False) for ip in trace)).hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def _tuple_hash(trace: tuple[int, ...]) -> str:
    """The model hashes one delivery's trace (a tuple) for its walk record and again for each
    tracer's callback record: computed once (3 sha1 digests a trace in bench deferred)."""
    return _digest(trace)


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
        self._digest = hashlib.sha256()  # of the lines so far, as written (LogReader checks it)

    def emit(self, ev: str, **fields) -> dict:
        """Write one record; its kind and fields must be declared in :data:`RECORDS` (the reader
        refuses anything else, so the writer must not write it).  An ``end`` record gets the
        ``digest`` that seals the log: the sha256 of every line before it and of itself."""
        allowed = _ALLOWED.get(ev)
        if allowed is None or not allowed.issuperset(fields):
            raise ValueError(f"a {ev!r} record with fields {sorted(fields)} is not declared in RECORDS "
                             f"(harness/deferred/log.py): declare it there, where the reader finds it")
        # One record is counted and written whole or not at all: a Ctrl-C (SIGTERM) that comes
        # in here is raised once it is written (harness/signals.py), else the seq counted for a
        # line never written leaves the log a gap its reader refuses (seen: seq 1362, then the
        # "interrupted" end record with seq 1364).
        guard = signals.STATE
        guard.enter()
        try:
            self.seq += 1
            event = {"seq": self.seq, "ev": ev, **fields}
            if ev == "end":  # the lines before it and its own line without the digest
                digest = self._digest.copy()
                digest.update(_ENCODE(event).encode() + b"\n")
                event["digest"] = digest.hexdigest()
                data = _ENCODE(event).encode() + b"\n"  # canonical(): as the reader checks it
            else:
                data = _line(event)
            self._digest.update(data)
            fp = self.fp
            if fp is not None:
                if type(fp) is JsonlFile:
                    fp.write_bytes(data)  # unbuffered: in the file when it returns
                else:
                    fp.write(data.decode())
                    fp.flush()
            if self.keep:
                self.events.append(event)
            if ev == "stack":
                self.stacks += 1
                self.failures += stack_failed(event)
                self.causes.update(stack_causes(event))
        finally:
            guard.leave()
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


END_REASONS = ("complete", "error", "interrupted")


# ------------------------------------------------------------------------------- the schema
#
# What each record kind may hold, declared once, here beside the writer: :meth:`EventLog.emit`
# refuses a kind or a field the table does not declare, and :class:`LogReader` checks every line of
# a log against it (each field's type, the required ones present, no other field).  A plain table
# of field -> (type, required) rather than a schema library: jsonschema would cost tens of
# microseconds a record (a soak log has 10^5 records, the unit suite checks 10^5 mutated logs),
# and msgspec/pydantic would turn the records into objects that the checker, the engine and the
# perf oracle (which all pass plain dicts) would then convert back.


class _Bad(Exception):
    """A field of the right name and the wrong shape; :class:`LogReader` turns it into
    :class:`LogFormatError` naming the line."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class FieldType:
    """One field's type: ``check(value, what)`` raises :class:`_Bad` saying what it must be."""

    def __init__(self, name: str, test: Callable[[object], bool]):
        self.name = name
        self.test = test

    def check(self, value, what: str) -> None:
        if not self.test(value):
            raise _Bad(f"{what} must be {self.name}, not {value!r}")

    def __repr__(self) -> str:
        return f"<{self.name}>"


class _Nested(FieldType):
    """A field with inner structure, checked by a function that raises :class:`_Bad` itself."""

    def __init__(self, name: str, check: Callable[[object, str], None]):
        super().__init__(name, lambda v: True)
        self._check = check

    def check(self, value, what: str) -> None:
        self._check(value, what)


def _one_of(*values) -> FieldType:
    return FieldType("one of " + ", ".join(map(repr, values)),
                     lambda v: not isinstance(v, bool) and isinstance(v, (str, int)) and v in values)


def _or_null(t: FieldType) -> FieldType:
    return FieldType(f"{t.name} or null", lambda v: v is None or t.test(v))


U64_LIMIT = 1 << 64
# (type(v) is int: the common case, a parsed int, without _is_int's call; an int subclass other
# than bool passes too, as in _is_int)
INT = FieldType("an integer", lambda v: type(v) is int or _is_int(v))  # noqa: E721
COUNT = FieldType("a non-negative integer", lambda v: (type(v) is int or _is_int(v)) and v >= 0)  # noqa: E721
POSITIVE = FieldType("a positive integer", lambda v: (type(v) is int or _is_int(v)) and v > 0)  # noqa: E721
U64 = FieldType("an unsigned 64-bit integer",
                lambda v: (type(v) is int or _is_int(v)) and 0 <= v < U64_LIMIT)  # noqa: E721
STR = FieldType("a string", lambda v: isinstance(v, str))
BOOL = FieldType("true or false", lambda v: isinstance(v, bool))
HASH = FieldType("16 hex digits (trace_hash)", lambda v: isinstance(v, str) and len(v) == 16
                 and all(c in "0123456789abcdef" for c in v))
DIGEST = FieldType("64 hex digits (sha256)", lambda v: isinstance(v, str) and len(v) == 64
                   and all(c in "0123456789abcdef" for c in v))
ADDRESSES = FieldType("a list of unsigned 64-bit integers",
                      lambda v: isinstance(v, list) and all(type(x) is int and 0 <= x < U64_LIMIT  # noqa: E721
                                                            for x in v))
REGS = FieldType("an object of unsigned 64-bit integers (ip, sp, bp)",
                 lambda v: isinstance(v, dict) and all(_is_int(x) and 0 <= x < U64_LIMIT for x in v.values()))
STOPS = FieldType("an object of strings", lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()))
STRINGS = FieldType("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v))

LOG_VERSIONS = (1, 2)  # 1: no digest; 2: the end record's digest seals the log


def _frames(frames, what: str) -> None:
    if not isinstance(frames, dict):
        raise _Bad(f"{what} must be an object (name -> list of frames), not {frames!r}")
    for name, rows in frames.items():
        if not isinstance(rows, list):
            raise _Bad(f"{what}[{name!r}] must be a list, not {rows!r}")
        for i, row in enumerate(rows):
            # type() is, not isinstance: a bool is no address (and this runs for every frame of a log)
            if not (type(row) is list and len(row) == 3 and type(row[0]) is int  # noqa: E721
                    and type(row[1]) is str and type(row[2]) is str):  # noqa: E721
                raise _Bad(f"{what}[{name!r}][{i}] must be [address (int), module (str), symbol (str)], "
                           f"not {row!r}")
            if not 0 <= row[0] < U64_LIMIT:  # an address is a u64 (trace_hash packs it in 8 bytes)
                raise _Bad(f"{what}[{name!r}][{i}]: address {row[0]} is not a 64-bit address")


def _fields(obj: dict, schema: dict[str, tuple[FieldType, bool]], what: str = "",
            skip: frozenset = frozenset()) -> None:
    """``obj``'s fields against ``schema`` (name -> (type, required)): none missing, none other.
    ``what`` names ``obj`` inside its record ("" for the record itself); ``skip``: fields checked
    elsewhere (none of the schema's).  (The reader runs this for every record: the common path is a set test and one
    type test per field.)"""
    required, tests = _SHAPE[id(schema)]
    if not required <= obj.keys():
        missing = [f for f in schema if f in required and f not in obj]
        raise _Bad(f"{what + ': ' if what else ''}missing field(s) {', '.join(missing)}")
    for f, value in obj.items():
        test = tests.get(f)
        if test is None:
            if f in skip:
                continue
            raise _Bad(f"{what + '.' if what else ''}{f}: no writer writes such a field")
        if not test(value):  # a nested field's test is always false: its check() looks inside
            schema[f][0].check(value, f"{what}.{f}" if what else f)


# id(schema) -> (required fields, field -> its type's test); checked for every field of every
# record, so looked up once here (a _Nested field's test says no: its check() runs every time)
_SHAPE: dict[int, tuple[frozenset, dict[str, Callable[[object], bool]]]] = {}


def _never(value) -> bool:
    return False


def _shape(schema: dict[str, tuple[FieldType, bool]]) -> dict[str, tuple[FieldType, bool]]:
    _SHAPE[id(schema)] = (frozenset(f for f, (_, r) in schema.items() if r),
                          {f: _never if isinstance(t, _Nested) else t.test for f, (t, _) in schema.items()})
    return schema


_DIVERGENCE = _shape({
    "kind": (_one_of(*DIVERGENCE_KINDS), True), "cause": (_or_null(STR), True), "text": (STR, True),
    "got_index": (_or_null(INT), False), "want_index": (_or_null(INT), False),
    "evidence": (FieldType("an object", lambda v: isinstance(v, dict)), False),
    # cross-examination (harness.toolchain.witness): the outcome over the cause's claims about
    # binaries, and each claim's testimony (what the tool said, and the command)
    "cross": (_one_of("confirmed", "contradicted", "unverifiable"), False),
    "testimony": (FieldType("a list of objects", lambda v: isinstance(v, list) and all(isinstance(t, dict) for t in v)),
                  False),
})


def _verdicts(verdicts, what: str) -> None:
    if not isinstance(verdicts, list):
        raise _Bad(f"{what} must be a list, not {verdicts!r}")
    for i, v in enumerate(verdicts):
        where = f"{what}[{i}]"
        if not isinstance(v, dict):
            raise _Bad(f"{where} must be an object, not {v!r}")
        _fields(v, _VERDICT, where)
        for j, d in enumerate(v.get("divergences", ())):
            dwhere = f"{where}.divergences[{j}]"
            if not isinstance(d, dict):
                raise _Bad(f"{dwhere} must be an object, not {d!r}")
            _fields(d, _DIVERGENCE, dwhere)


_VERDICT = _shape({
    "unwinder": (STR, True), "oracle": (STR, True), "verdict": (_one_of(*VERDICTS), True),
    "reason": (_or_null(STR), False),
    "divergences": (FieldType("a list", lambda v: isinstance(v, list)), False),
})

_REQUEST = _shape({"where": (STR, True), "window": (_or_null(STR), False), "syscall": (_or_null(INT), False),
                   "regs": (REGS, False)})


def _request(request, what: str) -> None:
    if not isinstance(request, dict):
        raise _Bad(f"{what} must be an object, not {request!r}")
    _fields(request, _REQUEST, what)


def _causes(causes, what: str) -> None:
    if not isinstance(causes, dict):
        raise _Bad(f"{what} must be an object (cause -> count), not {causes!r}")
    for name, n in causes.items():
        COUNT.check(n, f"{what}[{name!r}]")


def _r(t: FieldType) -> tuple[FieldType, bool]:
    return (t, True)


def _o(t: FieldType) -> tuple[FieldType, bool]:
    return (t, False)


# Every record kind and its fields beyond "seq" and "ev" (both required in every record): (type,
# required).  The writers: harness/deferred/model.py (the model's events), harness/scenarios/engine.py
# (stack, end), EventLog.end; harness/perf/oracle.py builds the same records in memory (no seq).
RECORDS: dict[str, dict[str, tuple[FieldType, bool]]] = {
    "header": {"profile": _r(_one_of("seed-v10", "mainline")), "word_bits": _r(_one_of(32, 64)),
               "max_entries": _r(POSITIVE), "version": _r(_one_of(*LOG_VERSIONS))},
    "init": {"tracer": _r(STR), "bit": _r(INT), "ret": _r(INT)},
    "cancel": {"tracer": _r(STR), "bit": _o(INT)},
    "cancel_done": {"tracer": _r(STR), "bit": _o(INT)},
    "task": {"task": _r(COUNT), "flags": _o(COUNT)},
    "fork": {"task": _r(COUNT), "child": _r(COUNT), "entry": _o(COUNT)},
    "enter": {"task": _r(COUNT), "entry": _r(COUNT), "epoch": _o(COUNT), "how": _o(STR), "cpu": _o(COUNT)},
    "request": {"tracer": _r(STR), "task": _r(COUNT), "entry": _r(COUNT), "epoch": _r(COUNT), "cpu": _o(COUNT),
                "context": _o(STR), "user_mode": _o(BOOL), "ret": _r(INT), "cookie": _r(U64)},
    "walk": {"task": _r(COUNT), "entry": _r(COUNT), "epoch": _r(COUNT), "nr": _r(COUNT), "truncated": _o(BOOL),
             "trace_hash": _r(HASH), "trace": _o(ADDRESSES)},
    "trace": {"task": _r(COUNT), "entry": _r(COUNT), "epoch": _r(COUNT), "ret": _r(INT), "nr": _o(COUNT),
              "cached": _o(BOOL), "trace_hash": _o(HASH)},
    "task_work": {"task": _r(COUNT), "entry": _r(COUNT), "epoch": _r(COUNT), "bits": _o(U64), "cookie": _o(U64)},
    "callback": {"tracer": _r(STR), "task": _r(COUNT), "entry": _r(COUNT), "epoch": _r(COUNT), "bit": _o(INT),
                 "cookie": _r(U64), "nr": _o(COUNT), "trace_hash": _r(HASH)},
    "callback_done": {"tracer": _r(STR), "task": _r(COUNT)},
    "reset": {"task": _r(COUNT), "entry": _r(COUNT), "epoch": _r(COUNT), "cleared": _r(BOOL)},
    "return_to_user": {"task": _r(COUNT), "entry": _r(COUNT)},
    "exit": {"task": _r(COUNT), "entry": _r(COUNT), "epoch": _o(COUNT)},
    "exit_done": {"task": _r(COUNT)},
    "stack": {"task": _r(COUNT), "entry": _r(COUNT), "epoch": _o(COUNT), "cookie": _o(U64), "point": _o(STR),
              "comm": _o(STR), "own": _o(_or_null(STR)), "scenario": _o(STR), "regs": _o(REGS),
              "request": _o(_Nested("an object", _request)), "unwinder": _o(STR),
              "frames": _r(_Nested("an object of frames", _frames)), "stops": _o(STOPS),
              "verdicts": _r(_Nested("a list of verdicts", _verdicts))},
    "end": {"reason": _r(_one_of(*END_REASONS)), "stacks": _r(COUNT), "failures": _o(COUNT),
            "causes": _o(_Nested("an object of counts", _causes)), "requests": _o(COUNT), "errors": _o(STRINGS),
            "invariant_violations": _o(COUNT), "program_output": _o(_or_null(STR)),
            "cross": _o(_Nested("an object of counts", _causes)),  # cross-examined divergences by outcome
            "digest": _o(DIGEST)},  # required in version 2, absent in version 1 (LogReader)
}
for _schema in RECORDS.values():
    _shape(_schema)
_ALLOWED = {ev: frozenset(fields) | {"seq", "ev"} for ev, fields in RECORDS.items()}
_SEQ_EV = frozenset(("seq", "ev"))
REQUIRED: dict[str, tuple[str, ...]] = {ev: tuple(f for f, (_, r) in fields.items() if r)
                                        for ev, fields in RECORDS.items()}


def check_record(event: dict) -> None:
    """``event``'s fields against :data:`RECORDS` (raises :class:`_Bad`); and the record's own
    consistency: a walk's ``trace`` is ``nr`` addresses hashing to its ``trace_hash``."""
    ev = event["ev"]
    _fields(event, RECORDS[ev], skip=_SEQ_EV)
    if ev == "walk" and "trace" in event:
        trace = event["trace"]
        if len(trace) != event["nr"]:
            raise _Bad(f"nr {event['nr']} but {len(trace)} address(es) in its trace")
        if trace_hash(trace) != event["trace_hash"]:
            raise _Bad(f"the trace hashes to {trace_hash(trace)}, not its trace_hash {event['trace_hash']}")


def _addresses(event: dict) -> Iterator[tuple[str, int]]:
    """The user addresses a record holds (checked against the header's word size)."""
    if event["ev"] == "walk":
        for a in event.get("trace", ()):
            yield "trace", a
    elif event["ev"] == "stack":
        for name, rows in event["frames"].items():
            for row in rows:
                yield f"frames[{name!r}]", row[0]
        for r, v in event.get("regs", {}).items():
            yield f"regs.{r}", v


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


def canonical(event: dict) -> bytes:
    """The bytes of ``event`` as :class:`EventLog` writes them (its line, without the newline; a
    parsed record's ``line`` number left out): how the digest takes in the end record."""
    if "line" in event:
        event = {k: v for k, v in event.items() if k != "line"}
    return _ENCODE(event).encode()


def parse_line(line_no: int, text: str, loads: Callable[[str], object] = loads) -> dict:
    """Parse one JSONL line and check it against :data:`RECORDS`; raise :class:`LogFormatError`
    naming the line.  (The log's structure, header, seq and digest: :class:`LogReader`.)
    ``loads``: what decodes the text; it must return what :func:`loads` returns for it (a new
    top-level object: the reader adds ``line`` to it), or raise what it raises."""
    try:
        event = loads(text)
    except _DuplicateKey as exc:
        raise LogFormatError(line_no, f"{exc} (the writer writes each key once; which value a reader takes "
                             "is the reader's choice)", text) from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; too many digits; nesting too deep
        raise LogFormatError(line_no, f"not JSON ({getattr(exc, 'msg', None) or exc})", text) from exc
    if not isinstance(event, dict):
        raise LogFormatError(line_no, "not a JSON object", text)
    ev = event.get("ev")
    if not isinstance(ev, str) or ev not in RECORDS:
        raise LogFormatError(line_no, f"unknown or missing event name {ev!r}", text)
    seq = event.get("seq")
    if not _is_int(seq):
        raise LogFormatError(line_no, f"{ev} record: seq must be an integer, not {seq!r}", text)
    try:
        check_record(event)
    except _Bad as exc:
        raise LogFormatError(line_no, f"{ev} record: {exc}", text) from None
    event["line"] = line_no
    return event


class LogReader:
    """Reads a log's lines and trusts none of them: each line is one record of a known kind with
    its fields typed (:data:`RECORDS`); the first is the ``header`` (a known version, word size 32
    or 64), and no other; ``seq`` is the line number (no line missing, repeated or out of order;
    no blank line: the writer writes none); the addresses fit the header's word size; in a version
    2 log the ``end`` record's ``digest`` is the sha256 of the lines before it, as written, and of
    itself without the digest (:func:`canonical`); the end line is byte for byte its canonical
    form (the digest last), and no object names a key twice (:func:`loads`).  So an accident (a
    line lost, doubled, cut or changed on the way) is seen; a deliberate edit whose author
    recomputed the digest is not (an unkeyed sha256 proves nothing against its reader: the
    module's docstring).
    A log cut short (a prefix of whole lines, no end record) reads without error: it is
    incomplete, not corrupt.

    After reading, ``version`` is the header's version and ``sealed`` True when the end record's
    digest matched, False for a complete version 1 log (it has none), None without an end record.
    """

    def __init__(self, loads: Callable[[str], object] = loads) -> None:
        self.version: int | None = None
        self.word_bits = 64
        self._loads = loads  # parse_line's: a caller that has decoded these lines before may share them
        self.sealed: bool | None = None
        self._digest = hashlib.sha256()

    def events(self, lines: Iterable[str]) -> Iterator[dict]:
        for line_no, text in enumerate(lines, 1):
            text = text.rstrip("\r\n")
            if not text.strip():
                raise LogFormatError(line_no, "blank line (a log has none: a line was lost or cut)")
            yield self._read(line_no, text)

    def _read(self, line_no: int, text: str) -> dict:
        event = parse_line(line_no, text, self._loads)
        ev, seq = event["ev"], event["seq"]
        if line_no == 1 and ev != "header":
            article = "an" if ev[0] in "aeiou" else "a"
            raise LogFormatError(line_no, f"the first line must be the header, not {article} {ev} record", text)
        if seq != line_no:
            if seq < line_no:
                why = "a line is repeated or out of order" if seq > 0 else "seq counts lines from 1"
            else:
                why = f"{seq - line_no} line(s) missing before it, or lines out of order"
            raise LogFormatError(line_no, f"{ev} record has seq {seq}, not its line number {line_no} ({why})", text)
        if ev == "header":
            if line_no != 1:
                raise LogFormatError(line_no, "a second header (the header is the first line only)", text)
            self.version, self.word_bits = event["version"], event["word_bits"]
        for what, address in _addresses(event) if self.word_bits < 64 else ():  # 64: the schema's u64
            if address >> self.word_bits:
                raise LogFormatError(line_no, f"{ev} record's {what} address {address:#x} does not fit the "
                                     f"header's word size ({self.word_bits} bits)", text)
        if ev == "end":
            self._end(line_no, event, text)
        # the line as written (re-encoding each record would double the reader's time)
        self._digest.update(text.encode() + b"\n")
        return event

    def _end(self, line_no: int, event: dict, text: str) -> None:
        # The end line as the writer writes it, byte for byte: the digest takes in its canonical
        # form, so any other spelling of the same record (spaces, escapes, 1.0 for 1, the digest
        # moved) would be bytes the digest never covered.
        fields = [k for k in event if k != "line"]
        if fields[-1] != "digest" and "digest" in event:
            raise LogFormatError(line_no, "end record's digest is not its last field (the writer appends it)", text)
        if canonical(event) != text.encode():
            raise LogFormatError(line_no, "end record is not written as the writer writes it (compact JSON, "
                                 "ASCII with \\u escapes, keys once, integers as integers): its bytes are not "
                                 "those the digest covers", text)
        if self.version == 1:
            if "digest" in event:
                raise LogFormatError(line_no, "end record has a digest, but the header says version 1 "
                                     "(which has none)", text)
            self.sealed = False
            return
        if "digest" not in event:
            raise LogFormatError(line_no, f"end record lacks the digest a version {self.version} log "
                                 "ends with", text)
        digest = self._digest.copy()
        digest.update(canonical({k: v for k, v in event.items() if k != "digest"}) + b"\n")
        if digest.hexdigest() != event["digest"]:
            raise LogDigestError(line_no, f"the log's digest is {digest.hexdigest()[:16]}..., the end record "
                                 f"says {event['digest'][:16]}...: a record was changed, added or removed "
                                 "after it was written", text)
        self.sealed = True


def read_events(lines: Iterable[str]) -> Iterator[dict]:
    """Parse and check JSONL text lines (:class:`LogReader`)."""
    return LogReader().events(lines)
