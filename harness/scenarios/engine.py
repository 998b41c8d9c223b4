"""The engine: breakpoints in a live guest drive the deferred-unwinding model.

Injected NMIs stop the guest at ``exc_nmi``: the engine plays the tracers that *request* a
deferred user stack for the current task.  While a task has pending work, breakpoints sit on
the return-to-user points (and in ``do_exit`` right after ``exit_signals()`` has set
PF_EXITING); when the task reaches one, the engine runs the model's task work there: the
Python unwinder walks the user stack from the saved pt_regs by reading guest memory, and each
requesting tracer's callback receives (trace, cookie).  At that same stop the oracles check
the stack: the program's own shadow stack (instrumented builds), the DWARF CFI unwinder, and
whether the registers are those of the request (the right stack).

A user-mode NMI returns through ``swapgs_restore_regs_and_return_to_usermode``; the kernel's
request from NMI context raises a self-IPI (TWA_NMI_CURRENT) whose exit runs the task work
before any user instruction, with the same user registers.  The engine runs the work at that
first return, which sees exactly those registers.

Tasks of the program are recognised by tgid (its threads) and, for a child it forks, by the
program's comm: the binary is static and non-PIE and the guest runs without ASLR, so a child
(before or after it execs the same program) has the same address space layout and its stacks
are checked by the same oracles.  A request at syscall entry (``do_syscall_64``) is a third
request point.  Deferred work is delivered where the kernel runs it: at the return to user
space, in ``get_signal()`` (which runs pending task work before it sets up a signal frame), or
in ``do_exit()``.

At that stop every registered oracle (:mod:`harness.oracles`) gives its idea of the stack and
:func:`harness.verdicts.judge` proves every difference with a cause from the closed registry
(:mod:`harness.verdicts.causes`); a difference no cause proves is a failure.  Every delivered stack
goes into the run's JSONL log as a ``stack`` record (each unwinder's and oracle's frames,
symbolized, and the verdict of each pair with its causes and evidence); the log ends with an
``end`` record.

This module runs the sampling loop (the NMIs, the requests, the drive from stop to stop and its
bounds); the delivery stop, its snapshot, the task work and the checks, and the end of a run's
flush are the engine's :class:`~harness.scenarios.delivery.DeliveryWork` half.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, ClassVar

from ..deferred.check import check_events
from ..deferred.log import EventLog, JsonlFile
from ..deferred.model import (
    IRQ,
    NMI,
    SYSCALL,
    Context,
    DeferredModel,
    Delivery,
    ModelError,
    UnwindWork,
)
from ..deferred.profile import COOKIES_PER_CPU, get_profile
from ..images.programs import Program, needed_sonames
from ..kernel import PF_EXITING, TaskInfo
from ..kernel.stops import StopPoint, delivery_points
from ..kernel.vdso import with_kernel_vdso
from ..memory import BufferMemory, MemoryFault, Overlay
from ..oracles.base import Oracle, Request, Setup, build_oracles
from ..regs import UserRegs
from ..session import Session
from ..signals import signal_name
from ..toolchain.witness import CrossExaminer
from ..transport.errors import GuestError, StopLeft, TargetError
from ..transport.target import Stop, TargetMemory
from ..unwind.code import CodeFacts
from ..unwind.maps import AddressSpace, LoadBiasError, parse_maps
from ..unwind.user import Trace
from .catalog import Scenario
from .delivery import (  # noqa: F401 (re-exported: the engine's users and tests name them here)
    FAILURES_KEPT,
    FP_CHAIN_HOPS,
    MAX_STACK_PAGES,
    SIGFRAME_PAGES,
    SNAPSHOTS_KEPT,
    UNKNOWN_STACK_PAGES,
    DeliveryWork,
    PendingCheck,
    own_text_steps,
)
from .result import Result
from .snapshot import StackChecker, StopSnapshot

__all__ = ["MAX_REQUESTS_PER_SAMPLE", "MAX_SAMPLES", "Engine", "LoopCost", "Sampling", "raw_stop_rate",
           "request_budget", "run_scenarios"]

# Entry and exit assembly: a request interrupting it sees pt_regs that are not (or no longer)
# those of the user context the task returns to next.
ENTRY_EXIT_ASM = ("entry_", "asm_", "error_", "common_interrupt_return", "swapgs_restore",
                  "native_irq_return", "restore_regs_and_return", "paranoid_", "xen_",
                  "sync_regs", "fixup_bad_iret")
REPORT_EVERY = 0.05  # seconds between two progress reports of a sampling run (the last always)
# NMIs passed over (their stop's guesses missed the task) before a run stops leaving NMI stops at
# once, when they are also more than a tenth of those stops (_on_continued_request)
PLAN_MISSES_MAX = 4




class LoopCost:
    """What a sampling loop cost the harness: the process's CPU seconds (``time.process_time``:
    user and system time of every thread, which other work on a shared machine disturbs far
    less than wall time), the gdb-stub packets sent by kind, the stub round trips and the log
    records written, between :meth:`start` and :meth:`stop`.  A transport that counts no
    packets (GDB/MI) leaves ``packets`` empty and ``round_trips`` None."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.packets: collections.Counter[str] = collections.Counter()
        self.round_trips: int | None = None
        self.records = 0
        self._at: tuple | None = None

    @staticmethod
    def _now(target, log) -> tuple:
        return (time.process_time(), collections.Counter(getattr(target, "sent", {})),
                getattr(target, "round_trips", None), log.seq)

    def start(self, target, log) -> None:
        self._at = self._now(target, log)

    def stop(self, target, log) -> None:
        if self._at is None:
            return
        (cpu0, sent0, trips0, seq0), (cpu1, sent1, trips1, seq1) = self._at, self._now(target, log)
        self._at = None
        self.cpu = cpu1 - cpu0
        self.packets = sent1 - sent0
        self.round_trips = None if trips0 is None or trips1 is None else trips1 - trips0
        self.records = seq1 - seq0


