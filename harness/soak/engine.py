"""The soak: many requests, NMI and timer, over tasks that fork, exec and exit, with cancels.

``guest_programs/soak.c`` runs TASKS worker tasks that fork, exec and exit continuously.  The
soak drives the same engine as ``harness run`` (:class:`~harness.scenarios.engine.Engine`): each
request is an injected NMI (vCPU 0) or a stop at the local APIC timer interrupt (every vCPU),
drawn at random (seeded) per request; the deferred model requests for each tracer, and the work
is delivered at the return to user space or in ``do_exit()``, where every stack is checked by
the oracles as in a normal run.  On top of that:

- the fork (``wake_up_new_task``) and exit (``do_exit`` after ``exit_signals()``) points stay
  inserted the whole run: every fork is the model's ``fork()`` (``copy_process()`` ->
  ``unwind_task_init()``: the child's state starts empty) and every exit of a task the model
  knows is its ``exit()``, pending work or not (``unwind_deferred_task_exit()``);
- every ``cancel_every`` requests one tracer is cancelled (``unwind_deferred_cancel()``) and a
  new one registered in its place (``unwind_deferred_init()``), alternately at a request stop,
  right after the request (the current task's callback is then owed and must never run), and
  inside a delivery: the cancel starts while the task work holds SRCU around its callback walk,
  so it waits in ``synchronize_srcu()`` and completes after the walk (REFERENCE section 2).

:class:`~harness.soak.ledger.Ledger` reads the model's events as they are written (never keeping them) and accounts
for every request that returned 0: one callback per tracer, at the return to user space or at
exit, or none because its tracer was cancelled first; anything else is *lost*.  It counts
duplicated callbacks, callbacks after a cancel, and cookies given to two entries (mainline
cookies are ``{cpu + 1, per-CPU counter}``, so each new entry's cookie must be above every
earlier one of its CPU; seed-v10 timestamps above every earlier one).  Its memory is bounded by
the live tasks, and the engine's by the soak's pruning of exited tasks, so the harness's memory
stays flat: the resident set size is sampled every ``rss_every`` requests.  The JSONL log is
written to disk and re-checked whole by :func:`harness.deferred.check.check_lines` at the end.

Domain code: it sees the guest through the session, never through sockets or subprocesses.
"""

from __future__ import annotations

import collections
import random
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..deferred.check import check_lines
from ..deferred.model import DeferredModel, ModelBlocked, ModelError, UnwindWork
from ..images.programs import Variant
from ..kernel import read_task
from ..kernel.stops import StopPoint
from ..scenarios.catalog import Scenario
from ..scenarios.engine import Engine, ProgressCallback, request_budget
from ..session import Session
from ..transport.errors import GuestError, TargetError
from .ledger import Ledger, LedgerLog
from .spec import SoakSpec

__all__ = ["SoakEngine", "SoakReport", "SoakSpec", "soak_scenario"]

PROGRAM = ("soak", "host", Variant(shadow=True))
PID_MAX = 4194304  # PID_MAX_LIMIT on 64-bit: no pid is reused during a soak
EXITED_KEPT = 256  # exited tasks the model keeps (a late request on one still finds it exiting)


def soak_scenario(spec: SoakSpec) -> Scenario:
    name, toolchain, variant = PROGRAM
    return Scenario("soak", program=name, toolchain=toolchain, variant=variant,
                    args=(str(spec.tasks), str(spec.work)), samples=spec.requests, tracers=spec.tracers,
                    requests=("nmi", "timer"), profile=spec.profile, seed=spec.seed)


# -- the engine ------------------------------------------------------------------------------------

