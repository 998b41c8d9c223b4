"""Lockstep: the deferred-unwinding model driven by the guest kernel's own ``unwind_deferred``
events, and every event compared (``harness kernel-diff``).

The live part (:mod:`harness.lockstep.driver`) stops the guest kernel in its own code and
turns each stop into an :class:`Event`; this module is pure: it takes those events in the order
the kernel produced them, drives :class:`~harness.deferred.model.DeferredModel` with the same
calls (same task, same CPU, same order) and compares what the kernel did with what the model
does.  A recorded event list replays offline (``Event.from_dict``), which is how the unit tests
check it.

Kernel points (7.x, ``kernel/unwind/deferred.c``; all real functions there, checked in the
kernel's own text: see the live part):

=================== =========================================== ===================================
event               kernel point                                what it carries
=================== =========================================== ===================================
``request``         ``unwind_deferred_request()`` entry and the  the tracer's work, the return value
                    instruction its return address names         (rax), ``*cookie``, ``info->id``
``task_work``       ``unwind_deferred_task_work()`` entry        the mask and ``cache->nr_entries``
                                                                 before the walk; our own walk of
                                                                 the same user registers
``walk``            ``unwind_user()`` entry, called from         (the kernel walked the stack)
                    ``unwind_user_faultable()``
``callback``        the indirect call of ``work->func`` in       the work, the cookie, the trace
                    ``process_unwind_deferred()``                (``trace->entries[0..nr]``)
``return``          the return-to-user points (after            (``unwind_reset_info()`` is inlined
                    ``unwind_reset_info()``)                     into the exit path: no symbol)
``exiting``         in ``exit_signals()``, after the store of   (PF_EXITING is set from here)
                    PF_EXITING
``task_exit``       ``unwind_deferred_task_exit()`` entry        the mask (PENDING?) and our walk
``task_exit_done``  its return                                   (the exit's callbacks are over)
``fork``            ``unwind_task_init(p)`` in copy_process()    the new task
=================== =========================================== ===================================

Tasks are identified by their ``task_struct`` address (a freed one can be reused: ``fork`` starts
a fresh model task there); pids are for the printout.

What is compared, and counted:

* ``request.ret`` and ``request.cookie``: the return value and the cookie handed back;
* ``task_work``: that the model had task work queued when the kernel ran it;
* at the end of each task work (the task's next event of another kind): ``walks`` (0 = the
  cache was reused, 1 = the stack was walked), the ``callbacks`` in order (tracer, cookie), and
  each callback's ``trace`` (the kernel's cache against the model's, which is our unwinder's walk
  of the same registers);
* at the end of each kernel entry (return to user space, or exit): ``entry_walks`` and
  ``entry_callbacks`` (callbacks per tracer in that entry);
* ``exit_pending``: whether work was pending when the task exited.

A difference is printed with both sides; under a profile other than the kernel's own
(``mainline``), differences that the profile's documented revision changes explain are
*expected* and named (see :data:`EXPECTED`), the rest unexplained.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace

from ..deferred.model import CONTEXT_KINDS, IRQ, Context, DeferredModel, UnwindWork
from ..deferred.profile import PF_KTHREAD, Profile
from ..errors import EXIT_USAGE, HarnessError
from ..kernel.btf import BtfLookupError

__all__ = [
    "EVENT_KINDS", "EXPECTED", "CallMatcher", "Difference", "Event", "LockstepError", "Lockstep",
    "Summary", "deferred_support",
]

EVENT_KINDS = ("request", "task_work", "walk", "callback", "return", "exiting", "task_exit",
               "task_exit_done", "fork")
COMPARED = ("request.ret", "request.cookie", "task_work", "walks", "callbacks", "trace", "entry_walks",
            "entry_callbacks", "exit_pending")

# What the control profile's revision does differently from the kernel, by compared item: the
# name printed with each such difference, and the test a difference must pass to get that name
# (kernel side, model side); one that fails it stays unexplained.  Only for a profile that is not
# the kernel's own.
def _same_tracers(k, m) -> bool:
    return [n for n, _ in k] == [n for n, _ in m]


def _max_entries_512(k, m) -> bool:
    return len(k) == 510 and len(m) == 512 and list(m[:510]) == list(k)


EXPECTED: dict[str, dict[str, str]] = {
    "seed-v10": {
        "request.cookie": "seed-v10 cookie scheme: a local_clock() timestamp, not mainline's "
                          "(cpu + 1) | per-CPU counter << 32",
        "callbacks": "seed-v10 cookie scheme (the callbacks get the request's timestamp)",
        "request.ret": "seed-v10 returns UNWIND_ALREADY_EXECUTED (2) where mainline returns 1",
        "trace": "seed-v10 UNWIND_MAX_ENTRIES is 512, mainline's 510",
        "entry_callbacks": "seed-v10 calls a tracer again after a new request in the same entry",
    },
}
EXPECTED_TEST = {
    "seed-v10": {
        "request.cookie": lambda k, m: True,
        "callbacks": _same_tracers,
        "request.ret": lambda k, m: (k, m) == (1, 2),
        "trace": _max_entries_512,
        "entry_callbacks": lambda k, m: set(k) == set(m) and all(m[n] > k[n] for n in k),
    },
}


class LockstepError(HarnessError):
    """A recorded event is malformed (a missing field, an unknown kind): bad input."""

    exit_code = EXIT_USAGE


_ALWAYS_WRITTEN = ("seq", "kind", "task", "pid", "cpu", "ret")


@dataclass(frozen=True)
class Event:
    """One thing the kernel did, observed at a stop.  ``seq`` orders all events of a run."""

    seq: int
    kind: str
    task: int  # task_struct address (fork: the parent's)
    pid: int
    cpu: int
    comm: str = ""
    work: int = 0  # request, callback: the struct unwind_work
    ret: int | None = None  # request: unwind_deferred_request()'s return value
    cookie: int = 0  # request: *cookie; callback: the cookie argument
    task_id: int = 0  # request: task->unwind_info.id after the request
    mask: int = 0  # request/task_work/task_exit: task->unwind_info.unwind_mask
    cache_nr: int | None = None  # task_work/task_exit: cache->nr_entries before (None: no cache yet)
    context: str = IRQ  # request: nmi | irq | syscall (from preempt_count)
    user_mode: bool = True  # request: user_mode(task_pt_regs(current))
    kthread: bool = False  # request: PF_KTHREAD
    trace: tuple[int, ...] = ()  # callback: the kernel's trace; task_work/task_exit: our walk
    walk_error: str = ""  # task_work/task_exit: why our walk could not be made
    child: int = 0  # fork: the new task_struct
    point: str = ""  # return: which return-to-user point

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise LockstepError(f"event {self.seq}: unknown kind {self.kind!r} (known: {', '.join(EVENT_KINDS)})")
        if self.kind == "request" and self.ret is None:
            raise LockstepError(f"event {self.seq}: a request without its return value")
        if self.context not in CONTEXT_KINDS:
            raise LockstepError(f"event {self.seq}: unknown context {self.context!r} "
                                f"(known: {', '.join(CONTEXT_KINDS)})")

    def to_dict(self) -> dict:
        """The event as a line of the event file (``json.dumps`` writes the trace as a list): the
        fields every event has (and ``ret``), and each other field whose value is not its default
        (``from_dict`` gives it back).  Not a list of falsy values: ``user_mode`` is True by
        default, and False is what says so."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name in _ALWAYS_WRITTEN or getattr(self, f.name) != f.default}

    @classmethod
    def from_dict(cls, d: Mapping) -> Event:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise LockstepError(f"event {d.get('seq', '?')}: unknown fields {sorted(unknown)}")
        try:
            kw = dict(d)
            if "trace" in kw:
                kw["trace"] = tuple(int(x) for x in kw["trace"])
            return cls(**kw)
        except TypeError as exc:
            raise LockstepError(f"event {d.get('seq', '?')}: {exc}") from exc