@dataclass(frozen=True)
class Sampling:
    """A scenario's sampling so far, for a progress callback (the engine itself prints nothing)."""

    scenario: str
    sampled: int  # requests that landed on the program's tasks ...
    samples: int  # ... of those asked for
    requests: int  # requests on any task
    stacks: int  # delivered stacks checked by the oracles
    failed: int  # stacks with a failure so far
    seconds: float  # since the scenario started
    finished: bool = False
    interrupted: bool = False  # finished by Ctrl-C


ProgressCallback = Callable[[Sampling], None]

# Sampling gives up after this many requests per requested sample (plus 100) when too few land
# on the program: a program that sleeps must not keep the run going for ever.
MAX_REQUESTS_PER_SAMPLE = 10
REQUESTS_BEYOND_SAMPLES = 100


def request_budget(samples: int) -> int:
    """The most requests a scenario (or a soak) of ``samples`` samples makes before it gives up."""
    return MAX_REQUESTS_PER_SAMPLE * samples + REQUESTS_BEYOND_SAMPLES


#: The most samples a scenario may ask for (--samples): its request budget must stay within the
#: cookies one CPU's counter gives before they wrap (COOKIES_PER_CPU, 2^31: every request may
#: open a new entry, all on one vCPU), else the model's cookies, like the kernel's, repeat within
#: one task and the checker reports them as reused.  214,748,354 samples (days of sampling at
#: the engine's hundreds of requests a second: a bound no real run meets, and a number no typo
#: of an exponent gets past).
MAX_SAMPLES = (COOKIES_PER_CPU - REQUESTS_BEYOND_SAMPLES) // MAX_REQUESTS_PER_SAMPLE
# ... and after this many stops per allowed request: an NMI goes only into a running guest, so
# a guest that keeps stopping at return points (another task's work pending) before each
# injection would otherwise take no request and keep the loop going.
STOPS_PER_REQUEST_LIMIT = 20
# After this many requests in a row on other tasks than the program's, each NMI waits a little
# longer (1 ms more a request, at most OFF_PROGRAM_PAUSE_MAX s), the guest running meanwhile.
# Without it, NMIs that follow each other at once (bench deferred: no jitter) can leave the guest
# no time to progress: each gdb stop costs QEMU 7.2 its translations, and with QEMU's main loop
# real-time (--rt) the next NMI's command runs before the vCPU does.  Seen once (issue 21's
# campaign, run h4, 7.2 with --rt at load 2-3): 500 NMIs in a row caught /init in the kernel,
# none the program; the same livelock as the vCPU threads at SCHED_IDLE (transport/affinity.py).
OFF_PROGRAM_STREAK = 10
OFF_PROGRAM_PAUSE_MAX = 0.02
# Timer-interrupt requests have the same livelock, and worse: the request point is in the tick
# itself, so with it in the guest stops at every tick, and where a stop (with the retranslation
# that follows it on QEMU 7.2) costs more than a tick of guest time, the next tick is due as soon
# as the guest resumes: it runs ticks, softirqs and kernel threads, and the program hardly ever.
# Seen on QEMU 7.2 (issue 21's campaign, runs a7 and a9, 7.2's stops at 85-140/s): fp-timer took
# 7 requests on the program in 8,000 stops, nearly all of them ticks passed over while a
# delivery waited for the program to return.  So the timer's request points are out while a
# delivery is driven (:meth:`Engine._drive`), and after OFF_PROGRAM_STREAK requests in a row on
# other tasks the guest runs without them for the same growing pause before the next request.


#: lines of a program's output a run that fell short of its stacks shows (Result.output_tail)
OUTPUT_TAIL_LINES = 5
#: seconds a dynamic program's loader may take to map its libraries before sampling starts
LOADER_WAIT = 10.0


def _mapped_whole(maps: str, resolve) -> bool:
    """Every module of ``maps`` (its files through ``resolve``) reads as the loaders map it."""
    try:
        AddressSpace.from_maps(maps, resolve).elves()
    except LoadBiasError:
        return False
    return True


def unmapped(maps: str, names: frozenset[str]) -> set[str]:
    """Which of the file ``names`` no line of a /proc/PID/maps text maps (by the file's name,
    whatever its directory)."""
    return set(names) - {m.path.rsplit("/", 1)[-1] for m in parse_maps(maps)}


def output_tail(path: Path | None, lines: int = OUTPUT_TAIL_LINES) -> list[str]:
    """The last ``lines`` non-empty lines of a program's output file (its last 64 KiB read)."""
    if path is None:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 65536))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()][-lines:]