def rss_kib() -> int:
    """This process's resident set size now (VmRSS), in KiB."""
    with open("/proc/self/status") as fp:
        for line in fp:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def peak_rss_kib() -> int:
    """The peak resident set size of this process so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@dataclass
class SoakReport:
    spec: SoakSpec
    smp: int
    requests: collections.Counter = field(default_factory=collections.Counter)  # "nmi"/"timer" -> own requests
    foreign_requests: int = 0  # requests that landed on other tasks (idle, init)
    tasks_seen: int = 0  # distinct tasks of the program (no pid is reused: pid_max is raised)
    most_live: int = 0  # the program's tasks alive at once, at most
    forks: int = 0
    exits: int = 0
    cancels: collections.Counter = field(default_factory=collections.Counter)  # "at request"/"in delivery"
    ledger: dict = field(default_factory=dict)  # Ledger.counts
    ledger_messages: list[str] = field(default_factory=list)
    still_owed: int = 0
    stacks: int = 0
    own_stacks: int = 0
    failed_stacks: int = 0
    causes: dict = field(default_factory=dict)
    undeclared: dict = field(default_factory=dict)  # causes outside the soak program's declaration
    seconds: float = 0.0
    stops: int = 0  # guest stops (requests, returns, forks, exits)
    rss_series: list[tuple[int, int]] = field(default_factory=list)  # (requests done, RSS KiB)
    peak_rss: int = 0  # KiB, ru_maxrss at the end of the sampling (before the log's re-check)
    check_violations: int | None = None  # harness check's violations over the whole log
    check_messages: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log: str | None = None

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def ok(self) -> bool:
        bad = sum(self.ledger.get(k, 0) for k in ("lost", "duplicated", "after_cancel", "cookie_reuse",
                                                   "cookie_mismatch"))
        return (not bad and not self.failed_stacks and not self.errors and self.still_owed == 0
                and not self.check_violations)


class SoakEngine(Engine):
    """The engine with NMI and timer requests mixed, fork and exit points always in, and cancels."""

    def __init__(self, session: Session, spec: SoakSpec, log: IO[str] | None = None,
                 progress: ProgressCallback | None = None):
        self.spec = spec
        self.ledger = Ledger()
        # The engine's own log and model (not written anywhere) are replaced: the engine's log
        # keeps every event for its end-of-run check; the soak's goes to disk and through the
        # ledger only, and the whole file is re-checked at the end.
        super().__init__(session, soak_scenario(spec), None, progress)
        self.log = LedgerLog(log, self.ledger)
        self.model = DeferredModel(self.model.profile, self._walk, log=self.log)
        self.works = []
        for i in range(self.sc.tracers):
            w = UnwindWork(self._callback, name=f"tracer{i}.0")
            self.model.init(w)
            self.works.append(w)
        self.report = SoakReport(spec, session.spec.smp)
        self._exited: collections.deque[int] = collections.deque()
        self._own_live: set[int] = set()
        self._cancel_in_delivery: int | None = None  # index of the tracer to cancel at the next delivery
        self._generation = 0
        self._timer_armed = True

    # -- bounded memory --------------------------------------------------------------------------
    def _check(self, d) -> None:
        super()._check(d)
        # The ledger checks the cookies and tasks_seen counts the tasks: these sets would only grow.
        self.result.cookies.clear()
        self.result.tasks.clear()
        self.model.deliveries.clear()  # the model's record of every callback, for tests; the ledger has them

    def _model_task(self, task):
        mt = self.model.tasks.get(task.pid)
        if mt is None:
            mt = self.model.spawn(task.pid, kthread=task.kthread)
            self._seen_task(task)
        return mt

    def _seen_task(self, task) -> None:
        if self._own_kind(task) is not None:
            self.report.tasks_seen += 1
            self._own_live.add(task.pid)
            self.report.most_live = max(self.report.most_live, len(self._own_live))

    def _forget(self, pid: int) -> None:
        """An exited task: the model keeps the last EXITED_KEPT (a request can still land on one
        on its way out, and must find it exiting), then drops it."""
        self._own_live.discard(pid)
        self._exited.append(pid)
        while len(self._exited) > EXITED_KEPT:
            old = self._exited.popleft()
            mt = self.model.tasks.get(old)
            if mt is not None and mt.dead:
                del self.model.tasks[old]

    # -- fork and exit ---------------------------------------------------------------------------
    def _on_lifecycle(self, point: StopPoint) -> None:
        s = self.s
        task = s.current()
        if point.kind == "fork":
            child = read_task(s.info, s.read, s.target.read_registers()["rdi"])
            if self._own_kind(task) is not None:
                self.report.forks += 1
            parent = self._model_task(task)
            if parent.dead:
                return
            if not parent.in_kernel:
                self.model.enter_kernel(parent, "syscall", cpu=s.target.cpu)  # in fork()/clone()
            stale = self.model.tasks.get(child.pid)
            if stale is not None:  # a pid the model still holds (it was reused after all)
                if not stale.dead:
                    self.report.notes.append(f"pid {child.pid} forked while the model had it alive")
                del self.model.tasks[child.pid]
            self.model.fork(parent, pid=child.pid)
            self._seen_task(child)
            return
        # exit: do_exit() right after exit_signals() set PF_EXITING
        own = self._own_kind(task) is not None
        self.report.exits += own
        if task.pid in self.pending:
            self._on_return(point)  # delivered in do_exit(), checked by the oracles
        else:
            mt = self.model.tasks.get(task.pid)
            if mt is not None and not mt.dead:
                if not mt.in_kernel:
                    self.model.enter_kernel(mt, "syscall", cpu=s.target.cpu)  # exit_group() or a signal
                self.model.exit(mt)
        if task.pid in self.model.tasks:
            self._forget(task.pid)

    # -- cancels ---------------------------------------------------------------------------------
    def _reregister(self, i: int) -> None:
        self._generation += 1
        w = UnwindWork(self._callback, name=f"tracer{i}.{self._generation}")
        if self.model.init(w) != 0:
            raise ModelError(f"re-registering tracer {i} failed: no free bit")
        self.works[i] = w

    def _cancel_now(self, i: int, when: str = "at request") -> None:
        self.model.cancel(self.works[i])
        self.report.cancels[when] += 1
        self._reregister(i)

    def _task_work(self, mt, point) -> None:
        i = self._cancel_in_delivery
        if i is None:
            return super()._task_work(mt, point)
        self._cancel_in_delivery = None
        steps = self.model.exit_steps(mt) if point.kind == "exit" else self.model.return_to_user_steps(mt)
        cancel = self.model.cancel_steps(self.works[i])
        cancel_done = False
        waited = False
        try:
            while True:
                step = next(steps)
                if step == "srcu_lock" and not cancel_done and not waited:
                    # Another CPU cancels tracer i while this task work walks the callbacks under
                    # SRCU: the cancel unlists it and waits in synchronize_srcu() for this walk.
                    try:
                        while next(cancel) != "synchronize_srcu":
                            pass
                        waited = True
                    except StopIteration:
                        cancel_done = True
        except StopIteration:
            pass
        if not cancel_done:
            try:
                while True:
                    if next(cancel) == "synchronize_srcu" and self.model.srcu_readers:
                        raise ModelBlocked("cancel still waits for SRCU after the task work ended")
            except StopIteration:
                pass
        self.report.cancels["in delivery" if waited else "at delivery"] += 1
        self._reregister(i)

    def _cancel_left_over(self) -> None:
        """A cancel meant for the next delivery when no delivery came (the last request's
        cancel, when the run's last task work ran before it or none ran after): it is done now,
        so that every ``cancel_every`` requests one cancel happens, whatever the guest's timing."""
        i = self._cancel_in_delivery
        if i is None:
            return
        self._cancel_in_delivery = None
        self._cancel_now(i, "after the last delivery")

    def _maybe_cancel(self) -> None:
        every = self.spec.cancel_every
        n = self.result.sampled
        if not every or n % every:
            return
        k = n // every
        i = k % len(self.works)
        if k % 2:
            self._cancel_in_delivery = i
        else:
            self._cancel_now(i)

    # -- the loop --------------------------------------------------------------------------------
    # The soak puts its timer point in and out itself (_set_timer), by its own draw.
    LIFT_TICKS = False

    def _set_timer(self, on: bool) -> None:
        if on == self._timer_armed:
            return
        (self.s.target.set_breakpoint if on else self.s.target.remove_breakpoint)(self.timer_addr)
        self._timer_armed = on

    def _prepare(self) -> None:
        s = self.s
        s.target.resume()
        try:
            s.machine.shell(f"echo {PID_MAX} > /proc/sys/kernel/pid_max")
        finally:
            s.target.interrupt()
        super()._prepare()
        self.timer_addr = s.stops["apic_timer"].addr
        # The exit point stays in for the whole run (every exit is the model's), so it moves from
        # the return points (inserted only while work is pending) to the lifecycle points.
        exit_point = s.stops["exit"]
        self.return_points.pop(exit_point.addr, None)
        fork_addr = s.info.symbols.get("wake_up_new_task")
        if fork_addr is None:
            raise ModelError("the guest kernel has no wake_up_new_task symbol: the soak cannot see forks")
        self.lifecycle = {exit_point.addr: exit_point,
                          fork_addr: StopPoint("fork", fork_addr, "fork", "rdi", "symbol wake_up_new_task")}
        for a in self.lifecycle:
            s.target.set_breakpoint(a)

    def _sample_rss(self) -> None:
        self.report.rss_series.append((self.result.sampled, rss_kib()))

    def run(self) -> SoakReport:
        s, rep, r = self.s, self.report, self.result
        start = self._started = time.monotonic()
        self._report()
        rng = random.Random(self.spec.seed)
        limit = request_budget(self.spec.requests)
        nmi: bool | None = None
        try:
            self._prepare()
            self._sample_rss()
            while r.sampled < self.spec.requests:
                if self.n_requests >= limit:
                    rep.notes.append(f"stopped after {self.n_requests} requests: only {r.sampled} landed on "
                                     f"the program's tasks")
                    break
                status = s.machine.exit_status(self.proc)
                if status is not None:
                    rep.errors.append(f"the program exited with status {status} after {r.sampled} requests")
                    break
                # The kind is drawn per request that lands on the program, not per try: an NMI
                # try often ends at a fork or exit stop before the NMI is injected.
                if nmi is None:
                    nmi = rng.random() < self.spec.nmi_share
                self._set_timer(not nmi)
                s.target.resume()
                # The last deliveries' walks and checks (snapshots taken at their stops) while the
                # guest runs, before the next stop is handled: the model keeps the guest's order.
                self._process_queue(waiting=False)
                if nmi:
                    time.sleep(rng.uniform(0, self.sc.jitter))
                    if s.machine.vm_running():
                        s.machine.inject_nmi()
                stop = s.target.wait_stop(timeout=15)
                r.stops += 1
                if stop.pc in self.request_points:
                    before = r.sampled
                    point = self.request_points[stop.pc]
                    self._on_request(point)
                    if r.sampled > before:
                        rep.requests["nmi" if point.kind == "nmi" else "timer"] += 1
                        nmi = None
                        self._maybe_cancel()
                        if r.sampled % self.spec.rss_every == 0:
                            self._sample_rss()
                    else:
                        rep.foreign_requests += 1
                elif stop.pc in self.return_points:
                    self._on_return(self.return_points[stop.pc])
                elif stop.pc in self.lifecycle:
                    self._on_lifecycle(self.lifecycle[stop.pc])
                else:
                    r.errors.append(f"stopped at {stop.pc:#x}, not at a breakpoint of ours")
                    continue
                self._drive(self._own_pending)
                self._report()
            r.loop_seconds = time.monotonic() - start
            self._set_timer(True)  # _flush_pending removes every request point
            self._flush_pending()
            self._cancel_left_over()
        except KeyboardInterrupt:
            r.errors.append("interrupted (SIGINT)")
            self._end("interrupted")
            raise
        except (GuestError, TargetError, ModelError) as exc:
            r.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            if not r.loop_seconds:
                r.loop_seconds = time.monotonic() - start
            rep.peak_rss = peak_rss_kib()
        self._cleanup()
        r.invariant_violations = list(self.model.violations)
        r.seconds = time.monotonic() - start
        self._end("error" if r.errors else "complete")
        self._report(finished=True)
        self._fill_report()
        return rep

    def _cleanup(self) -> None:
        s = self.s
        try:
            if s.machine.alive():
                for a in list(self.request_points) + list(self.lifecycle):
                    s.target.remove_breakpoint(a)
                self._arm_returns(False)
                s.target.resume()
                s.machine.shell(f"kill {self.proc.pid}")
                s.target.interrupt()
        except (GuestError, TargetError) as exc:
            self.result.errors.append(f"cleanup: {exc}")

    def _fill_report(self) -> None:
        rep, r, led = self.report, self.result, self.ledger
        rep.ledger = dict(led.counts)
        rep.ledger_messages = list(led.messages)
        # Owed callbacks of tasks still alive at the end whose entry has not ended yet (no
        # return to user space since): pending, not lost; the run's delivery drive left none.
        rep.still_owed = led.pending
        rep.stacks, rep.own_stacks, rep.failed_stacks = r.stacks, r.own_stacks, r.failed_stacks
        rep.causes = dict(sorted(r.causes.items()))
        rep.undeclared = dict(sorted(r.undeclared.items()))
        rep.seconds = r.loop_seconds
        rep.stops = r.stops
        rep.errors = r.errors + r.problems + r.invariant_violations
        rep.notes += r.notes + r.undeclared_notes()

    def recheck(self, path: Path) -> None:
        """``harness check`` over the whole log file (after the run: its memory is not the soak's)."""
        with open(path, encoding="utf-8") as fp:
            verdict = check_lines(fp)
        self.report.check_violations = len(verdict.violations)
        self.report.check_messages = verdict.messages()[:10]
        if not verdict.complete:
            self.report.check_messages.append(f"log incomplete: {verdict.incomplete}")
            self.report.check_violations += 1


def run_soak(session: Session, spec: SoakSpec, log_path: Path,
             progress: ProgressCallback | None = None) -> SoakReport:
    """The soak on a booted session; its JSONL log at ``log_path``, re-checked whole at the end."""
    with open(log_path, "w", encoding="utf-8") as log:
        engine = SoakEngine(session, spec, log, progress)
        try:
            rep = engine.run()
        finally:
            log.flush()
    rep.log = str(log_path)
    engine.recheck(log_path)
    return rep