class CallMatcher:
    """Pairs a function's entry with its return: the return stops at the return address read at
    entry, in the same context, with the stack pointer 8 above the entry's (the return address
    popped).  The context is the vCPU for a call that cannot sleep (a request runs with
    interrupts off), the task for one that can (the exit's callbacks: the task may move to another
    vCPU meanwhile).  Pure: the live part feeds it (context, rsp) pairs."""

    def __init__(self) -> None:
        self._open: dict[tuple[int, int], object] = {}

    def enter(self, cpu: int, rsp: int, what) -> None:
        self._open[(cpu, rsp + 8)] = what

    def leave(self, cpu: int, rsp: int):
        """What :meth:`enter` stored for this return, or None (a stop that is no return of ours)."""
        return self._open.pop((cpu, rsp), None)

    def __len__(self) -> int:
        return len(self._open)


@dataclass(frozen=True)
class Difference:
    seq: int
    what: str  # one of COMPARED
    pid: int
    entry: int
    kernel: object
    model: object
    expected: str = ""  # the named reason, when the profile's revision explains it

    def describe(self) -> str:
        def show(v):
            if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 0xFFFF:
                return hex(v)
            if isinstance(v, (list, tuple)):
                return "[" + ", ".join(show(x) for x in v) + "]"
            return repr(v)  # strings quoted; of the rest compared (None, bools, dicts) repr is str

        tag = f"expected ({self.expected})" if self.expected else "UNEXPLAINED"
        return (f"#{self.seq} pid {self.pid} entry {self.entry}: {self.what}: "
                f"kernel {show(self.kernel)} | model {show(self.model)}  [{tag}]")