class Engine(DeliveryWork):
    REQUEST_POINTS: ClassVar[dict[str, str]] = {"nmi": "nmi", "timer": "apic_timer", "syscall": "syscall_entry"}
    #: the timer's request points out while a delivery is driven, and out for a pause after a
    #: streak of requests off the program (OFF_PROGRAM_STREAK's comment); off where a subclass
    #: puts them in and out itself
    LIFT_TICKS: ClassVar[bool] = True

    def __init__(self, session: Session, scenario: Scenario, log: IO[str] | None = None,
                 progress: ProgressCallback | None = None, verify: bool = False, keep_snapshots: bool = False,
                 failing_dir: Path | None = None, examiner: CrossExaminer | None = None):
        self.s = session
        self.examiner = examiner  # harness run --cross-examine
        self.sc = scenario
        self.progress = progress
        self._reported = float("-inf")
        self._started = time.monotonic()
        self.result = Result(scenario)
        self.log = EventLog(log, keep=True)
        profile = get_profile(scenario.profile)
        self.max_entries = profile.max_entries  # UNWIND_MAX_ENTRIES of that kernel revision
        self.model = DeferredModel(profile, self._walk, log=self.log)
        self.works = []
        for i in range(scenario.tracers):
            w = UnwindWork(self._callback, name=f"tracer{i}")
            self.model.init(w)
            self.works.append(w)
        if scenario.user_path:
            self.program = next(p for p in session.programs.values() if p.path == Path(scenario.user_path).resolve())
        else:
            self.program = session.program(scenario.program, scenario.toolchain, scenario.variant)
        self.ws = 4 if self.program.variant.bits == 32 else 8
        self.memory = TargetMemory(session.target)
        self.space: AddressSpace | None = None
        self.proc = None
        # set by _prepare; empty until then, for the clean-up of a run that failed inside it
        self.request_points: dict[int, StopPoint] = {}
        self._returns_armed = False
        self.pending: dict[int, Request] = {}
        self.n_requests = 0  # every request, whichever task it landed on
        self._off_program = 0  # requests in a row that landed on other tasks than the program's
        self._walk_regs: UserRegs | None = None
        self._walk_task: TaskInfo | None = None
        self._delivered_now: list[Delivery] = []
        self.oracles: list[Oracle] = []
        self.checker: StackChecker | None = None
        self._last_trace: Trace | None = None
        # Delivery snapshots taken at their stops, walked and judged once the guest runs on
        # (before the next stop is looked at, so the model and the log keep their order).
        self._queue: list[StopSnapshot] = []
        # ... and the deliveries whose task work is done, waiting for their checks (which may
        # wait past the next request: they only read the snapshot and write the log).
        self._checks: list[PendingCheck] = []
        self._snap: StopSnapshot | None = None
        self.verify = verify  # also check each delivery on the live guest at its stop and compare
        self.keep_snapshots = keep_snapshots  # keep (snapshot, record) pairs in self.snapshots
        self.snapshots: list[tuple[StopSnapshot, dict]] = []
        # Where the snapshot of each failing stack (a failed verdict, a problem, a cause the
        # scenario does not declare) is saved, the first SNAPSHOTS_KEPT of them: a failure seen
        # once can be walked and judged again without a guest (snapshot.load, snapshot.replay).
        self.failing_dir = failing_dir
        self.maps = ""
        self._vdso: BufferMemory | None = None
        self._live_code: CodeFacts | None = None
        # Checks done while the guest ran: how many batches, their time, and how many ended
        # after the guest had stopped again (bench deferred prints it).
        self.overlap = {"deliveries": 0, "seconds": 0.0, "late": 0}
        # The sampling loop's own cost, for bench deferred: the process's CPU time (user and
        # system, every thread), the gdb-stub packets by kind, the stub round trips and the log
        # records, from the loop's start to the last delivery's checks (after the loop's flush).
        self.loop_cost = LoopCost()
        # Breakpoints a subclass keeps inserted the whole run (the soak's fork and exit points),
        # handled by _on_lifecycle wherever the engine stops at them; none in a normal run.
        self.lifecycle: dict[int, StopPoint] = {}
        # The guest's or the debugger's error that ended the run (also a line of result.errors),
        # for a caller that raises it rather than reports it (harness/fuzz/live.py).
        self.failure: GuestError | TargetError | ModelError | LoadBiasError | None = None



    def _report(self, finished: bool = False, interrupted: bool = False) -> None:
        if self.progress is not None:
            now = time.monotonic()
            if not finished and now - self._reported < REPORT_EVERY:
                return  # at most 20 states a second: more than any status line shows
            self._reported = now
            r = self.result
            self.progress(Sampling(self.sc.name, r.sampled, self.sc.samples, self.n_requests, r.stacks,
                                   r.failed_stacks, now - self._started, finished, interrupted))

    # -- the run -----------------------------------------------------------------------------
    def _prepare(self) -> None:
        """Start the program, read its address space, build the oracles and the checker, resolve
        the stop points and insert the request breakpoints (the guest is left stopped)."""
        s = self.s
        self.proc = s.run_program([self.program.guest_path, *self.sc.args], output=self._output_path())
        s.target.resume()
        resolve = {self.program.guest_path: str(self.program.path)}
        resolve.update({guest: str(host) for host, guest in self.program.runtime})
        maps = self._maps_once_loaded(resolve.get)
        s.target.interrupt()
        self.memory = with_kernel_vdso(self.memory, maps, self.s.read, self.s.info.symbols,
                                       32 if self.ws == 4 else 64, (MemoryFault, TargetError))
        if isinstance(self.memory, Overlay):  # with_kernel_vdso put the kernel's image in front
            self._vdso = self.memory.first
        self.maps = maps
        self._own_module = Path(self.program.guest_path).name  # as the frame records name it
        self.space = AddressSpace.from_maps(maps, lambda p: resolve.get(p), self.memory)
        self.oracles = build_oracles(Setup(self.space, self.memory, str(self.program.path), self.sc.variant.shadow))
        self.result.oracles = [o.name for o in self.oracles]
        # What the program's stacks may show (the scenario's facts, the registry's conditions):
        # a proven cause outside it is counted in Result.undeclared and said in a note.
        self.result.declared = self.sc.allowed_causes(self.result.oracles)
        self.checker = StackChecker(self.space, self.oracles, self.sc.unwinder, self.max_entries, self.ws,
                                    self.sc.break_ra, self.examiner)
        self.checker.warm()  # tables parsed here, not in the first trace's time
        # An own task's snapshot reads code from the files it maps (text does not change) and
        # the vDSO from the kernel's image; another task's (init, the idle task) only the vDSO.
        self._own_backing = Overlay(self._vdso, self.checker.backing) if self._vdso else self.checker.backing
        self.request_points = {s.stops[self.REQUEST_POINTS[r]].addr: s.stops[self.REQUEST_POINTS[r]]
                               for r in self.sc.requests}
        # The returns to user space, the exit and get_signal(): wherever the task work runs.
        self.return_points = delivery_points(s.stops, s.info.symbols)
        self._returns_armed = False
        # the timer interrupt's request points (none without timer requests), and whether they are in
        timer = self.REQUEST_POINTS.get("timer") if "timer" in self.sc.requests and self.LIFT_TICKS else None
        self._timer_points = [s.stops[timer].addr] if timer else []
        self._timer_in = True
        self._plan_ok = True  # whether the next NMI stop may be left at once (_plan_request_stop)
        self._plan_off = False  # none is, for the rest of the run (_on_continued_request)
        self._seen: collections.Counter = collections.Counter()
        self._ksyms: dict[int, str] = {}  # _kernel_symbol's answers
        for a in self.request_points:
            s.target.set_breakpoint(a)

    def run(self) -> Result:
        start = self._started = time.monotonic()
        self._report()
        s = self.s
        loop_start = start
        rng = random.Random(self.sc.seed)
        interrupted = False
        limit = request_budget(self.sc.samples)
        try:
            # In the try: a guest that dies or hangs while the program starts closes the log
            # with its end record too.
            self._prepare()
            # What exists now (the binaries' tables, the kernel's symbols, the oracles: hundreds of
            # thousands of objects) lives as long as the run: out of the collector's sight, so that
            # an old-generation collection in the loop does not walk it (30-60 ms each, measured).
            gc.freeze()
            loop_start = time.monotonic()
            self.loop_cost.start(s.target, self.log)
            while self.result.sampled < self.sc.samples:
                if self.n_requests >= limit or self.result.stops >= STOPS_PER_REQUEST_LIMIT * limit:
                    self.result.notes.append(
                        f"sampling stopped after {self.n_requests} requests and {self.result.stops} stops: "
                        f"only {self.result.sampled} of them landed on the program's tasks (it sleeps, "
                        f"or other tasks keep the CPU or keep stopping at return points)")
                    break
                if self.sc.time_limit and time.monotonic() - loop_start >= self.sc.time_limit:
                    self.result.notes.append(
                        f"sampling stopped at its time limit ({self.sc.time_limit:g}s) after {self.n_requests} "
                        f"requests: {self.result.sampled} of {self.sc.samples} landed on the program's tasks")
                    break
                status = s.machine.exit_status(self.proc)
                if status is not None:
                    self.result.program_exit = status
                    self.result.notes.append(
                        f"the program exited with status {status} after {self.result.sampled} of "
                        f"{self.sc.samples} requests on its tasks")
                    break
                planned = self._plan_request_stop()
                if self._off_program >= OFF_PROGRAM_STREAK and self._timer_points and not s.target.running:
                    self._run_without_ticks(min(0.001 * (self._off_program - OFF_PROGRAM_STREAK + 1),
                                                OFF_PROGRAM_PAUSE_MAX))
                if not s.target.running:
                    s.target.resume()
                due = time.monotonic()
                if "nmi" in self.sc.requests:
                    if self.sc.rate:
                        due = loop_start + self.n_requests / self.sc.rate
                    elif self.sc.jitter:
                        due += rng.uniform(0, self.sc.jitter)
                    if self._off_program >= OFF_PROGRAM_STREAK:
                        pause = 0.001 * (self._off_program - OFF_PROGRAM_STREAK + 1)
                        due = max(due, time.monotonic() + min(pause, OFF_PROGRAM_PAUSE_MAX))
                # The last delivery's walk and checks run while the guest runs: during the wait
                # for the NMI's time, or (none to wait) after the NMI, while it is on its way.
                # (A check longer than the drawn wait delays that NMI by the difference.)
                nmi_first = "nmi" in self.sc.requests and due <= time.monotonic()
                if not nmi_first:
                    self._process_queue(waiting=False)
                if "nmi" in self.sc.requests:
                    wait = due - time.monotonic()
                    if wait > 0:  # (a sleep of 0 still yields the CPU and the GIL: 50-90 us)
                        time.sleep(wait)
                    # Only into a running guest: one that already stopped (at a return point, on
                    # its way to this NMI) would keep the NMI pending and take it at once on the
                    # next resume, and an NMI injected during every such stop livelocks the guest
                    # in its NMI handler.  A stale NMI that still slips in ends up here as a stop
                    # that arrived before this check, and the next injection is skipped.
                    if self._guest_running():
                        s.machine.inject_nmi()
                if nmi_first:
                    # With the NMI stop left at once, the checks wait for the guest's run from
                    # it to the return point (the request's bookkeeping leaves room there); the
                    # task work may not wait: the next request must see its effect.
                    self._process_queue(checks=not planned)
                stop = s.target.wait_stop(timeout=15)
                self.result.stops += 1
                if stop.pc in self.request_points and stop.continued:
                    self._on_continued_request(self.request_points[stop.pc])
                elif stop.pc in self.request_points:
                    self._on_request(self.request_points[stop.pc])
                    self._plan_ok = True
                elif stop.pc in self.return_points:
                    self._on_return(self.return_points[stop.pc])
                else:
                    self.result.errors.append(f"stopped at {stop.pc:#x}, not at a breakpoint of ours")
                    continue
                # The pending work of the program's tasks is delivered before the next request;
                # other tasks' (init asleep on the console, say) whenever they return.
                self._drive(self._own_pending)
                self._report()
            self.result.loop_seconds = time.monotonic() - loop_start
            # Left running from a continued request stop (another task's work pending): where
            # the interrupt found it may be a return point of that task, handled by the flush.
            self._flush_pending(s.target.interrupt() if s.target.running else None)
        except KeyboardInterrupt as exc:
            # The log still ends with a record a reader can tell from a cut log, after the
            # stacks already captured (their checks need no guest).  A second signal while this
            # runs raises nothing (harness/signals.py).
            self._process_queue_safely()
            self.result.errors.append(f"interrupted ({signal_name(exc)})")
            self._end("interrupted")
            self._report(finished=True, interrupted=True)
            # No clean-up in the guest: the session shuts QEMU down next, and a guest stopped
            # mid-stop can keep each clean-up step waiting for its timeout.
            interrupted = True
            raise
        except (GuestError, TargetError, ModelError, LoadBiasError) as exc:
            # (LoadBiasError: the program's maps and the files they name disagree, found while the
            # checker is built: no stack of it could be judged)
            self.failure = exc
            # A guest that died or hangs ends the whole run (run_scenarios): its cause, in one
            # line, is the scenario's first error; the transport's own words follow.
            lost = None if isinstance(exc, (ModelError, LoadBiasError)) else s.machine_lost(exc)
            if lost:
                self.result.machine_lost = lost
                self.result.errors.append(f"the guest is lost: {lost}")
            self.result.errors.append(f"{type(exc).__name__}: {exc}")
            console = s.machine.console
            if console is not None and lost:
                console.wait_eof(2.0)  # QEMU gone: its console's last lines (the panic) read first
            if console is not None and console.panic:
                # The debugger only sees its connection go: say what the guest said.
                tail = "\n".join(console.tail(30))
                self.result.errors.append(f"guest kernel failed: {console.panic}\n{tail}")
        finally:
            gc.unfreeze()
            s.expected_reads.clear()  # this run's guesses: not the next user's
            if not interrupted:
                self._process_queue_safely()
            if not self.result.loop_seconds:
                self.result.loop_seconds = time.monotonic() - loop_start
            # the loop and its end: the last deliveries' checks are in it, as in result.stacks
            self.loop_cost.stop(s.target, self.log)
            # Clean up in the guest, unless QEMU is gone (a panic) or answers nothing (each step
            # would wait out its bound): the run's error says so already.
            try:
                if s.machine.alive() and not interrupted and not self.result.machine_lost and self.proc is not None:
                    if s.target.running:
                        s.target.interrupt()
                    for a in self.request_points:
                        s.target.remove_breakpoint(a)
                    self._arm_returns(False)
                    s.target.resume()
                    s.machine.shell(f"kill {self.proc.pid}")
                    self._program_output(wait=True)  # while the guest runs: /init forwards the rest
                    s.target.interrupt()
            except (GuestError, TargetError) as exc:
                self.failure = self.failure or exc
                self.result.errors.append(f"cleanup: {exc}")
            if self.proc is not None and self.result.program_output is None:
                self._program_output(wait=False)
            if self.proc is not None and (self.result.short or not self.result.own_stacks):
                self.result.output_tail = output_tail(self.proc.output)
        verdict = check_events(self.log.events)
        self.result.invariant_violations = verdict.messages() + list(self.model.violations)
        self.result.notes += self.result.undeclared_notes()
        self.result.seconds = time.monotonic() - start
        self._end("error" if self.result.errors else "complete")
        self._report(finished=True)
        return self.result

    def _maps_once_loaded(self, resolve) -> str:
        """The program's /proc/PID/maps once its loader has mapped the libraries it needs (the
        guest runs): read before that, a dynamic program's libraries are unknown to the oracles
        for the whole run (issue 21's flake campaign, run b3: no CFI frame in libc.so.6 in any
        stack of a dynamic program, each stopped and explained by cfi-no-fde).  And once every
        module in it is mapped whole: read between two of ld.so's mmaps of one library, its
        mappings and its file disagree (a LoadBiasError, which the checker's warm() raises if it
        lasts).  Bounded by LOADER_WAIT; what is still missing then is said in a note."""
        needed = needed_sonames(self.program)
        deadline = time.monotonic() + LOADER_WAIT
        while True:
            maps = self.s.machine.dump(f"/proc/{self.proc.pid}/maps").decode()
            missing = unmapped(maps, needed)
            if not maps.strip() or time.monotonic() >= deadline:
                break  # (empty: the program is gone already; its exit is the run's to report)
            if not missing and _mapped_whole(maps, resolve):
                break
            time.sleep(0.02)
        if missing and maps.strip():
            self.result.notes.append(f"{', '.join(sorted(missing))} not mapped {LOADER_WAIT:g}s after the program "
                                     f"started: frames there are unknown to the oracles")
        return maps

    def _output_path(self) -> Path | None:
        """The program's output file: beside the scenario's log (fp-spin.jsonl -> fp-spin.out).
        The log is a file from open() (``name``) or a JsonlFile (``path``)."""
        fp = self.log.fp
        name = getattr(fp, "path", None) or getattr(fp, "name", None)
        name = str(name) if isinstance(name, (str, Path)) else ""
        return Path(name).with_suffix(".out") if name.endswith(".jsonl") else None

    def _program_output(self, wait: bool) -> None:
        """Record where the program's output is, once /init has forwarded all of it."""
        if self.proc is None or self.proc.output is None:
            return
        done = self.s.machine.output_done(self.proc, timeout=5.0) if wait else False
        beside = self._output_path() is not None
        self.result.program_output = self.proc.output.name if beside else str(self.proc.output)
        sink = self.s.machine.output_of(self.proc)
        if not done:
            self.result.notes.append(f"program output in {self.result.program_output} may be incomplete "
                                     f"(its end was not seen: a process still holds its stdout, or the guest died)")
        if sink is not None and sink.dropped:
            self.result.notes.append(f"program output: {sink.dropped} bytes past the first {sink.size} dropped")

    def _end(self, reason: str) -> None:
        """The log's last line: what a reader needs to tell a complete log from a cut one."""
        r = self.result
        self.log.emit("end", reason=reason, stacks=r.stacks, failures=r.failed_stacks,
                      causes=dict(sorted(r.causes.items())), requests=self.n_requests,
                      cross=r.cross_outcomes(),
                      errors=r.errors + r.problems, invariant_violations=len(r.invariant_violations),
                      program_output=r.program_output)

    def _own_pending(self) -> bool:
        return any(p.own for p in self.pending.values())

    def _own_kind(self, task: TaskInfo) -> str | None:
        """How ``task`` belongs to the program: its main thread, another thread, a child it
        forked (same comm: before or after it execs the same program), or not at all."""
        if task.kthread:
            return None
        if task.tgid == self.proc.pid:
            return "main" if task.pid == task.tgid else "thread"
        if task.comm == self.program.comm:
            return "child"
        return None

    def _model_task(self, task: TaskInfo):
        mt = self.model.tasks.get(task.pid)
        if mt is None:
            # A task the model has not seen: one that existed before the run, or a child forked
            # since.  Either way its unwind state starts empty (copy_process() ->
            # unwind_task_init()), which is what spawn() gives it.
            mt = self.model.spawn(task.pid, kthread=task.kthread)
        return mt

    @property
    def _returns_armed(self) -> bool:
        """Whether the return points are in (set at every change, with the session's hint of the
        next stop's registers: :attr:`Session.stop_regs`)."""
        return self._armed

    @_returns_armed.setter
    def _returns_armed(self, on: bool) -> None:
        self._armed = on
        # While the return points are in, the next stop is at one of them or at a point of
        # another kind that stays in (a syscall or timer request, a lifecycle point), not at
        # the NMI: the engine sends one only with nothing pending.  (A stop elsewhere all the
        # same reads what was not guessed in a batch of its own.)
        self.s.stop_regs = frozenset(
            p.regs for p in (*self.return_points.values(), *self.request_points.values(), *self.lifecycle.values())
            if p.kind != "nmi") if on else None

    def _guest_running(self) -> bool:
        """Whether the guest left running has not stopped yet: from the debugger's socket where
        the transport can tell (no QMP round trip), else QMP's query-status."""
        arrived = self.s.target.stop_arrived()
        return self.s.machine.vm_running() if arrived is None else not arrived

    def _cont(self, timeout: float) -> Stop:
        """Continue to the next stop, walking and checking the captured deliveries meanwhile."""
        if self.s.target.running:  # a request stop the guest left at once
            self._process_queue()
            return self.s.target.wait_stop(timeout)
        stop = self.s.target.cont_start(timeout)
        self._process_queue()
        return stop if stop is not None else self.s.target.wait_stop(timeout)



    def _plan_request_stop(self) -> bool:
        """Leave the next NMI stop at once (Target.plan_continue): its registers and the
        session's guesses are read, the return points armed and the guest continued in one
        write, and the request is made while the guest runs on to its return.  Only where
        that stop cannot be another (the NMI point is the one breakpoint in: nothing pending,
        no return point armed), and not right after a stop whose guesses missed."""
        if (self._plan_ok and not self._plan_off and not self.pending and not self._returns_armed
                and list(self.sc.requests) == ["nmi"]):
            (addr,) = self.request_points
            return self.s.target.plan_continue(addr, list(self.return_points))
        return False

    def _on_continued_request(self, point) -> None:
        """An NMI stop the guest has left already (:meth:`_plan_request_stop`): the request is
        made from what was read with its registers.  Where those guesses missed what the
        request needs (the NMI hit a task other than the vCPU's last one), the NMI is passed
        over, as a tracer may decline one, and the next NMI stop is taken the usual way."""
        self.result.continued += 1
        self._returns_armed = True
        try:
            self._on_request(point)
        except StopLeft:
            r = self.result
            r.passed_over += 1
            self._plan_ok = False
            if r.passed_over > PLAN_MISSES_MAX and r.passed_over * 10 > r.continued:
                # The NMIs keep catching tasks the vCPU did not run at its last stops (threads
                # that take turns: 120 of 274 NMIs passed over in one run): each would be an NMI
                # lost, and a sample the more likely the longer its task ran.  Not for this run.
                self._plan_off = True
                r.notes.append(f"NMI stops were no longer left at once after {r.passed_over} of {r.continued} "
                               f"missed what their request needed (the NMIs caught other tasks than the vCPU's last)")
        if not self.pending:
            # Nothing to deliver, and the guest runs with the return points in: stop it to take
            # them out (a rare stop: the NMI hit a kernel thread, or a task on its way out).
            self.s.target.interrupt()

    def _on_request(self, point) -> None:
        s = self.s
        # Everything read from the guest first: at a stop it has left already, a read that
        # was not guessed raises StopLeft before the model has seen anything of this request.
        s.prefetch_stop(point)
        task = s.current()
        iregs = s.regs_at(point)
        uregs = None if task.kthread else s.task_user_regs(task)
        fs_base = s.target.read_registers()["fs_base"]
        self.n_requests += 1
        mt = self._model_task(task)
        if task.exiting:
            mt.flags |= PF_EXITING
        user = uregs is not None and uregs.user_mode
        if not mt.in_kernel and not mt.dead:
            self.model.enter_kernel(mt, point.kind if iregs.user_mode else "kernel", cpu=s.target.cpu)
        # A task the model saw exit (its work delivered in do_exit) may still be on its way out:
        # PF_EXITING is set and the request fails with -EINVAL, as in the kernel.
        kind = {"nmi": NMI, "syscall": SYSCALL}.get(point.kind, IRQ)
        ctx = Context(kind, user_mode=user)
        own = self._own_kind(task) is not None
        self.result.sampled += own
        self._off_program = 0 if own else self._off_program + 1
        queued = False
        for w in self.works:
            ret, _cookie = self.model.request(w, mt, s.target.cpu, ctx)
            self.result.requests[ret] += 1
            queued |= ret >= 0
        if queued and task.pid not in self.pending:
            # The stack the request is about: the interrupted user registers when the request
            # hit user mode, else those the task saved on its way into the kernel.  A request
            # that interrupts the entry or exit assembly (before pt_regs is complete, or after
            # the last return-to-user point) is delivered at the task's *next* exit, with other
            # registers: the kernel carries the pending state over in the same way.
            window = None
            where = None
            if not iregs.user_mode:
                where = self._kernel_symbol(iregs.ip)
                if where.startswith(ENTRY_EXIT_ASM) or self._in_entry_text(iregs.ip):
                    window = where
            want = iregs if iregs.user_mode else uregs
            # The syscall the task is in (a request at its entry, or one that interrupted its
            # kernel code): orig_ax of its pt_regs.
            syscall = want.orig_ax if want is not None and (point.kind == "syscall" or not iregs.user_mode) else None
            own = self._own_kind(task)
            self.pending[task.pid] = Request(want, window, where, syscall, own)
            if own is not None and want is not None and want.user_mode:
                # Most likely what the delivery stop will capture: the transport reads it with
                # that stop's registers, and the capture costs no round trip of its own.
                s.expected_reads[task.pid] = self._capture_ranges(want, want, own, fs_base)

    def _in_entry_text(self, addr: int) -> bool:
        """``addr`` is in the kernel's .entry.text (the entry and exit assembly: past the last
        return-to-user point, e.g. in syscall_return_via_sysret, a request is delivered at the
        next exit), where the kernel has the section's bounds."""
        syms = self.s.info.symbols
        start, end = syms.get("__entry_text_start"), syms.get("__entry_text_end")
        return start is not None and end is not None and start <= addr < end

    def _kernel_symbol(self, addr: int) -> str:
        """The kernel text symbol at ``addr``; remembered for the run (a request's kernel IP is
        one of a few: the syscall's path, the idle loop), where a look-up cost 8 us a request."""
        name = self._ksyms.get(addr)
        if name is None:
            if len(self._ksyms) >= 1 << 16:
                self._ksyms.clear()  # a long run over many kernel paths: bounded
            found = self.s.symbols.nearest(addr, text=True)
            name = self._ksyms[addr] = found[0].name if found else ""
        return name

    def _arm_returns(self, on: bool) -> None:
        """Return-to-user breakpoints sit in the kernel only while some task has pending work,
        so a trace costs about two stops, not one per kernel exit."""
        if on == self._returns_armed or self.s.target.running:
            return  # running: from a continued request stop, armed; the next stop sets them right
        (self.s.target.set_breakpoints if on else self.s.target.remove_breakpoints)(list(self.return_points))
        self._returns_armed = on

    def _drive(self, waiting, max_stops: int = 5000, bound_is_problem: bool = True) -> None:
        """Continue from return point to return point while ``waiting()``; deliver on the way.
        Past ``max_stops`` the work still pending is a problem of the run, or, with
        ``bound_is_problem`` false, left to the caller (the end of the run: a task asleep)."""
        self._arm_returns(bool(self.pending))
        # Ticks reached while delivering are passed over: out, so that they do not stop the guest
        # at every tick while the task it waits for has yet to run (OFF_PROGRAM_STREAK's comment).
        lifted = bool(self._timer_points) and waiting() and self._set_timer_points(False)
        n = 0
        self._seen = collections.Counter()
        while waiting():
            n += 1
            if n > max_stops:
                if not bound_is_problem:
                    break
                seen = ", ".join(f"{k[1]}[{k[0]}] at {k[2]} x{v}" for k, v in self._seen.most_common(6))
                what = "; ".join(f"{pid}: {p.own or 'other'}, requested at ip={p.want.ip if p.want else 0:#x} "
                                 f"in {p.where or 'user mode'}" for pid, p in sorted(self.pending.items()))
                self.result.problems.append(
                    f"pending work of {sorted(self.pending)} not delivered within {max_stops} stops ({what}); "
                    f"stops were: {seen}")
                self.pending.clear()
                break
            stop = self._cont(timeout=30)
            self.result.stops += 1
            if stop.pc in self.lifecycle:
                self._on_lifecycle(self.lifecycle[stop.pc])
                continue
            point = self.return_points.get(stop.pc) or self.request_points.get(stop.pc)
            if point is None:
                self.result.errors.append(f"stopped at {stop.pc:#x}, not at a breakpoint of ours")
            elif stop.pc in self.return_points:
                self._on_return(point)
            elif point.kind == "syscall" and self.result.sampled < self.sc.samples:
                # A syscall entry while another task's work is pending (the child that runs while
                # its parent sits in sched_yield with work pending) is a request like any other,
                # up to the scenario's number: passed over, that syscall would never be sampled.
                # NMI and timer request points reached while delivering are passed over (they
                # come again), so a trace's cost stays measurable.
                self._on_request(point)
        if lifted:
            self._set_timer_points(True)
        self._arm_returns(bool(self.pending))

    def _set_timer_points(self, on: bool) -> bool:
        """Put the timer interrupt's request points in (``on``) or take them out; False where
        nothing was done: the guest runs (a request stop left at once), or they are so already."""
        if on == self._timer_in or self.s.target.running:
            return False
        (self.s.target.set_breakpoints if on else self.s.target.remove_breakpoints)(self._timer_points)
        self._timer_in = on
        return True

    def _run_without_ticks(self, seconds: float) -> None:
        """Let the guest run ``seconds`` with the timer's request points out, then stop it and
        put them back (OFF_PROGRAM_STREAK's comment): the program gets ticks to run in."""
        if not self._set_timer_points(False):
            return
        self.s.target.resume()
        time.sleep(seconds)
        stop = self.s.target.interrupt()
        self.result.stops += 1
        self._at_interrupt(stop)
        self._drive(self._own_pending)
        self._set_timer_points(True)

    def _on_lifecycle(self, point: StopPoint) -> None:
        """A stop at one of :attr:`lifecycle`'s points (a subclass's)."""






















