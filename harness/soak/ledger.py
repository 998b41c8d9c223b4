"""The soak's ledger: every request of a soak accounted for, in memory bounded by the live tasks.

:class:`Ledger` reads the deferred model's events as they are written (:class:`LedgerLog`, never
keeping them) and accounts for every request that returned 0: one callback per tracer, at the
return to user space or at exit, or none because its tracer was cancelled first; anything else is
*lost*.  Pure: it sees only the model's event records (tested on event streams of the real model).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import IO

from ..deferred.log import EventLog

__all__ = ["Ledger", "LedgerLog"]


@dataclass
class _LedgerTask:
    cookie: int = 0
    owed: collections.Counter = field(default_factory=collections.Counter)  # tracer -> requests owed
    called: collections.Counter = field(default_factory=collections.Counter)  # tracer -> callbacks
    exiting: bool = False


class Ledger:
    """Accounts for the model's events one by one; keeps state per live task only.

    Every request that returned 0 ends as exactly one of: ``delivered`` (its callback ran at a
    return to user space), ``delivered_at_exit`` (in ``do_exit()``), ``cancelled`` (its tracer
    was cancelled before the callback ran), ``lost`` (the epoch ended without it).  Problems:
    ``duplicated`` (a callback nothing owed: a second one, or one without a request),
    ``after_cancel`` (a callback of a cancelled tracer), ``cookie_reuse`` (an entry's cookie not
    above every earlier entry's cookie of its CPU: a cookie given to two entries, or out of
    order), ``cookie_mismatch`` (two cookies in one entry).  ``messages`` keeps the first few."""

    MESSAGES_KEPT = 20

    def __init__(self) -> None:
        self.profile = ""
        self.tasks: dict[int, _LedgerTask] = {}
        self.cancelled: set[str] = set()
        self.last_cookie: dict[int, int] = {}  # CPU (mainline) or 0 (seed-v10) -> highest so far
        self.counts: collections.Counter = collections.Counter()
        self.messages: list[str] = []
        self.events = 0

    def _bad(self, what: str, event: dict, text: str) -> None:
        self.counts[what] += 1
        if len(self.messages) < self.MESSAGES_KEPT:
            self.messages.append(f"line {event.get('seq', '?')}: {what}: {text}")

    def _task(self, pid: int) -> _LedgerTask:
        t = self.tasks.get(pid)
        if t is None:
            t = self.tasks[pid] = _LedgerTask()
        return t

    def _cookie(self, event: dict, t: _LedgerTask, cookie: int) -> None:
        if t.cookie:
            if cookie != t.cookie:
                self._bad("cookie_mismatch", event, f"task {event['task']}: cookie {cookie:#x} in an entry "
                          f"whose cookie is {t.cookie:#x}")
            return
        t.cookie = cookie
        self.counts["cookies"] += 1
        if self.profile == "mainline":
            key, order = cookie & 0xFFFFFFFF, cookie >> 32  # {u32 cpu + 1 (low); u32 cnt (high)}
        else:
            key, order = 0, cookie  # local_clock()
        last = self.last_cookie.get(key)
        if last is not None and order <= last:
            self._bad("cookie_reuse", event, f"task {event['task']}: new entry's cookie {cookie:#x} is not "
                      f"above an earlier entry's ({last:#x} on the same CPU)")
        else:
            self.last_cookie[key] = order

    def _close(self, event: dict, pid: int) -> None:
        t = self.tasks.get(pid)
        if t is None:
            return
        for tracer, n in t.owed.items():
            if n:
                self._bad("lost", event, f"task {pid}: {n} request(s) of {tracer} returned 0, no callback "
                          f"before the entry ended")
                self.counts["lost"] += n - 1
        t.owed.clear()
        t.called.clear()
        t.cookie = 0

    def feed(self, e: dict) -> None:
        self.events += 1
        ev = e["ev"]
        if ev == "header":
            self.profile = e["profile"]
        elif ev in ("task", "fork"):
            self.tasks[e["child"] if ev == "fork" else e["task"]] = _LedgerTask()
        elif ev == "init":
            self.cancelled.discard(e["tracer"])
        elif ev == "cancel":
            tracer = e["tracer"]
            self.cancelled.add(tracer)
            self.counts["cancels"] += 1
            for t in self.tasks.values():
                self.counts["cancelled"] += t.owed.pop(tracer, 0)
        elif ev == "request":
            t = self._task(e["task"])
            self.counts[f"ret {e['ret']}"] += 1
            if e["ret"] < 0:
                return
            self._cookie(e, t, e["cookie"])
            if e["ret"] == 0:
                self.counts["owed"] += 1
                if self.profile == "mainline" and t.owed[e["tracer"]]:
                    # a nested request of the same tracer (old & bit truncated to int): one call serves both
                    self.counts["shared"] += 1
                else:
                    t.owed[e["tracer"]] += 1
        elif ev == "callback":
            t = self._task(e["task"])
            tracer = e["tracer"]
            self.counts["callbacks"] += 1
            if tracer in self.cancelled:
                self._bad("after_cancel", e, f"task {e['task']}: callback of {tracer} after its cancel")
            t.called[tracer] += 1
            if t.owed[tracer]:
                t.owed[tracer] -= 1
                self.counts["delivered_at_exit" if t.exiting else "delivered"] += 1
            else:
                self._bad("duplicated", e, f"task {e['task']}: callback of {tracer} that no request in this "
                          f"entry is owed (callback {t.called[tracer]} of this entry)")
            self._cookie(e, t, e["cookie"])
        elif ev == "reset":
            if e["cleared"]:
                self._close(e, e["task"])
        elif ev == "exit":
            self._task(e["task"]).exiting = True
        elif ev == "exit_done":
            self._close(e, e["task"])
            self.tasks.pop(e["task"], None)

    @property
    def pending(self) -> int:
        """Requests owed a callback in entries that have not ended yet."""
        return sum(sum(t.owed.values()) for t in self.tasks.values())

    def problems(self) -> int:
        return sum(self.counts[k] for k in ("lost", "duplicated", "after_cancel", "cookie_reuse", "cookie_mismatch"))


class LedgerLog(EventLog):
    """The run's event log: written to disk, fed to the ledger, not kept in memory."""

    def __init__(self, fp: IO[str] | None, ledger: Ledger):
        super().__init__(fp, keep=False)
        self.ledger = ledger

    def emit(self, ev: str, **fields) -> dict:
        event = super().emit(ev, **fields)
        self.ledger.feed(event)
        return event