@dataclass
class Summary:
    profile: str
    compared: collections.Counter = field(default_factory=collections.Counter)  # what -> compared
    equal: collections.Counter = field(default_factory=collections.Counter)
    differences: list[Difference] = field(default_factory=list)
    kernel: collections.Counter = field(default_factory=collections.Counter)  # event totals
    requests_by_ret: collections.Counter = field(default_factory=collections.Counter)
    notes: list[str] = field(default_factory=list)

    @property
    def n_compared(self) -> int:
        return sum(self.compared.values())

    @property
    def n_equal(self) -> int:
        return sum(self.equal.values())

    @property
    def unexplained(self) -> list[Difference]:
        return [d for d in self.differences if not d.expected]

    @property
    def expected(self) -> list[Difference]:
        return [d for d in self.differences if d.expected]

    def merge(self, other: Summary) -> None:
        self.compared.update(other.compared)
        self.equal.update(other.equal)
        self.differences.extend(other.differences)
        self.kernel.update(other.kernel)
        self.requests_by_ret.update(other.requests_by_ret)
        self.notes.extend(other.notes)

    def rows(self) -> list[tuple[str, int, int]]:
        """(item, compared, equal) for each item compared at least once, in :data:`COMPARED`'s order
        (the order :func:`harness.report.lockstep.lockstep_lines` prints them in)."""
        return [(what, self.compared[what], self.equal[what]) for what in COMPARED if self.compared[what]]


@dataclass
class _Work:
    """One run of the task work (or of the exit's process_unwind_deferred) on both sides."""

    seq: int
    kernel_walks: int = 0
    kernel_callbacks: list = field(default_factory=list)  # (tracer, cookie, trace)
    model_walks: int = 0
    model_callbacks: list = field(default_factory=list)


@dataclass
class _TaskState:
    model: object  # harness.deferred.model.Task
    pid: int = 0  # set by each event of the task (a forked child has none until its first)
    comm: str = ""
    work: _Work | None = None  # the task work in progress (kernel side still reporting)
    return_gen: object = None  # the model's return_to_user_steps, suspended before the reset
    exit_gen: object = None  # the model's exit_steps, suspended after PF_EXITING
    entry_kernel_walks: int = 0
    entry_model_walks: int = 0
    entry_kernel_callbacks: collections.Counter = field(default_factory=collections.Counter)
    entry_model_callbacks: collections.Counter = field(default_factory=collections.Counter)
    walk_trace: tuple[int, ...] | None = None  # our walk for the model's next unwind()
    entry_active: bool = False  # something of ours happened in this entry (it is compared at its end)


