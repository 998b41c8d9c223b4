"""A step-by-step Python model of ``kernel/unwind/deferred.c`` (deferred user-space unwinding).

Events in (tracer registration, requests from NMI/IRQ/syscall context, returns to user space,
forks, exits, cancels), tracer callbacks and a JSONL log (``log.py``) out.  Where the kernel revision
matters the model asks its :class:`~harness.deferred.profile.Profile`.

Every operation that the kernel performs in several atomic steps exists twice: ``*_steps()`` is a
generator that performs one atomic step per ``next()`` and yields the step's name (its return value,
via ``StopIteration.value``, is the kernel function's result), and the plain method runs the
generator to completion.  A test interleaves generators the way the hardware can: an NMI request
run to completion between two steps of an IRQ request on the same task, an IRQ request between
two steps of the task work, a cancel on another CPU while a callback runs.  Nested contexts must
finish before the context they interrupted resumes, as on a real CPU; the model does not police
that (the stateful test does).

Pure domain code: no sockets, no subprocesses.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field

from ..errors import HarnessError
from .log import LOG_VERSION, EventLog, trace_hash
from .profile import (
    EBUSY,
    EINVAL,
    PF_EXITING,
    PF_KTHREAD,
    QUEUE,
    Profile,
)

NMI = "nmi"
IRQ = "irq"
SYSCALL = "syscall"
CONTEXT_KINDS = (NMI, IRQ, SYSCALL)

# Steps after which a generator is waiting for another context (a lock, an SRCU grace period).
WAIT_STEPS = frozenset({"mutex_wait", "synchronize_srcu"})

Steps = Generator[str, None, object]


class ModelError(HarnessError):
    """The caller asked for something the kernel cannot do (e.g. a request for a task in user mode)."""


class ModelBlocked(ModelError):
    """A synchronous call would have to wait for another context (use the ``*_steps`` form)."""


@dataclass(frozen=True)
class Context:
    """Where a request comes from: NMI, IRQ or a syscall (task context).

    ``user_mode`` is ``user_mode(task_pt_regs(current))``: whether the registers the task saved on
    entry are user-mode registers; the request fails with -EINVAL when they are not.
    """

    kind: str
    user_mode: bool = True

    def __post_init__(self) -> None:
        if self.kind not in CONTEXT_KINDS:
            raise ValueError(f"context kind must be one of {CONTEXT_KINDS}, not {self.kind!r}")


Callback = Callable[["UnwindWork", tuple, int], None]


@dataclass(eq=False)
class UnwindWork:
    """``struct unwind_work``: one tracer's registration (callback and its bit, -1 when none)."""

    func: Callback
    name: str = ""
    bit: int = -1

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"tracer@{id(self):x}"


@dataclass
class UnwindCache:
    """``struct unwind_cache``: the per-task walk result, valid while ``nr_entries`` is non-zero."""

    nr_entries: int = 0
    entries: tuple[int, ...] = ()
    unwind_completed: int = 0  # mainline only


@dataclass
class UnwindTaskInfo:
    """``struct unwind_task_info`` (``task->unwind_info``), both revisions' fields."""

    unwind_mask: int = 0
    cache: UnwindCache | None = None
    id_cpu: int = 0  # mainline union unwind_task_id: cpu + 1 (low half on little-endian)
    id_cnt: int = 0  # mainline: per-CPU counter value, LSB set (high half)
    timestamp: int = 0  # v10
    nmi_timestamp: int = 0  # v10

    @property
    def id(self) -> int:
        return (self.id_cnt << 32) | self.id_cpu


