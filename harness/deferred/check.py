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

:func:`check_events` returns a :class:`Verdict`; :func:`main_check` is the ``harness check LOG``
command (exit 0 clean, 1 violations, 2 unreadable input).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Iterable

from .log import LogFormatError, read_events
from .profile import EINVAL


@dataclass(frozen=True)
class Violation:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class Verdict:
    events: int = 0
    violations: list[Violation] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.violations

    def messages(self) -> list[str]:
        return [str(v) for v in self.violations]


@dataclass
class _Epoch:
    index: int
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
    dead: bool = False
    epoch: _Epoch = field(default_factory=lambda: _Epoch(0))
    cookies: dict[int, int] = field(default_factory=dict)  # cookie -> line, earlier epochs


class Checker:
    """Feed events one by one (incremental); ``violations`` grows as they are found."""

    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.profile = ""
        self.max_entries = 0
        self.tasks: dict[int, _TaskState] = {}
        self.cancelled: dict[str, int] = {}  # tracer -> line of its cancel
        self.running: dict[tuple[str, int], int] = {}  # (tracer, pid) -> line of callback start
        self.count = 0

    # helpers
    def _bad(self, event: dict, message: str) -> None:
        self.violations.append(Violation(event.get("line", event.get("seq", 0)), message))

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
                if tracer in self.cancelled and self.cancelled[tracer] > line:
                    continue
                self._bad(event, f"{self._where(t, tracer)}: request at line {line} returned 0 but the "
                          f"callback never ran before {why}")
        if ep.cookie:
            t.cookies[ep.cookie] = ep.cookie_line
        t.epoch = _Epoch(ep.index + 1)

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
        self._task(e["task"])

    def _on_fork(self, e: dict) -> None:
        child = self._task(e["child"])
        child.entry = 1

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
        if e["nr"] == 0:
            return
        if ep.walk_hash is not None:
            self._bad(e, f"{self._where(t)}: stack walked a second time in one entry (first walk at "
                      f"line {ep.walk_line})")
        ep.walk_hash, ep.walk_line = e["trace_hash"], e["line"]

    def _on_trace(self, e: dict) -> None:
        t = self._task(e["task"])
        if e["ret"] == 0 and e.get("nr", 0):
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
        if e.get("nr", 1):
            self._check_trace(e, t, "callback", tracer)
        self.running[(tracer, t.pid)] = e["line"]

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
        t.dead = True

    def verdict(self) -> Verdict:
        return Verdict(self.count, list(self.violations))


def check_events(events: Iterable[dict]) -> Verdict:
    """Check parsed events (dicts as written by :class:`~harness.deferred.log.EventLog`)."""
    checker = Checker()
    for event in events:
        checker.feed(dict(event))
    return checker.verdict()


def check_lines(lines: Iterable[str]) -> Verdict:
    """Check JSONL text; raises :class:`LogFormatError` naming the first malformed line."""
    return check_events(read_events(lines))


def main_check(argv: list[str] | None = None) -> int:
    """``harness check LOG``: 0 when the log is clean, 1 with a message per violation, 2 when unreadable."""
    parser = argparse.ArgumentParser(prog="harness check", description="check an unwind_deferred event log")
    parser.add_argument("log", help="JSONL event log written by harness.deferred")
    args = parser.parse_args(argv)
    return _run_check(args.log)


def _run_check(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as fp:
            verdict = check_lines(fp)
    except OSError as exc:
        print(f"harness check: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:
        print(f"harness check: {path} is not UTF-8 text: {exc}", file=sys.stderr)
        return 2
    except LogFormatError as exc:
        print(f"harness check: {path}: {exc}", file=sys.stderr)
        return 2
    if verdict.clean:
        print(f"{path}: clean ({verdict.events} events)")
        return 0
    for message in verdict.messages():
        print(f"{path}: {message}")
    print(f"{path}: {len(verdict.violations)} violation(s) in {verdict.events} events")
    return 1