class Lockstep:
    """Feed it the kernel's events in order (:meth:`feed`), then :meth:`finish`.

    ``tracers`` maps each ``struct unwind_work`` address to a name (``perf``); they are
    registered with the model in that order, as the kernel registered them (the live part
    checks that the bits agree).  ``percpu_ctr`` is the kernel's ``unwind_ctx_ctr`` per CPU when
    the run starts (mainline cookies continue from it).
    """

    def __init__(self, profile: Profile, tracers: Mapping[int, str], percpu_ctr: Mapping[int, int] | None = None,
                 kernel_profile: str = "mainline"):
        self.profile = profile
        self.expected = EXPECTED.get(profile.name, {}) if profile.name != kernel_profile else {}
        # not mutated (equivalent: read only for an item self.expected names, and EXPECTED and EXPECTED_TEST
        # name the same profiles and items: test_compare_exit.py pins it)
        self.expected_test = EXPECTED_TEST.get(profile.name, {})  # pragma: no mutate
        self.model = DeferredModel(profile, self._walk)
        self.works: dict[int, UnwindWork] = {}
        for addr, name in tracers.items():
            w = UnwindWork(self._callback, name=name)
            self.model.init(w)
            self.works[addr] = w
        self.model.percpu_ctr.update(percpu_ctr or {})
        self.tasks: dict[int, _TaskState] = {}
        self.summary = Summary(profile.name)
        # The task of the event being fed: the model calls _walk and _callback only from feed(), which
        # sets it first (not mutated: equivalent, no value given here is ever read)
        self._current: _TaskState | None = None  # pragma: no mutate (equivalent: feed() sets it before a read)
        self.last_seq = -1

    # -- model hooks -----------------------------------------------------------------------------
    def _walk(self, mtask) -> list[int]:
        st = self._current  # the model walks only in feed(): st is the event's task
        if st.work is not None:
            # not mutated (equivalent: the model walks at most once per process_unwind_deferred(), and a
            # task work of ours spans one of them: `= 1` is `+= 1`)
            st.work.model_walks += 1  # pragma: no mutate
        st.entry_model_walks += 1
        trace = st.walk_trace
        if trace is None:
            self.summary.notes.append(f"the model walked pid {mtask.pid} where the kernel made no walk of ours "
                                      f"(no registers were read there): an empty trace")
            return []
        return list(trace)

    def _callback(self, work, trace, cookie) -> None:
        st = self._current  # the model calls back only in feed(): st is the event's task
        if st.work is not None:
            st.work.model_callbacks.append((work.name, cookie, tuple(trace)))
        st.entry_model_callbacks[work.name] += 1

    # -- comparison ------------------------------------------------------------------------------
    def _compare(self, seq: int, what: str, st: _TaskState, kernel, model) -> bool:
        self.summary.compared[what] += 1
        if kernel == model:
            self.summary.equal[what] += 1
            return True
        # not mutated (equivalent: EXPECTED and EXPECTED_TEST name the same items, test_compare_exit.py pins
        # it, so an item without a name meets the default test, which names nothing)
        reason = self.expected.get(what, "")  # pragma: no mutate
        if reason and not self.expected_test.get(what, lambda k, m: False)(kernel, model):  # pragma: no mutate
            reason = ""
        self.summary.differences.append(Difference(seq, what, st.pid, st.model.entry, kernel, model, reason))
        return False

    def _tracer(self, work: int) -> str:
        w = self.works.get(work)
        return w.name if w is not None else f"unregistered work {work:#x}"

    # -- tasks -----------------------------------------------------------------------------------
    def _task(self, ev: Event) -> _TaskState:
        """The event's task, named by the event (pid; comm when the event has one)."""
        st = self.tasks.get(ev.task)
        if st is None or st.model.dead:
            # A task the model has not seen (it existed before the run), or a task_struct that was
            # freed and reused: its unwind state starts empty, as unwind_task_init() leaves it.
            st = self.tasks[ev.task] = _TaskState(self.model.spawn())
        st.pid, st.comm = ev.pid, ev.comm or st.comm
        return st

    def _enter(self, st: _TaskState, ev: Event) -> None:
        """The task is in the kernel: a new entry for the model if it was last seen returning."""
        m = st.model
        if not m.in_kernel and not m.dead:
            self.model.enter_kernel(m, cpu=ev.cpu)
            self._reset_entry(st)
        m.cpu = ev.cpu

    @staticmethod
    def _reset_entry(st: _TaskState) -> None:
        st.entry_kernel_walks = st.entry_model_walks = 0
        st.entry_kernel_callbacks = collections.Counter()
        st.entry_model_callbacks = collections.Counter()
        st.entry_active = False

    def open_tasks(self) -> list[int]:
        """Tasks (by address) that still owe the model an event: pending or unreset state, a task
        work in progress, an exit under way.  Return-to-user points must be watched meanwhile."""
        out = []
        for addr, st in self.tasks.items():
            m = st.model
            if m.dead:
                continue
            info = m.info
            if (info.unwind_mask or info.id or info.timestamp or m.task_work_queued or st.work is not None
                    or st.return_gen is not None or st.exit_gen is not None):
                out.append(addr)
        return out

    def wants_return(self, addr: int) -> bool:
        """Whether a return to user space of this task is an event for the model: it has state to
        reset or an entry to close (returns of other tasks are nothing to it)."""
        st = self.tasks.get(addr)
        return st is not None and not st.model.dead and (addr in self.open_tasks() or st.entry_active)

    # -- events ----------------------------------------------------------------------------------
    def feed(self, ev: Event) -> None:
        if ev.seq <= self.last_seq:
            raise LockstepError(f"event {ev.seq} after event {self.last_seq}: events must come in order")
        self.last_seq = ev.seq
        self.summary.kernel[ev.kind] += 1
        if ev.kind == "fork":
            self._on_fork(ev)
            return
        st = self._task(ev)
        if ev.kind not in ("walk", "callback", "request"):
            # The task work's walk and callbacks are over; a request is not its end (an interrupt
            # during the walk makes one, and it reuses the state of the entry).
            self._close_work(st)
        self._current = st
        try:
            getattr(self, f"_on_{ev.kind}")(st, ev)
        finally:
            self._current = None  # pragma: no mutate (equivalent: as in __init__, read only inside feed())

    def _on_fork(self, ev: Event) -> None:
        parent = self._task(ev)
        self._enter(parent, ev)
        child = self.model.fork(parent.model)
        self.tasks[ev.child] = _TaskState(child, 0, parent.comm)

    def _on_request(self, st: _TaskState, ev: Event) -> None:
        m = st.model
        # PF_KTHREAD is an input (exec by a kernel thread clears it; the model has no such event).
        m.flags = (m.flags | PF_KTHREAD) if ev.kthread else (m.flags & ~PF_KTHREAD)
        self._enter(st, ev)
        st.entry_active = True
        work = self.works.get(ev.work)
        self.summary.requests_by_ret[ev.ret] += 1
        if work is None:
            self.summary.notes.append(f"#{ev.seq}: a request of {self._tracer(ev.work)}, not compared")
            return
        ret, cookie = self.model.request(work, m, ev.cpu, Context(ev.context, ev.user_mode))
        self._compare(ev.seq, "request.ret", st, ev.ret, ret)
        self._compare(ev.seq, "request.cookie", st, ev.cookie, cookie)
        if ev.ret is not None and ev.ret >= 0 and ev.task_id != ev.cookie:
            self.summary.notes.append(f"#{ev.seq}: pid {ev.pid}: the kernel returned cookie {ev.cookie:#x} but "
                                      f"task->unwind_info.id is {ev.task_id:#x}")

    def _start_work(self, st: _TaskState, ev: Event) -> None:
        st.walk_trace = None if ev.walk_error else ev.trace
        st.work = _Work(ev.seq)

    def _on_task_work(self, st: _TaskState, ev: Event) -> None:
        self._enter(st, ev)
        m = st.model
        self._compare(ev.seq, "task_work", st, True, bool(m.task_work_queued))
        if ev.cache_nr:
            self.summary.kernel["cache_valid_at_task_work"] += 1
        self._start_work(st, ev)
        st.entry_active = True
        if st.return_gen is not None:
            # A second task work in this entry: the first run of the model's loop stopped before
            # its reset, which must not happen now; a new run of the loop does the new work.
            st.return_gen.close()
        st.return_gen = self.model.return_to_user_steps(m)
        # Run the model's exit_to_user_mode loop up to the point where interrupts go off: its task
        # work (walk and callbacks) runs now; the reset waits for the kernel's return to user.
        self._advance(st.return_gen, "irqs_off")

    @staticmethod
    def _advance(gen, until: str) -> None:
        """Step a model generator until it yields ``until``, or to its end."""
        for step in gen:
            if step == until:
                return

    def _on_walk(self, st: _TaskState, ev: Event) -> None:
        st.entry_kernel_walks += 1
        if st.work is not None:
            st.work.kernel_walks += 1
        else:
            self.summary.notes.append(f"#{ev.seq}: pid {ev.pid}: unwind_user() outside a task work of ours")

    def _on_callback(self, st: _TaskState, ev: Event) -> None:
        name = self._tracer(ev.work)
        st.entry_kernel_callbacks[name] += 1
        if st.work is not None:
            st.work.kernel_callbacks.append((name, ev.cookie, ev.trace))
        else:
            self.summary.notes.append(f"#{ev.seq}: pid {ev.pid}: a callback outside a task work of ours")

    def _close_work(self, st: _TaskState) -> None:
        w = st.work
        if w is None:
            return
        st.work = None
        self.summary.kernel["cache_reused"] += bool(w.kernel_callbacks and not w.kernel_walks)
        self._compare(w.seq, "walks", st, w.kernel_walks, w.model_walks)
        self._compare(w.seq, "callbacks", st, [(n, c) for n, c, _ in w.kernel_callbacks],
                      [(n, c) for n, c, _ in w.model_callbacks])
        # not mutated (equivalent: strict=None, and zip's default, are strict=False)
        pairs = zip(w.kernel_callbacks, w.model_callbacks, strict=False)  # pragma: no mutate
        for (kn, _, kt), (mn, _, mt) in pairs:
            if kn == mn:
                self._compare(w.seq, "trace", st, list(kt), list(mt))

    def _close_entry(self, st: _TaskState, seq: int) -> None:
        if not st.entry_active:
            self._reset_entry(st)
            return
        self._compare(seq, "entry_walks", st, st.entry_kernel_walks, st.entry_model_walks)
        self._compare(seq, "entry_callbacks", st, dict(st.entry_kernel_callbacks), dict(st.entry_model_callbacks))
        for name, n in st.entry_kernel_callbacks.items():
            if n > 1:
                self.summary.notes.append(f"#{seq}: pid {st.pid}: the kernel called {name} {n} times in one entry")
        self._reset_entry(st)

    def _on_return(self, st: _TaskState, ev: Event) -> None:
        m = st.model
        if not m.in_kernel:
            return  # a return the model has no entry for: the task had no state (returns unwatched)
        gen, st.return_gen = st.return_gen, None
        st.walk_trace = None
        if gen is None:
            gen = self.model.return_to_user_steps(m)
        # not mutated (equivalent: the model yields no "", nor None nor any other word not its own, so
        # each runs the generator to its end)
        self._advance(gen, "")  # pragma: no mutate (to the end: any task work the model still had, then the reset)
        self._close_entry(st, ev.seq)

    def _on_exiting(self, st: _TaskState, ev: Event) -> None:
        self._enter(st, ev)
        # The return to user space the model had suspended will not come (not mutated: equivalent, the
        # kernel makes no return nor task work event of an exiting task, the events that would read it)
        st.return_gen = None  # pragma: no mutate
        st.exit_gen = self.model.exit_steps(st.model)
        self._advance(st.exit_gen, "exiting")

    def _on_task_exit(self, st: _TaskState, ev: Event) -> None:
        if st.exit_gen is None:  # the exiting stop was missed: PF_EXITING is set by now anyway
            self._on_exiting(st, ev)
        kernel_pending = bool(ev.mask & 1)  # UNWIND_PENDING_BIT = 0 (mainline)
        model_pending = bool(st.model.info.unwind_mask & self.profile.pending)
        self._compare(ev.seq, "exit_pending", st, kernel_pending, model_pending)
        self.summary.kernel["task_exit_pending"] += kernel_pending
        if kernel_pending or model_pending:
            # process_unwind_deferred() runs (kernel: only when PENDING is set): its walk and
            # callbacks follow as events until the exit's return.
            st.entry_active = True
            self._start_work(st, ev)
        # The model runs its exit's task work now; the kernel's walk and callbacks follow as events.
        self._advance(st.exit_gen, "task_exit")

    def _on_task_exit_done(self, st: _TaskState, ev: Event) -> None:
        gen, st.exit_gen = st.exit_gen, None
        if gen is not None:
            self._advance(gen, "")  # pragma: no mutate (equivalent: as in _on_return, to the end)
        self._close_entry(st, ev.seq)

    def finish(self) -> Summary:
        """Close what the kernel finished (task works whose last event came); what is still open
        (a task that never returned while we watched) is noted, not compared."""
        for st in self.tasks.values():
            self._close_work(st)
            if not st.model.dead and st.model.in_kernel and (st.entry_kernel_walks or st.entry_kernel_callbacks):
                self.summary.notes.append(f"pid {st.pid}: its last entry was still open at the end (not compared)")
        return self.summary