def run_scenarios(session: Session, scenarios: list[Scenario], log_dir: Path | None = None,
                  progress: ProgressCallback | None = None, results: list[Result] | None = None,
                  cross_examine: bool = False) -> list[Result]:
    """Run each scenario in turn; on Ctrl-C (SIGTERM, SIGHUP) the interrupted scenario's partial
    result (its log closed by an "interrupted" end record) is the last one returned, and no
    further one runs; so it is after a scenario that lost the guest (``Result.machine_lost``:
    QEMU died, stopped or went silent; its log closed by an "error" end record naming why).
    ``progress`` gets each scenario's :class:`Sampling` states (the last one ``finished``).
    ``results``: the list to append to, so a caller keeps what was done even if an interrupt
    escapes (one that lands between scenarios or in a scenario's clean-up).
    ``cross_examine``: every proven cause's claims about binaries are asked again of the
    toolchain's own tools (one witness for the whole run: each tool asked once a file)."""
    results = [] if results is None else results
    with CrossExaminer() if cross_examine else contextlib.nullcontext() as examiner:
        _run_each(session, scenarios, log_dir, progress, results, examiner)
    return results


def _run_each(session, scenarios, log_dir, progress, results, examiner) -> None:
    for sc in scenarios:
        # The same scenario named twice gets a log per run: forkexec.jsonl, forkexec.2.jsonl, ...
        n = sum(r.scenario.name == sc.name for r in results)
        name = f"{sc.name}{f'.{n + 1}' if n else ''}.jsonl"
        log = JsonlFile(log_dir / name) if log_dir else None  # whole lines only, even on a full disk
        try:
            engine = Engine(session, sc, log, progress, failing_dir=log_dir / "failing" if log_dir else None,
                            examiner=examiner)
            engine.result.log = name if log_dir else None
            # In the list before it runs: whatever escapes the run (an interrupt in its clean-up,
            # say), the caller still has this scenario's partial result.
            results.append(engine.result)
            engine.run()
        except KeyboardInterrupt:
            break
        finally:
            if log:
                log.close()
        if engine.result.machine_lost:
            break  # the guest is gone or hangs: no scenario after this one can run on it


