"""Offline checker of an unwind_deferred event log (``log.py``): a verdict with every violation.

Invariants, per task and *epoch* (the stretch between two ``reset`` events that cleared the state:
one kernel entry, or two when ``unwind_reset_info()`` found PENDING set and kept the state):

1. a tracer's callback runs only for a request of that tracer that returned 0 in this epoch and was
   not yet served, so at most once per such request (seed-v10 can call a tracer twice in one entry,
   for two requests that returned 0); under the mainline profile at most once per entry;
2. a request that returned 0 is served before the epoch ends (return to user space or exit),
   unless its tracer was cancelled first;
3. every request (ret >= 0) and callback of one epoch carries the same non-zero cookie, and every
   callback the same trace, the one walked in this epoch (a trace not walked in this epoch is a
   stale cache); under mainline the cookie is ``{u32 cpu + 1 (low); u32 cnt, LSB set (high)}``;
4. no two epochs of one task share a cookie;
5. the stack is walked at most once per epoch (walks that found no frame do not count: the kernel's
   cache cannot remember an empty trace), never deeper than ``max_entries``;
6. a cancelled tracer is never called after its ``cancel``, and ``cancel_done`` comes after every
   callback of that tracer that was running;
7. a task accepts no request once ``exit`` set PF_EXITING: such requests return -EINVAL.

``stack`` records (a delivered user stack and the oracles' verdicts on it) leave these invariants
alone; for them and for the ``end`` record:

8. a stack record's unwinder frames are the trace walked for its task in its epoch (their
   ``trace_hash`` is the ``walk``'s, or the ``callback``'s when the log has no walk), and its
   cookie, when given, the one the epoch's callback delivered;
9. a verdict is ``"failure"`` exactly when one of its divergences has no cause or a cause the
   toolchain's own tools contradicted (``"cross": "contradicted"``: cause-contradicted), or, with no
   divergence at all, when its ``reason`` says what failed; and ``"agree"`` has no divergence;
10. the ``end`` record is the last line, and its counts (``stacks``, ``failures``, ``causes``) are
    those of the stack records.

A log whose last event is not an ``end`` record (or an empty one) is *incomplete*: not a violation,
but not a passing log either.  The verdict also sums up the stack records: verdicts per
(unwinder, oracle), divergences per cause, and the failures.

:func:`check_events` returns a :class:`Verdict`; :func:`harness.report.check.verdict_lines` turns it
into text and ``harness check LOG`` (:mod:`harness.commands.check`) prints it (exit 0 clean and
complete with no failure, 1 violations, failures or an incomplete log, 2 unreadable input).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .log import LogReader, loads, stack_causes, stack_failed, trace_hash
from .profile import EINVAL


@dataclass(frozen=True)
class Violation:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass(frozen=True)
class StackFailure:
    """One ``"failure"`` verdict of a stack record: the text of its first divergence that has no
    cause (of its reason, for a failure that is no divergence)."""

    line: int
    task: int
    entry: int
    unwinder: str
    oracle: str
    text: str

    def __str__(self) -> str:
        return f"line {self.line}: task {self.task} entry {self.entry} {self.unwinder}/{self.oracle}: {self.text}"


@dataclass
class Verdict:
    events: int = 0
    violations: list[Violation] = field(default_factory=list)
    complete: bool = False  # the last event is an end record
    last_line: int = 0  # line of the last event (0: empty log)
    end_reason: str | None = None  # the (last) end record's reason
    requests: int | None = None  # the end record's requests
    errors: list[str] = field(default_factory=list)  # the end record's errors
    stacks: int = 0  # stack records
    failed_stacks: int = 0  # stack records with at least one "failure" verdict
    verdicts: dict[tuple[str, str], Counter] = field(default_factory=dict)  # (unwinder, oracle) -> verdict -> n
    causes: Counter = field(default_factory=Counter)  # cause -> divergences it explained
    failures: list[StackFailure] = field(default_factory=list)  # one per "failure" verdict, in log order
    version: int | None = None  # the header's version (None: events checked in memory, no header read)
    sealed: bool | None = None  # the end record's digest matched (False: a version 1 log has none)

    @property
    def clean(self) -> bool:
        """No invariant violated (an incomplete log or failure verdicts can still be clean)."""
        return not self.violations

    @property
    def incomplete(self) -> str | None:
        """Why the log is incomplete, or None when its last line is an end record."""
        if self.complete:
            return None
        if not self.events:
            return "no end record; the log is empty"
        return f"no end record; the log stops after line {self.last_line}"

    @property
    def ok(self) -> bool:
        """What ``harness check`` passes: clean, complete, the run complete, no failure verdict."""
        return self.clean and self.complete and self.end_reason == "complete" and not self.failures

    def messages(self) -> list[str]:
        return [str(v) for v in self.violations]


@dataclass
class _Epoch:
    cookie: int = 0
    cookie_line: int = 0
    walk_hash: str | None = None
    walk_line: int = 0
    owed: dict[str, list[int]] = field(default_factory=dict)  # tracer -> lines of requests returning 0
    called: dict[str, int] = field(default_factory=dict)  # tracer -> line of its (last) callback


@dataclass
class _TaskState:
    pid: int
    entry: int = 0
    exiting: int = 0  # line of the exit event
    epoch: _Epoch = field(default_factory=_Epoch)
    cookies: dict[int, int] = field(default_factory=dict)  # cookie -> line, earlier epochs


class Checker:
    """Feed events one by one (incremental); ``violations`` grows as they are found."""

    def __init__(self) -> None:
        self.violations: list[Violation] = []
        # not mutated (equivalent: profile is only compared with "mainline", max_entries only
        # tested for truth, until a header sets them)
        self.profile = ""  # pragma: no mutate
        self.max_entries = 0  # pragma: no mutate
        self.tasks: dict[int, _TaskState] = {}
        self.cancelled: dict[str, int] = {}  # tracer -> line of its cancel
        self.running: dict[tuple[str, int], int] = {}  # (tracer, pid) -> line of callback start
        self.count = 0
        # what the stack records are checked against, per (pid, "epoch" | "entry", n):
        self.walked: dict[tuple[int, str, int], tuple[str, int]] = {}  # -> (trace_hash, line) of the walk
        self.delivered: dict[tuple[int, str, int], tuple[str, int, int]] = {}  # -> (hash, cookie, line) of a callback
        self.last: dict | None = None
        self.end: dict | None = None  # pragma: no mutate (equivalent: read as "self.end or {}")
        self.stacks = 0
        self.failed_stacks = 0
        self.verdicts: dict[tuple[str, str], Counter] = {}
        self.causes: Counter = Counter()
        self.failures: list[StackFailure] = []

    # helpers
    def _bad(self, event: dict, message: str) -> None:
        self.violations.append(Violation(event["line"], message))  # feed() gives every event its line

    def _task(self, pid: int) -> _TaskState:
        if pid not in self.tasks:
            self.tasks[pid] = _TaskState(pid)
        return self.tasks[pid]

    @staticmethod
    def _where(t: _TaskState, tracer: str | None = None) -> str:
        s = f"task {t.pid} entry {t.entry}"
        return s + (f" tracer {tracer}" if tracer else "")

    def _close_epoch(self, event: dict, t: _TaskState, why: str) -> None:
        ep = t.epoch
        for tracer, lines in ep.owed.items():
            for line in lines:
                # not mutated (equivalent: ">=" for ">", a cancel is never on a request's line)
                if tracer in self.cancelled and self.cancelled[tracer] > line:  # pragma: no mutate
                    continue
                self._bad(event, f"{self._where(t, tracer)}: request at line {line} returned 0 but the "
                          f"callback never ran before {why}")
        if ep.cookie:
            t.cookies[ep.cookie] = ep.cookie_line
        t.epoch = _Epoch()

    def _check_cookie(self, event: dict, t: _TaskState, cookie: int, what: str, tracer: str) -> None:
        ep = t.epoch
        where = self._where(t, tracer)
        if not cookie:
            self._bad(event, f"{where}: {what} has cookie 0")
            return
        if self.profile == "mainline":
            cpu1, cnt = cookie & 0xFFFFFFFF, cookie >> 32
            if cpu1 == 0 or not cnt & 1:
                self._bad(event, f"{where}: {what} cookie {cookie:#x} is not {{cpu+1 (low), odd cnt (high)}}")
        if not ep.cookie:
            if cookie in t.cookies:
                self._bad(event, f"{where}: {what} cookie {cookie:#x} was already used by an earlier "
                          f"entry of this task (line {t.cookies[cookie]})")
            ep.cookie, ep.cookie_line = cookie, event["line"]
        elif cookie != ep.cookie:
            self._bad(event, f"{where}: {what} cookie {cookie:#x} differs from this entry's cookie "
                      f"{ep.cookie:#x} (line {ep.cookie_line}): two cookies in one entry")

    def _check_trace(self, event: dict, t: _TaskState, what: str, tracer: str | None = None) -> None:
        ep = t.epoch
        where = self._where(t, tracer)
        if ep.walk_hash is None:
            self._bad(event, f"{where}: {what} got a trace that was not walked in this entry "
                      f"(stale cache from an earlier entry)")
        elif event.get("trace_hash") != ep.walk_hash:
            self._bad(event, f"{where}: {what} got trace {event.get('trace_hash')}, not the one walked "
                      f"in this entry at line {ep.walk_line} ({ep.walk_hash})")

    # the events
    def feed(self, event: dict) -> None:
        self.count += 1
        event.setdefault("line", event.get("seq", self.count))
        if self.last is not None and self.last["ev"] == "end":
            self._bad(self.last, f"end record is not the last line (line {event['line']} follows it)")
        self.last = event
        handler = getattr(self, "_on_" + event["ev"], None)
        if handler is not None:
            handler(event)

    def _on_header(self, e: dict) -> None:
        self.profile = e["profile"]
        self.max_entries = int(e.get("max_entries") or 0)

    def _on_init(self, e: dict) -> None:
        if e["ret"] == 0:
            self.cancelled.pop(e["tracer"], None)  # a new registration under that name

    def _on_cancel(self, e: dict) -> None:
        self.cancelled[e["tracer"]] = e["line"]

    def _on_cancel_done(self, e: dict) -> None:
        for (tracer, pid), line in self.running.items():
            if tracer == e["tracer"]:
                self._bad(e, f"tracer {tracer}: cancel completed while its callback on task {pid} "
                          f"(line {line}) was still running")

    def _on_task(self, e: dict) -> None:
        # not mutated (equivalent: a task's state is made by its first event of any kind)
        self._task(e["task"])  # pragma: no mutate

    def _on_fork(self, e: dict) -> None:
        # not mutated (equivalent: every event of the child that can name its entry in a
        # message -- request, walk, callback -- sets the entry first; made for the reader of this code)
        child = self._task(e["child"])  # pragma: no mutate
        child.entry = 1  # pragma: no mutate

    def _on_enter(self, e: dict) -> None:
        self._task(e["task"]).entry = e["entry"]

    def _on_request(self, e: dict) -> None:
        t = self._task(e["task"])
        t.entry = e["entry"]
        tracer, ret = e["tracer"], e["ret"]
        if t.exiting and ret != -EINVAL:
            self._bad(e, f"{self._where(t, tracer)}: request returned {ret} after the task began "
                      f"exiting (line {t.exiting}); must be -EINVAL")
        if ret < 0:
            return
        if tracer in self.cancelled and ret == 0:
            self._bad(e, f"{self._where(t, tracer)}: request returned 0 after the tracer's cancel "
                      f"(line {self.cancelled[tracer]})")
        self._check_cookie(e, t, e["cookie"], "request", tracer)
        if ret == 0:
            owed = t.epoch.owed.setdefault(tracer, [])
            # seed-v10: each request returning 0 while one is owed means one more call (its bit was
            # dropped by another tracer's cmpxchg and set again).  mainline: a nested request of the
            # same tracer may also return 0 (old & bit truncated to int), one call serves both.
            if not owed or self.profile != "mainline":
                owed.append(e["line"])

    def _on_walk(self, e: dict) -> None:
        t = self._task(e["task"])
        t.entry = e["entry"]
        ep = t.epoch
        if self.max_entries and e["nr"] > self.max_entries:
            self._bad(e, f"{self._where(t)}: walk returned {e['nr']} entries, more than "
                      f"UNWIND_MAX_ENTRIES = {self.max_entries}")
        for key in ((t.pid, "epoch", e["epoch"]), (t.pid, "entry", e["entry"])):
            if e["nr"] or key not in self.walked:  # an empty walk only when there is no other
                self.walked[key] = (e["trace_hash"], e["line"])
        if e["nr"] == 0:
            return
        if ep.walk_hash is not None:
            self._bad(e, f"{self._where(t)}: stack walked a second time in one entry (first walk at "
                      f"line {ep.walk_line})")
        ep.walk_hash, ep.walk_line = e["trace_hash"], e["line"]

    def _on_trace(self, e: dict) -> None:
        t = self._task(e["task"])
        # not mutated (the line's other mutants are killed; equivalent: another false default)
        if e["ret"] == 0 and e.get("nr", 0):  # pragma: no mutate
            self._check_trace(e, t, "direct unwind_user_faultable()")

    def _on_callback(self, e: dict) -> None:
        t = self._task(e["task"])
        t.entry = e["entry"]
        tracer = e["tracer"]
        where = self._where(t, tracer)
        ep = t.epoch
        if tracer in self.cancelled:
            self._bad(e, f"{where}: callback after the tracer's cancel (line {self.cancelled[tracer]})")
        if tracer not in ep.owed:
            if tracer in ep.called:
                self._bad(e, f"{where}: callback ran again in one entry with no new request returning 0 "
                          f"(first callback at line {ep.called[tracer]})")
            else:
                self._bad(e, f"{where}: callback without a request that returned 0 in this entry")
        elif self.profile == "mainline" and tracer in ep.called:
            self._bad(e, f"{where}: callback ran twice in one entry (first at line {ep.called[tracer]})")
        if ep.owed.get(tracer):
            ep.owed[tracer].pop(0)
            if not ep.owed[tracer]:
                del ep.owed[tracer]
        ep.called[tracer] = e["line"]
        self._check_cookie(e, t, e["cookie"], "callback", tracer)
        if e.get("nr", 1):  # pragma: no mutate (equivalent: another true default; the rest is killed)
            self._check_trace(e, t, "callback", tracer)
        self.running[(tracer, t.pid)] = e["line"]
        for key in ((t.pid, "epoch", e["epoch"]), (t.pid, "entry", e["entry"])):
            self.delivered[key] = (e["trace_hash"], e["cookie"], e["line"])

    def _on_callback_done(self, e: dict) -> None:
        self.running.pop((e["tracer"], e["task"]), None)

    def _on_reset(self, e: dict) -> None:
        t = self._task(e["task"])
        if e["cleared"]:
            self._close_epoch(e, t, "the return to user space")

    def _on_exit(self, e: dict) -> None:
        t = self._task(e["task"])
        t.exiting = e["line"]

    def _on_exit_done(self, e: dict) -> None:
        t = self._task(e["task"])
        self._close_epoch(e, t, "the task exited")

    def _on_stack(self, e: dict) -> None:
        pid, entry = e["task"], e["entry"]
        where = f"task {pid} entry {entry}"
        self.stacks += 1
        self.failed_stacks += stack_failed(e)
        self.causes.update(stack_causes(e))
        for v in e["verdicts"]:
            pair = (v["unwinder"], v["oracle"])
            self.verdicts.setdefault(pair, Counter())[v["verdict"]] += 1
            divergences = v.get("divergences", [])
            unexplained = [d for d in divergences if d["cause"] is None or d.get("cross") == "contradicted"]
            if v["verdict"] == "failure":
                if unexplained:
                    text = unexplained[0]["text"]
                elif not divergences and v.get("reason"):  # a failure that is no divergence (a delivery's)
                    text = v["reason"]
                elif divergences:
                    text = divergences[0]["text"]
                    self._bad(e, f"{where}: {'/'.join(pair)} verdict is failure, but none of its "
                              f"{len(divergences)} divergence(s) lacks a cause")
                else:
                    text = "(no divergence, no reason)"
                    self._bad(e, f"{where}: {'/'.join(pair)} verdict is failure, with neither a divergence "
                              f"nor a reason")
                self.failures.append(StackFailure(e["line"], pid, entry, v["unwinder"], v["oracle"], text))
            elif unexplained and v["verdict"] != "not checked":
                self._bad(e, f"{where}: {'/'.join(pair)} verdict is {v['verdict']}, but a {unexplained[0]['kind']} "
                          f"divergence has no cause ({unexplained[0]['text']})")
            elif v["verdict"] == "agree" and divergences:
                self._bad(e, f"{where}: {'/'.join(pair)} verdict is agree, with {len(divergences)} divergence(s)")
        self._check_stack_trace(e, where)

    def _check_stack_trace(self, e: dict, where: str) -> None:
        pid = e["task"]
        unwinder = e.get("unwinder")
        if unwinder is None:  # not named: the one unwinder the verdicts name, if they agree
            named = {v["unwinder"] for v in e["verdicts"]}
            unwinder = named.pop() if len(named) == 1 else None
        if unwinder is None or unwinder not in e["frames"]:
            self._bad(e, f"{where}: stack record has no frames of its unwinder ({unwinder or 'not named'})")
            return
        key = (pid, "epoch", e["epoch"]) if "epoch" in e else (pid, "entry", e["entry"])
        epoch = f"epoch {e['epoch']}" if "epoch" in e else "this entry"
        got = trace_hash(row[0] for row in e["frames"][unwinder])
        callback = self.delivered.get(key)
        if key in self.walked:
            want, line = self.walked[key]
            source = "walked"
        elif callback is not None:
            want, _, line = callback
            source = "delivered by the callback"
        else:
            self._bad(e, f"{where}: stack record, but no walk or callback of this task in {epoch} before it")
            return
        if got != want:
            self._bad(e, f"{where}: stack record's {unwinder} frames ({len(e['frames'][unwinder])}, trace {got}) "
                      f"are not the trace {source} in {epoch} at line {line} ({want})")
        if callback is not None and "cookie" in e and e["cookie"] != callback[1]:
            self._bad(e, f"{where}: stack record's cookie {e['cookie']:#x} is not the one the callback at line "
                      f"{callback[2]} delivered ({callback[1]:#x})")

    def _on_end(self, e: dict) -> None:
        self.end = e
        if e["stacks"] != self.stacks:
            self._bad(e, f"end record counts {e['stacks']} stack(s), the log has {self.stacks} stack record(s)")
        if "failures" in e and e["failures"] != self.failed_stacks:
            self._bad(e, f"end record counts {e['failures']} failure(s), the log has {self.failed_stacks} stack "
                      f"record(s) with a failure verdict")
        if "causes" in e:
            said = {k: n for k, n in e["causes"].items() if n}
            for cause in sorted(set(said) | set(self.causes)):
                # not mutated (equivalent: a missing cause compares unequal as None as it does
                # as 0, since the stack records' counts are at least 1)
                if said.get(cause, 0) != self.causes[cause]:  # pragma: no mutate
                    self._bad(e, f"end record counts {said.get(cause, 0)} divergence(s) explained by {cause}, "
                              f"the stack records {self.causes[cause]}")

    def verdict(self) -> Verdict:
        end = self.end or {}
        return Verdict(
            self.count,
            list(self.violations),
            complete=self.last is not None and self.last["ev"] == "end",
            last_line=self.last["line"] if self.last is not None else 0,
            end_reason=end.get("reason"),
            requests=end.get("requests"),
            errors=list(end.get("errors", [])),
            stacks=self.stacks,
            failed_stacks=self.failed_stacks,
            verdicts={pair: Counter(c) for pair, c in self.verdicts.items()},
            causes=Counter(self.causes),
            failures=list(self.failures),
        )


def check_events(events: Iterable[dict]) -> Verdict:
    """Check parsed events (dicts as written by :class:`~harness.deferred.log.EventLog`)."""
    checker = Checker()
    for event in events:
        checker.feed(dict(event))
    return checker.verdict()


def check_lines(lines: Iterable[str], loads: Callable[[str], object] = loads) -> Verdict:
    """Check JSONL text; raises :class:`LogFormatError` naming the first line that is not what the
    writer writes (:class:`~harness.deferred.log.LogReader`: the header, seq, each record's
    fields, the digest, no key twice in an object).  ``loads``: the reader's JSON decoder, as
    :func:`~harness.deferred.log.loads` decodes (a caller checking many logs made of the same
    lines may share their decoding: tests/support/log_mutations.py)."""
    reader = LogReader(loads)
    verdict = check_events(reader.events(lines))
    verdict.version, verdict.sealed = reader.version, reader.sealed
    return verdict