def deferred_support(btf, symbols: Mapping[str, int] | None = None) -> tuple[bool, str]:
    """Whether this kernel has deferred unwinding and perf's deferred callchains, from its BTF
    (and kallsyms, once booted): (yes or no, why)."""
    try:
        btf.member_offset("task_struct", "unwind_info")
        btf.sizeof("unwind_task_info")
    except (BtfLookupError, KeyError):
        return False, ("no deferred user unwinding: task_struct has no unwind_info in its BTF "
                       "(unwind_deferred is in 6.17+, perf's deferred callchains in 6.19+)")
    if symbols is not None:
        need = ("unwind_deferred_request", "unwind_deferred_task_work", "unwind_deferred_task_exit",
                "process_unwind_deferred", "unwind_user", "unwind_user_faultable", "perf_unwind_work")
        missing = [n for n in need if n not in symbols]
        if missing:
            return False, f"no perf deferred callchains or unwind_deferred points: kallsyms lacks {', '.join(missing)}"
    return True, "unwind_deferred and perf's deferred callchains are there"


def replay(events: Iterable[Event], profile: Profile, tracers: Mapping[int, str],
           percpu_ctr: Mapping[int, int] | None = None) -> Summary:
    """Run recorded events through a fresh lockstep: the offline form of ``kernel-diff``."""
    ls = Lockstep(profile, tracers, percpu_ctr)
    for ev in events:
        ls.feed(ev)
    return ls.finish()


def renumber(events: Iterable[Event], start: int = 0) -> list[Event]:
    """Events with consecutive ``seq`` (for tests that build event lists by hand)."""
    return [replace(ev, seq=start + i) for i, ev in enumerate(events)]