@dataclass(eq=False)
class Task:
    """A task as far as deferred unwinding cares: pid, flags, ``unwind_info`` and its kernel entry."""

    pid: int
    flags: int = 0
    info: UnwindTaskInfo = field(default_factory=UnwindTaskInfo)
    entry: int = 0  # kernel entries so far; requests belong to entry `entry`
    epoch: int = 0  # stretches between resets that cleared the state
    in_kernel: bool = False
    has_mm: bool = True
    dead: bool = False
    cpu: int = 0
    task_work_queued: int = 0  # times info->work sits on task->task_works (must stay <= 1)
    task_work_running: bool = False
    claims: int = 0  # requests between claiming PENDING and task_work_add()
    running_bits: int = 0  # bits the running task work still has to call
    # Bookkeeping for invariants (not kernel state):
    owed: dict[str, int] = field(default_factory=dict)  # tracer -> bit, request returned 0
    epoch_cookie: int = 0
    old_cookies: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Delivery:
    """One callback invocation as the tracer saw it."""

    tracer: str
    pid: int
    entry: int
    epoch: int
    cookie: int
    trace: tuple[int, ...]


def run(steps: Steps):
    """Drive a ``*_steps`` generator to completion and return its result."""
    try:
        while True:
            step = next(steps)
            if step in WAIT_STEPS:
                steps.close()
                raise ModelBlocked(f"would block at step {step!r}")
    except StopIteration as stop:
        return stop.value


def _default_clock() -> Callable[[], int]:
    counter = itertools.count(1_000_000, 1_000)
    return lambda: next(counter)