def raw_stop_rate(session: Session, program: Program, n: int = 200, batches: int = 5) -> float:
    """The floor: stops per second at a breakpoint the program hits continuously (a syscall
    return), with nothing done at each stop but reading the registers.  The median of
    ``batches`` batches of ``n`` stops: one batch is a tenth of a second on QEMU 11, and single
    batches in one guest were seen 1894 and 2472 stops/s apart."""
    proc = session.run_program([program.guest_path, "100000000", "raw"])
    point = session.stops["return_syscall64"]
    session.target.set_breakpoint(point.addr)
    # Nothing but the registers: not the reads the session takes with them at each stop.
    reads, session.target.stop_reads = session.target.stop_reads, None
    try:
        session.target.cont(timeout=30)
        rates = []
        for _ in range(batches):
            start = time.monotonic()
            for _ in range(n):
                session.target.cont(timeout=30)
            rates.append(n / (time.monotonic() - start))
        return statistics.median(rates)
    finally:
        session.target.stop_reads = reads
        session.target.remove_breakpoint(point.addr)
        session.target.resume()
        session.machine.shell(f"kill {proc.pid}")
        # Gone before anything samples: a task of the same name still on its way out is taken
        # for the next run's program (seen: the first requests of the bench's sampling run, on
        # the floor's program, failing with -EINVAL as PF_EXITING).
        session.machine.output_done(proc, timeout=10.0)
        session.target.interrupt()