class DeferredModel:
    """The unwind_deferred infrastructure of one machine (global tracer mask, tasks, per-CPU data).

    ``unwind(task) -> list[int]`` is the user-stack walker (``unwind_user()``); ``clock()`` stands for
    ``local_clock()`` (seed-v10 cookies); ``log`` receives one JSON line per event.
    """

    def __init__(
        self,
        profile: Profile,
        unwind: Callable[[Task], Iterable[int]],
        *,
        clock: Callable[[], int] | None = None,
        log: EventLog | None = None,
    ):
        self.profile = profile
        self.unwind = unwind
        self.clock = clock or _default_clock()
        self.log = log if log is not None else EventLog(keep=True)
        self.unwind_mask = profile.reserved  # the global mask of taken bits
        self.callbacks: list[UnwindWork] = []  # the callback list (list_add_rcu adds at the head)
        self.callback_mutex: object | None = None
        self.srcu_readers: set[int] = set()
        self._srcu_ids = itertools.count(1)
        self.percpu_ctr: dict[int, int] = {}  # unwind_ctx_ctr
        self.tasks: dict[int, Task] = {}
        self._pids = itertools.count(100)
        self.deliveries: list[Delivery] = []
        self.violations: list[str] = []  # found while stepping (cookie changes within an entry)
        self.log.emit(
            "header",
            profile=profile.name,
            word_bits=profile.word_bits,
            max_entries=profile.max_entries,
            version=LOG_VERSION,
        )

    # ------------------------------------------------------------------ tasks

    def spawn(self, pid: int | None = None, *, kthread: bool = False, cpu: int = 0) -> Task:
        """A task that exists when the model starts, in user mode (or a kernel thread)."""
        pid = next(self._pids) if pid is None else pid
        if pid in self.tasks:
            raise ModelError(f"pid {pid} exists")
        task = Task(pid=pid, flags=PF_KTHREAD if kthread else 0, cpu=cpu, in_kernel=kthread)
        if kthread:
            task.has_mm = False
        self.tasks[pid] = task
        self.log.emit("task", task=pid, flags=task.flags)
        return task

    def fork(self, parent: Task, pid: int | None = None) -> Task:
        """``copy_process()`` calls ``unwind_task_init(p)``: the child's unwind state starts empty.

        The child is in the kernel (it returns to user space through ``ret_from_fork``).  ``pid``:
        the child's pid where the caller knows it (a live guest's), else the model picks one.
        """
        self._require_kernel(parent)
        if pid is not None:
            if pid in self.tasks:
                raise ModelError(f"pid {pid} exists")
        else:
            pid = next(self._pids)
            while pid in self.tasks:
                pid = next(self._pids)
        child = Task(pid=pid, flags=parent.flags & PF_KTHREAD, cpu=parent.cpu, in_kernel=True, entry=1)
        child.has_mm = parent.has_mm
        self.tasks[pid] = child
        self.log.emit("fork", task=parent.pid, child=pid, entry=parent.entry)
        return child

    def enter_kernel(self, task: Task, how: str = SYSCALL, cpu: int | None = None) -> int:
        """The task enters the kernel from user space (syscall, interrupt or exception); a new entry."""
        if task.dead:
            raise ModelError(f"task {task.pid} is dead")
        if task.in_kernel:
            raise ModelError(f"task {task.pid} is already in the kernel (entry {task.entry})")
        if cpu is not None:
            task.cpu = cpu
        task.in_kernel = True
        task.entry += 1
        self.log.emit("enter", task=task.pid, entry=task.entry, epoch=task.epoch, how=how, cpu=task.cpu)
        return task.entry

    def _require_kernel(self, task: Task) -> None:
        if task.dead:
            raise ModelError(f"task {task.pid} is dead")
        if not task.in_kernel:
            raise ModelError(f"task {task.pid} is in user mode: call enter_kernel() first")

    # ------------------------------------------------------------------ tracers

    def init(self, work: UnwindWork) -> int:
        """``unwind_deferred_init()``: take the lowest free bit (``ffz``); -EBUSY when none is left."""
        if self.callback_mutex is not None:
            raise ModelBlocked("callback_mutex is held by a cancel in progress")
        work.bit = -1
        if self.unwind_mask == self.profile.full_mask:
            self.log.emit("init", tracer=work.name, bit=-1, ret=-EBUSY)
            return -EBUSY
        bit = 0
        while self.unwind_mask & (1 << bit):
            bit += 1
        work.bit = bit
        self.unwind_mask |= 1 << bit
        self.callbacks.insert(0, work)  # list_add_rcu(&work->list, &callbacks)
        self.log.emit("init", tracer=work.name, bit=bit, ret=0)
        return 0

    def cancel_steps(self, work: UnwindWork) -> Steps:
        """``unwind_deferred_cancel()``, step by step.

        1. take ``callback_mutex``; ``list_del_rcu``; ``work->bit = -1``; clear the global bit
           (no new request and no new callback of this tracer from here on);
        2. ``synchronize_srcu()``: yields ``"synchronize_srcu"`` while a task work that was already
           walking the callback list (possibly inside this tracer's callback) has not finished;
        3. clear the bit in every task's mask (and mainline's ``unwind_completed``); drop the mutex.
        """
        while self.callback_mutex is not None:
            yield "mutex_wait"
        bit = work.bit
        if bit < 0 or (1 << bit) & self.profile.reserved:
            return None  # WARN_ON_ONCE: not registered
        self.callback_mutex = work
        if work in self.callbacks:
            self.callbacks.remove(work)
        work.bit = -1
        self.unwind_mask &= ~(1 << bit)
        self.log.emit("cancel", tracer=work.name, bit=bit)
        yield "unlisted"
        readers = set(self.srcu_readers)
        while readers & self.srcu_readers:
            yield "synchronize_srcu"
        for task in self.tasks.values():
            task.info.unwind_mask &= ~(1 << bit)
            if task.info.cache is not None:
                task.info.cache.unwind_completed &= ~(1 << bit)
        self.callback_mutex = None
        self.log.emit("cancel_done", tracer=work.name, bit=bit)
        return None

    def cancel(self, work: UnwindWork) -> None:
        """Run :meth:`cancel_steps` to completion; ModelBlocked if a callback is running."""
        if self.callback_mutex is not None or self.srcu_readers:
            raise ModelBlocked("cancel would wait for a callback in progress (use cancel_steps)")
        run(self.cancel_steps(work))

    # ------------------------------------------------------------------ cookie

    def _cookie_steps(self, task: Task, cpu: int) -> Steps:
        """The first request of an entry assigns the cookie; later ones read it."""
        info = task.info
        if self.profile.cookie_scheme == "cpu_counter":
            # mainline get_cookie()
            if info.id_cpu:
                return info.id
            cnt = ((self.percpu_ctr.get(cpu, 0) + 2) & 0xFFFFFFFF) | 1
            yield "cookie_read"
            if info.id_cnt == 0:  # try_assign_cnt(): try_cmpxchg(&info->id.cnt, &old /* 0 */, cnt)
                info.id_cnt = cnt
                self.percpu_ctr[cpu] = cnt  # __this_cpu_write(unwind_ctx_ctr, cnt)
            info.id_cpu = cpu + 1
            yield "cookie_cmpxchg"
            return info.id
        # v10 get_timestamp()
        if info.timestamp:
            return info.timestamp
        yield "timestamp_read"
        info.timestamp = self.clock()  # WRITE_ONCE(info->timestamp, local_clock())
        yield "timestamp_write"
        if info.nmi_timestamp:  # an NMI assigned one meanwhile: it came first, use it
            info.timestamp = info.nmi_timestamp
            yield "timestamp_fold"
            info.nmi_timestamp = 0
        return info.timestamp

    def _callback_cookie(self, task: Task) -> int:
        """The cookie the task work passes to the callbacks."""
        info = task.info
        if self.profile.cookie_scheme == "cpu_counter":
            return info.id  # cookie = info->id.id
        if info.nmi_timestamp:  # v10: "Check if the timestamp was only set by NMI"
            info.timestamp = info.nmi_timestamp
            info.nmi_timestamp = 0
        return info.timestamp

    # ------------------------------------------------------------------ request

    def request_steps(self, work: UnwindWork, task: Task, cpu: int, context: Context) -> Steps:
        """``unwind_deferred_request(work, &cookie)`` for ``task`` (current on ``cpu``): ``(ret, cookie)``.

        Steps: the cookie (``cookie_read``/``cookie_cmpxchg``, or v10 ``timestamp_*``), ``read_mask``
        (already set: return 1, or v10's 2), ``claim`` (mainline fetch_or, v10 cmpxchg), then
        ``task_work_add()`` only by the request that found PENDING clear.
        """
        prof = self.profile
        if task.flags & (PF_KTHREAD | PF_EXITING) or not context.user_mode:
            return self._requested(work, task, cpu, context, -EINVAL, 0)
        self._require_kernel(task)
        bit = work.bit  # READ_ONCE(work->bit)
        if bit < 0:  # "Do not allow cancelled works to request again"
            return self._requested(work, task, cpu, context, -EINVAL, 0)
        bitmask = 1 << bit
        info = task.info
        if context.kind == NMI and prof.nmi_separate_path:
            return (yield from self._request_nmi_v10(work, task, cpu, context, bitmask))
        # guard(irqsave)(): from here only an NMI can interrupt this request.
        cookie = yield from self._cookie_steps(task, cpu)
        old = info.unwind_mask
        if old & bitmask:  # "Is this already queued or executed"
            return self._requested(work, task, cpu, context, prof.already(old, prof.pending), cookie)
        yield "read_mask"
        claim = prof.claim(info.unwind_mask, old, prof.pending, bitmask)
        info.unwind_mask = claim.new_mask
        if claim.action != QUEUE:
            return self._requested(work, task, cpu, context, claim.ret, cookie)
        task.claims += 1
        yield "claim"
        task.claims -= 1
        self._task_work_add(task)  # task_work_add(current, &info->work, TWA_RESUME / TWA_NMI_CURRENT)
        return self._requested(work, task, cpu, context, 0, cookie)

    def _request_nmi_v10(self, work, task: Task, cpu: int, context: Context, bitmask: int) -> Steps:
        """v10 ``unwind_deferred_request_nmi()``: nothing interrupts an NMI, so it needs no cmpxchg.

        It writes ``nmi_timestamp`` (never ``timestamp``, which an interrupted ``get_timestamp()`` may
        be writing) and, when it queues the task work, stores ``unwind_mask = PENDING``.
        """
        prof = self.profile
        info = task.info
        cookie = info.nmi_timestamp or info.timestamp
        if not cookie:
            info.nmi_timestamp = self.clock()
            cookie = info.nmi_timestamp
        yield "nmi_timestamp"
        mask = info.unwind_mask
        if mask & bitmask:
            return self._requested(work, task, cpu, context, prof.already(mask, prof.pending), cookie)
        if not mask & prof.pending:
            self._task_work_add(task)  # TWA_NMI_CURRENT
            info.unwind_mask = prof.pending  # "clear all others"
        ret = 1 if info.unwind_mask & bitmask else 0  # test_and_set_bit()
        info.unwind_mask |= bitmask
        return self._requested(work, task, cpu, context, ret, cookie)

    def request(self, work: UnwindWork, task: Task, cpu: int, context: Context) -> tuple[int, int]:
        return run(self.request_steps(work, task, cpu, context))

    def _task_work_add(self, task: Task) -> None:
        task.task_work_queued += 1

    def _requested(self, work, task: Task, cpu: int, context: Context, ret: int, cookie: int):
        if ret >= 0:
            self._note_cookie(task, cookie, f"request of {work.name}")
        if ret == 0:
            task.owed[work.name] = work.bit
        self.log.emit(
            "request",
            tracer=work.name,
            task=task.pid,
            entry=task.entry,
            epoch=task.epoch,
            cpu=cpu,
            context=context.kind,
            user_mode=context.user_mode,
            ret=ret,
            cookie=cookie,
        )
        return ret, cookie

    def _note_cookie(self, task: Task, cookie: int, what: str) -> None:
        where = f"task {task.pid} entry {task.entry}"
        if not cookie:
            self.violations.append(f"{where}: {what} got cookie 0")
        elif not task.epoch_cookie:
            task.epoch_cookie = cookie
        elif cookie != task.epoch_cookie:
            self.violations.append(f"{where}: {what} got cookie {cookie:#x}, entry's is {task.epoch_cookie:#x}")

    # ------------------------------------------------------------------ walking

    def unwind_user_faultable_steps(self, task: Task, *, direct: bool = True) -> Steps:
        """``unwind_user_faultable()`` (v10: ``unwind_deferred_trace()``): ``(ret, trace)``.

        Walks at most once per entry: a non-zero ``cache->nr_entries`` is reused.  The walk stops at
        ``UNWIND_MAX_ENTRIES``; truncation is not an error.  Mainline sets UNWIND_USED so that the
        return to user space clears the cache.  Steps: ``walk_start`` (cache allocated, nothing
        walked yet), ``walk_done``.
        """
        info = task.info
        if not task.has_mm:  # "if (!current->mm) return -EINVAL;"
            if direct:
                self._traced(task, -EINVAL, (), cached=False)
            return -EINVAL, ()
        if info.cache is None:
            info.cache = UnwindCache()
        cache = info.cache
        if cache.nr_entries:
            trace = cache.entries[: cache.nr_entries]
            if direct:
                self._traced(task, 0, trace, cached=True)
            return 0, trace
        yield "walk_start"
        raw = list(self.unwind(task))
        limit = self.profile.max_entries
        trace = tuple(int(ip) for ip in raw[:limit])
        cache.entries = trace
        cache.nr_entries = len(trace)
        if self.profile.used:
            info.unwind_mask |= self.profile.used  # atomic_long_or(UNWIND_USED, &info->unwind_mask)
        self.log.emit(
            "walk",
            task=task.pid,
            entry=task.entry,
            epoch=task.epoch,
            nr=len(trace),
            # unwind_user() stores an entry, then stops at nr >= max_entries without looking for
            # the next frame: a walk that filled the cache stopped at the limit (StopReason.LIMIT),
            # whether the walker gave more entries (cut here) or stopped itself at the limit, as
            # the engine's and the shell's walkers do (their trace has exactly max_entries).
            truncated=len(raw) >= limit,
            trace_hash=trace_hash(trace),
            trace=list(trace),
        )
        yield "walk_done"
        if direct:
            self._traced(task, 0, trace, cached=False)
        return 0, trace

    def unwind_user_faultable(self, task: Task) -> tuple[int, tuple[int, ...]]:
        self._require_kernel(task)
        return run(self.unwind_user_faultable_steps(task))

    unwind_deferred_trace = unwind_user_faultable  # the seed series' name

    def _traced(self, task: Task, ret: int, trace: tuple, cached: bool) -> None:
        self.log.emit(
            "trace",
            task=task.pid,
            entry=task.entry,
            epoch=task.epoch,
            ret=ret,
            nr=len(trace),
            cached=cached,
            trace_hash=trace_hash(trace),
        )

    # ------------------------------------------------------------------ task work

    def _process_steps(self, task: Task) -> Steps:
        """``process_unwind_deferred()`` (``unwind_deferred_task_work()``): walk once, call each
        tracer whose bit is set, each once, with ``(trace, cookie)``.

        Steps: ``fetch_andnot`` (PENDING cleared, the bits taken), the walk's steps, ``srcu_lock``,
        then ``callback``/``callback_done`` per tracer called, ``srcu_unlock``.
        """
        prof = self.profile
        info = task.info
        if not info.unwind_mask & prof.pending:
            task.task_work_running = False
            return None  # WARN_ON_ONCE(!unwind_pending(info))
        task.task_work_running = True
        bits = info.unwind_mask
        info.unwind_mask &= ~prof.pending  # atomic_long_fetch_andnot(UNWIND_PENDING, ...)
        task.running_bits = bits & ~prof.reserved
        self.log.emit("task_work", task=task.pid, entry=task.entry, epoch=task.epoch, bits=bits)
        yield "fetch_andnot"
        _, trace = yield from self.unwind_user_faultable_steps(task, direct=False)
        if prof.completed_mask and info.cache is not None:
            bits &= ~info.cache.unwind_completed
        task.running_bits = bits & ~prof.reserved
        cookie = self._callback_cookie(task)
        reader = next(self._srcu_ids)
        self.srcu_readers.add(reader)  # guard(srcu)(&unwind_srcu)
        yield "srcu_lock"
        for work in list(self.callbacks):  # list_for_each_entry_srcu()
            bit = work.bit
            if work not in self.callbacks or bit < 0 or not bits & (1 << bit):
                continue
            task.running_bits &= ~(1 << bit)
            task.owed.pop(work.name, None)
            self._note_cookie(task, cookie, f"callback of {work.name}")
            self.deliveries.append(Delivery(work.name, task.pid, task.entry, task.epoch, cookie, trace))
            self.log.emit(
                "callback",
                tracer=work.name,
                task=task.pid,
                entry=task.entry,
                epoch=task.epoch,
                bit=bit,
                cookie=cookie,
                nr=len(trace),
                trace_hash=trace_hash(trace),
            )
            work.func(work, trace, cookie)
            yield "callback"
            if prof.completed_mask and info.cache is not None:
                info.cache.unwind_completed |= 1 << bit
            self.log.emit("callback_done", tracer=work.name, task=task.pid)
            yield "callback_done"
        task.running_bits = 0
        self.srcu_readers.discard(reader)
        task.task_work_running = False
        return None

    def return_to_user_steps(self, task: Task) -> Steps:
        """``exit_to_user_mode_loop()`` running the task work while it is queued, then, with
        interrupts off (step ``irqs_off``: only an NMI can come now), ``unwind_reset_info()``.
        """
        self._require_kernel(task)
        while task.task_work_queued:  # TIF_NOTIFY_RESUME -> task_work_run()
            task.task_work_queued = 0
            task.task_work_running = True  # task_work_run() took it off the list
            yield "task_work_run"
            yield from self._process_steps(task)
        yield "irqs_off"
        self._reset_info(task)
        task.in_kernel = False
        self.log.emit("return_to_user", task=task.pid, entry=task.entry)
        return None

    def return_to_user(self, task: Task) -> None:
        run(self.return_to_user_steps(task))

    def _reset_info(self, task: Task) -> None:
        """``unwind_reset_info()``: clear mask, cookie and cache unless a task work is PENDING."""
        info = task.info
        bits = info.unwind_mask
        cleared = True
        if bits:  # "Was there any unwinding?" (v10 returns early here too, keeping the cache)
            if bits & self.profile.pending:  # "Is a task_work going to run again before going back"
                cleared = False
            else:
                info.unwind_mask = 0
                info.id_cpu = info.id_cnt = 0
                info.timestamp = 0
                if info.cache is not None:
                    info.cache.nr_entries = 0
                    info.cache.unwind_completed = 0
        self.log.emit("reset", task=task.pid, entry=task.entry, epoch=task.epoch, cleared=cleared)
        if cleared:
            self._new_epoch(task)

    def _new_epoch(self, task: Task) -> None:
        if task.epoch_cookie:
            task.old_cookies.add(task.epoch_cookie)
        task.epoch_cookie = 0
        task.owed.clear()
        task.epoch += 1

    # ------------------------------------------------------------------ exit

    def exit_steps(self, task: Task) -> Steps:
        """``do_exit()``: ``exit_signals()`` sets PF_EXITING (requests fail from here on), then
        ``unwind_deferred_task_exit()`` runs the pending callbacks while the mm still exists and
        cancels the task work, then ``exit_mm()``; ``unwind_task_free()`` frees the cache.
        """
        self._require_kernel(task)
        task.flags |= PF_EXITING
        self.log.emit("exit", task=task.pid, entry=task.entry, epoch=task.epoch)
        yield "exiting"
        if task.info.unwind_mask & self.profile.pending:
            yield from self._process_steps(task)
            task.task_work_queued = 0  # task_work_cancel(task, &info->work)
        yield "task_exit"
        task.has_mm = False  # exit_mm()
        task.info.cache = None  # unwind_task_free()
        task.dead = True
        task.in_kernel = False
        self.log.emit("exit_done", task=task.pid)
        self._new_epoch(task)
        return None

    def exit(self, task: Task) -> None:
        run(self.exit_steps(task))

    # ------------------------------------------------------------------ invariants

    def state_violations(self) -> list[str]:
        """Invariants of the model state that must hold between any two steps."""
        prof = self.profile
        out = list(self.violations)
        listed = 0
        for work in self.callbacks:
            listed |= 1 << work.bit
        if self.unwind_mask != prof.reserved | listed:
            out.append(f"global mask {self.unwind_mask:#x} != reserved | registered bits {prof.reserved | listed:#x}")
        by_name = {w.name: w for w in self.callbacks}
        for task in self.tasks.values():
            if task.dead:
                continue
            info = task.info
            where = f"task {task.pid} entry {task.entry}"
            if task.task_work_queued > 1:
                out.append(f"{where}: task work queued {task.task_work_queued} times")
            pending = bool(info.unwind_mask & prof.pending)
            if pending and not (task.task_work_queued or task.task_work_running or task.claims):
                out.append(f"{where}: PENDING set but no task work queued")
            if task.task_work_queued and not pending and not task.task_work_running:
                out.append(f"{where}: task work queued without PENDING")
            for name, bit in task.owed.items():
                if name not in by_name or by_name[name].bit != bit:
                    continue  # cancelled: no callback is owed any more
                will_run = (info.unwind_mask & (1 << bit) and pending) or task.running_bits & (1 << bit)
                if not will_run:
                    out.append(f"{where} tracer {name}: request returned 0 but its bit is lost")
            if task.epoch_cookie and task.epoch_cookie in task.old_cookies:
                out.append(f"{where}: cookie {task.epoch_cookie:#x} was used by an earlier entry")
        return out
