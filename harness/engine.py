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

Divergences between an unwinder and an oracle are explained frame by frame: the two traces are
aligned, and every frame one of them lacks must have a cause that the code at that address
shows (a prologue or epilogue IP, a function that keeps no frame pointer, code without the
instrumentation hooks, a signal frame); anything else is a failure.
"""

from __future__ import annotations

import collections
import random
import struct
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, ClassVar

from elftools.dwarf.callframe import RegisterRule
from elftools.elf.elffile import ELFFile

from .deferred.check import check_events
from .deferred.log import EventLog
from .deferred.model import (
    IRQ,
    NMI,
    SYSCALL,
    Context,
    DeferredModel,
    ModelError,
    UnwindWork,
)
from .deferred.profile import get_profile
from .images.programs import Program, Variant
from .kernel import PF_EXITING, TaskInfo
from .kernel.stops import StopPoint
from .memory import MemoryFault
from .regs import UserRegs
from .rule import FrameRule, ValueRule
from .session import Session
from .sframe.errors import SFrameError
from .transport.errors import GuestError, TargetError, TargetTimeout
from .transport.target import TargetMemory
from .unwind.cfi import X86_64, CorruptCFI, cfi_table, cfi_tables_for, unwind_cfi
from .unwind.maps import VDSO, AddressSpace, parse_maps
from .unwind.mixed import sframe_tables_for
from .unwind.symbolize import Symbolizer, symbol_index
from .unwind.user import StopReason, Trace, UnwindConfig, unwind_user

SHADOW_MAGIC = 0x5348414430574B53  # guest_programs/shadow.h
# Entry and exit assembly: a request interrupting it sees pt_regs that are not (or no longer)
# those of the user context the task returns to next.
ENTRY_EXIT_ASM = ("entry_", "asm_", "error_", "common_interrupt_return", "swapgs_restore",
                  "native_irq_return", "restore_regs_and_return", "paranoid_", "xen_",
                  "sync_regs", "fixup_bad_iret")
FOREIGN = "not checked: another task (no oracle)"
SHADOW_NOT_PRESENT = "shadow not checked: its page is not present yet (fresh exec)"
# Syscalls that replace the user registers: work requested at their entry (or while the task is
# in them) is delivered with the registers they install: unwind_deferred has no exec or sigreturn
# hook, the task work just unwinds the pt_regs it finds at the return to user space.
EXEC_REPLACED = "request during execve: delivered with the new image's registers (no exec hook in unwind_deferred)"
SIGRETURN_RESTORED = "request during rt_sigreturn: delivered with the restored (interrupted) registers"
SIGNAL_DELIVERY = ("request during signal delivery (after get_signal() ran the task work): delivered with "
                   "the handler's registers, the signal frame holds the requested ones")
CFI_MAX_ENTRIES = 4096  # the oracle walks on where the kernel's cache truncates
# `mov %rsp,%rbp` by word size: with a `push %rbp` before it near a function's start, the frame
# setup whose absence makes a function "frameless".  The two need not be adjacent (the vDSO's
# __vdso_clock_gettime schedules `mov %edi,%r11d` between them).
MOV_SP_FP = {8: b"\x48\x89\xe5", 4: b"\x89\xe5"}
# DWARF register numbers (x86-64 psABI) -> pt_regs names, for the signal frame's CFI rules.
DWARF_TO_PT_REGS = {0: "ax", 1: "dx", 2: "cx", 3: "bx", 4: "si", 5: "di", 6: "bp", 7: "sp", 8: "r8",
                    9: "r9", 10: "r10", 11: "r11", 12: "r12", 13: "r13", 14: "r14", 15: "r15", 16: "ip"}


@dataclass(frozen=True)
class Scenario:
    name: str
    program: str = "callchain"
    toolchain: str = "host"
    variant: Variant = Variant(shadow=True)
    args: tuple[str, ...] = ("100000000", "spin")
    profile: str = "mainline"
    # Requests (injected NMIs, timer interrupts or syscall entries) that land on the program's
    # own tasks; those that land elsewhere (the idle task, init) are handled and counted too,
    # up to MAX_REQUESTS_PER_SAMPLE times this many in all.
    samples: int = 60
    tracers: int = 2
    unwinder: str = "fp"  # "fp" (frame pointers only) or "sframe" (SFrame where an FRE exists, else FP)
    # Where tracers request: "nmi" (QMP inject-nmi: reaches vCPU 0 only), "timer" (the local APIC
    # timer interrupt, on every vCPU: the request point for SMP guests) and/or "syscall" (entry
    # of do_syscall_64, a request from task context for every 64-bit syscall, on every vCPU).
    requests: tuple[str, ...] = ("nmi",)
    # Up to this many seconds of guest run time before each NMI, drawn at random (seeded): TCG
    # takes interrupts at translation-block boundaries, and without a delay the NMI lands at
    # the same few IPs sample after sample.
    jitter: float = 0.01
    # With a rate (NMIs per second of wall time), NMIs are injected on that schedule instead
    # (sampling mode); the jitter is then not used.
    rate: float = 0.0
    seed: int = 0
    break_ra: bool = False  # test-only: every frame's RA read at the wrong offset
    user_path: str | None = None  # a user's own binary (toolchain "user") instead of a guest program

    def describe(self) -> str:
        return (f"{self.program} [{self.variant.tag}] {self.toolchain}, {self.unwinder}, {self.profile}, "
                f"{self.samples} requests on its tasks at {'+'.join(self.requests)}, {self.tracers} tracers")


_NOFP = Variant(frame_pointers=False, shadow=True)

CATALOG: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("fp-spin"),
        Scenario("fp-syscall", args=("100000000", "raw")),
        Scenario("fp-libc-syscall", args=("100000000", "libc")),
        Scenario("sframe-v1-nofp", variant=_NOFP, unwinder="sframe"),
        Scenario("sframe-v2-nofp", toolchain="trixie", variant=_NOFP, unwinder="sframe"),
        Scenario("sframe-v3-nofp", toolchain="sid", variant=_NOFP, unwinder="sframe"),
        Scenario("fp-seed-v10", profile="seed-v10"),
        Scenario("fp-dynamic", variant=Variant(static=False, shadow=True), args=("100000000", "raw")),
        Scenario("fp-timer", requests=("timer",)),
        Scenario("sframe-v2-timer", toolchain="trixie", variant=_NOFP, unwinder="sframe", requests=("timer",),
                 args=("100000000", "raw")),
        # Requests from task context: every syscall entry (do_syscall_64) is a request point.
        Scenario("fp-syscall-entry", args=("100000000", "raw"), requests=("syscall",)),
        # Threads: the shadow stack is a __thread variable, found from each thread's fs_base.
        Scenario("threads", program="threads", args=("3", "spin")),
        # Fork, exec and exit from known chains; children are tasks of their own.
        Scenario("forkexec", program="forkexec", args=("8192",)),
        Scenario("forkexec-syscall", program="forkexec", args=("8192",), requests=("syscall",)),
        # A SIGALRM handler spinning in a known chain: FP across the signal frame.
        Scenario("signal", program="signal", args=("spin",)),
        Scenario("signal-syscall", program="signal", args=("raw",), requests=("syscall",)),
        # A loop in the vDSO's clock_gettime (the vDSO's image is read from guest memory).
        Scenario("vdso", program="vdso", args=("mono",)),
        # Deeper than UNWIND_MAX_ENTRIES: truncated at 510 (mainline) or 512 (seed v10).
        Scenario("recurse", program="recurse", args=("600",)),
        Scenario("recurse-seed-v10", program="recurse", args=("600",), profile="seed-v10"),
        # Samples at function entry and exit: FP loses the caller there, SFrame does not.
        Scenario("prologues", program="prologues", args=()),
        Scenario("prologues-sframe", program="prologues", toolchain="sid", unwinder="sframe", args=()),
        # A 32-bit task: compat FP (4-byte words) against the shadow stack and i386 DWARF CFI.
        Scenario("compat-fp", variant=Variant(bits=32, shadow=True)),
        Scenario("compat-int80", variant=Variant(bits=32, shadow=True), args=("100000000", "raw")),
    )
}
DEFAULT_SET = ("fp-spin", "fp-syscall", "sframe-v3-nofp")


class _BrokenRA:
    """Test-only rule provider: the right CFA, the return address one word off."""

    def rule_for(self, pc: int) -> FrameRule:
        return FrameRule(ValueRule("fp", 16), ValueRule("cfa", -16, True), ValueRule("cfa", -16, True))


@dataclass
class Delivered:
    pid: int
    cookie: int
    trace: tuple[int, ...]
    tracer: str


@dataclass(frozen=True)
class Pending:
    """Work requested for a task and not yet delivered."""

    want: UserRegs | None  # the user registers the request was about
    window: str | None  # the entry/exit asm the request interrupted, or None
    where: str | None  # the kernel function the request interrupted, None for user mode
    syscall: int | None  # the syscall the task was in at the request, where known
    own: str | None  # "main", "thread", "child" or None (another task)


@dataclass
class Result:
    scenario: Scenario
    requests: collections.Counter = field(default_factory=collections.Counter)
    stacks: int = 0
    checked: collections.Counter = field(default_factory=collections.Counter)  # oracle -> agreed
    diverged: collections.Counter = field(default_factory=collections.Counter)  # oracle -> explained divergences
    expected: collections.Counter = field(default_factory=collections.Counter)  # divergence kind -> n
    failures: list[str] = field(default_factory=list)
    callbacks: int = 0
    cookies: set = field(default_factory=set)
    walks: int = 0
    stops: int = 0
    tasks: set = field(default_factory=set)  # pids of the program's tasks whose stacks were checked
    children: int = 0  # stacks of the program's children (fork, exec) checked
    at_exit: int = 0  # stacks of the program's tasks delivered in do_exit()
    truncated: int = 0  # stacks cut at UNWIND_MAX_ENTRIES
    seconds: float = 0.0
    loop_seconds: float = 0.0  # the sampling loop alone (no program start, no log check)
    invariant_violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # why sampling ended early, and the like
    sampled: int = 0  # requests that landed on the program's tasks
    program_exit: int | None = None  # the status /init reported, if the program ended during the run
    examples: dict = field(default_factory=dict)  # divergence kind -> the first stack it named, side by side

    @property
    def own_stacks(self) -> int:
        """Stacks of the program's own tasks (the ones the oracles check)."""
        return self.stacks - self.expected[FOREIGN]

    def row(self) -> dict:
        return {
            "scenario": self.scenario.name,
            "stacks": self.stacks,
            "tasks": len(self.tasks),
            "shadow ok": self.checked["shadow"],
            "cfi ok": self.checked["cfi"],
            "regs ok": self.checked["regs"],
            "expected": sum(self.expected.values()),
            "failures": len(self.failures),
            "on program": f"{self.sampled}/{sum(self.requests.values()) // max(1, self.scenario.tracers)}",
            "req 0/1/-EINVAL": f"{self.requests[0]}/{self.requests[1]}/{self.requests[-22]}",
            "callbacks": self.callbacks,
            "cookies": len(self.cookies),
            "walks saved": self.callbacks - self.walks,
            "at exit": self.at_exit,
            "stops/trace": f"{self.stops / self.stacks:.1f}" if self.stacks else "-",
            "invariants": "ok" if not self.invariant_violations else len(self.invariant_violations),
        }


def format_table(rows: list[dict]) -> str:
    if not rows:
        return "(no scenarios)"
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    line = "  ".join(c.ljust(widths[c]) for c in cols)
    out = [line, "  ".join("-" * widths[c] for c in cols)]
    out += ["  ".join(str(r[c]).ljust(widths[c]) for c in cols) for r in rows]
    return "\n".join(out)


@dataclass(frozen=True)
class _Func:
    """A function of the task's address space at run-time addresses."""

    name: str
    start: int
    size: int


@dataclass(frozen=True)
class ShadowSymbol:
    """Where ``harness_shadow`` is: an absolute address, or (``__thread``) an offset in the TLS
    block, which on x86-64 (TLS variant II, static executable) starts ``tls_offset`` bytes below
    the thread pointer (fs_base): ``roundup(PT_TLS p_memsz, p_align)``, as glibc's
    ``__libc_setup_tls`` and ``_dl_allocate_tls_init`` place it."""

    value: int
    tls_offset: int | None = None

    def address(self, fs_base: int) -> int:
        if self.tls_offset is None:
            return self.value
        return fs_base - self.tls_offset + self.value


class VdsoBackedMemory:
    """Guest memory whose vDSO range is served from the kernel's copy of the vDSO image.

    A process maps the vDSO's pages only as it touches them, so the image read through the
    process (for its .eh_frame, .dynsym and section headers) can fault on a page the process never
    used.  The pages are the kernel's ``vdso_image_64.data`` (or ``vdso_image_32``) either way."""

    def __init__(self, inner, start: int, image: bytes):
        self.inner = inner
        self.start = start
        self.image = image

    def read(self, addr: int, size: int) -> bytes:
        off = addr - self.start
        if 0 <= off and off + size <= len(self.image):
            return self.image[off : off + size]
        return self.inner.read(addr, size)


# Sampling gives up after this many requests per requested sample (plus 100) when too few land
# on the program: a program that sleeps must not keep the run going for ever.
MAX_REQUESTS_PER_SAMPLE = 10
# ... and after this many stops per allowed request: an NMI goes only into a running guest, so
# a guest that keeps stopping at return points (another task's work pending) before each
# injection would otherwise take no request and keep the loop going.
STOPS_PER_REQUEST_LIMIT = 20


class Engine:
    RETURN_POINTS = ("return_syscall64", "return_irq", "return_syscall32", "return_sysenter32")
    REQUEST_POINTS: ClassVar[dict[str, str]] = {"nmi": "nmi", "timer": "apic_timer", "syscall": "syscall_entry"}

    def __init__(self, session: Session, scenario: Scenario, log: IO[str] | None = None):
        self.s = session
        self.sc = scenario
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
        self.pending: dict[int, Pending] = {}
        self.n_requests = 0  # every request, whichever task it landed on
        self._walk_regs: UserRegs | None = None
        self._walk_task: TaskInfo | None = None
        self._delivered_now: list[Delivered] = []
        self.symbolizer: Symbolizer | None = None
        self.shadow = _shadow_symbol(self.program.path) if scenario.variant.shadow else None
        self._funcs: dict[tuple[int, bool], _Func | None] = {}
        self._facts: dict[tuple[str, int], object] = {}

    # -- model hooks -------------------------------------------------------------------------
    def _walk(self, mtask) -> list[int]:
        """``unwind_user()`` for the model: the Python unwinder on live guest memory."""
        self.result.walks += 1
        trace = self._unwind(self._walk_regs)
        self._last_trace = trace
        return trace.ips

    def _callback(self, work, trace, cookie) -> None:
        self.result.callbacks += 1
        self.result.cookies.add(cookie)
        self._delivered_now.append(Delivered(self._walk_task.pid, cookie, tuple(trace), work.name))

    def _unwind(self, regs: UserRegs) -> Trace:
        cfg = UnwindConfig(max_entries=self.max_entries)
        if self.sc.break_ra:
            cfg = replace(cfg, tables_for=lambda ip: _BrokenRA())
        elif self.sc.unwinder == "sframe" and self.space is not None:
            cfg = replace(cfg, tables_for=self._sframe_tables)
        return unwind_user(self.memory, regs, cfg)

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> Result:
        start = time.monotonic()
        s = self.s
        self.proc = s.run_program([self.program.guest_path, *self.sc.args])
        s.target.resume()
        maps = s.machine.dump(f"/proc/{self.proc.pid}/maps").decode()
        s.target.interrupt()
        resolve = {self.program.guest_path: str(self.program.path)}
        resolve.update({guest: str(host) for host, guest in self.program.runtime})
        self.memory = self._with_kernel_vdso(self.memory, maps)
        self.space = AddressSpace.from_maps(maps, lambda p: resolve.get(p), self.memory)
        self.symbolizer = Symbolizer(self.space)
        self._cfi_tables = cfi_tables_for(self.space)
        self._sframe_tables = sframe_tables_for(self.space)
        self.request_points = {s.stops[self.REQUEST_POINTS[r]].addr: s.stops[self.REQUEST_POINTS[r]]
                               for r in self.sc.requests}
        self.return_points = {s.stops[p].addr: s.stops[p] for p in self.RETURN_POINTS if p in s.stops.points}
        if "exit" in s.stops.points:
            self.return_points[s.stops["exit"].addr] = s.stops["exit"]
        if "get_signal" in s.info.symbols:
            # get_signal() runs the task's pending task work before it looks for a signal, i.e.
            # before a handler's frame replaces the user registers: deliver there.
            self.return_points[s.info.symbols["get_signal"]] = StopPoint(
                "get_signal", s.info.symbols["get_signal"], "return", "task", "symbol get_signal")
        self._returns_armed = False
        self._seen: collections.Counter = collections.Counter()
        for a in self.request_points:
            s.target.set_breakpoint(a)
        loop_start = time.monotonic()
        rng = random.Random(self.sc.seed)
        limit = MAX_REQUESTS_PER_SAMPLE * self.sc.samples + 100
        try:
            while self.result.sampled < self.sc.samples:
                if self.n_requests >= limit or self.result.stops >= STOPS_PER_REQUEST_LIMIT * limit:
                    self.result.notes.append(
                        f"sampling stopped after {self.n_requests} requests and {self.result.stops} stops: "
                        f"only {self.result.sampled} of them landed on the program's tasks (it sleeps, "
                        f"or other tasks keep the CPU or keep stopping at return points)")
                    break
                status = s.machine.exit_status(self.proc)
                if status is not None:
                    self.result.program_exit = status
                    self.result.notes.append(
                        f"the program exited with status {status} after {self.result.sampled} of "
                        f"{self.sc.samples} requests on its tasks")
                    break
                s.target.resume()
                if "nmi" in self.sc.requests:
                    if self.sc.rate:
                        due = loop_start + self.n_requests / self.sc.rate
                        time.sleep(max(0.0, due - time.monotonic()))
                    elif self.sc.jitter:
                        time.sleep(rng.uniform(0, self.sc.jitter))
                    # Only into a running guest: one that already stopped (at a return point, on
                    # its way to this NMI) would keep the NMI pending and take it at once on the
                    # next resume, and an NMI injected during every such stop livelocks the guest
                    # in its NMI handler.  A stale NMI that still slips in ends up here as a stop
                    # that arrived before this check, and the next injection is skipped.
                    if s.machine.vm_running():
                        s.machine.inject_nmi()
                stop = s.target.wait_stop(timeout=15)
                self.result.stops += 1
                if stop.pc in self.request_points:
                    self._on_request(self.request_points[stop.pc])
                elif stop.pc in self.return_points:
                    self._on_return(self.return_points[stop.pc])
                else:
                    self.result.errors.append(f"stopped at {stop.pc:#x}, not at a breakpoint of ours")
                    continue
                # The pending work of the program's tasks is delivered before the next request;
                # other tasks' (init asleep on the console, say) whenever they return.
                self._drive(self._own_pending)
            self.result.loop_seconds = time.monotonic() - loop_start
            self._flush_pending()
        except (GuestError, TargetError, ModelError) as exc:
            self.result.errors.append(f"{type(exc).__name__}: {exc}")
            console = s.machine.console
            if console is not None and console.panic:
                # The debugger only sees its connection go: say what the guest said.
                tail = "\n".join(console.tail(30))
                self.result.errors.append(f"guest kernel failed: {console.panic}\n{tail}")
        finally:
            if not self.result.loop_seconds:
                self.result.loop_seconds = time.monotonic() - loop_start
            # Clean up in the guest, unless QEMU is gone (a panic): the run's error says so already.
            try:
                if s.machine.alive():
                    for a in self.request_points:
                        s.target.remove_breakpoint(a)
                    self._arm_returns(False)
                    s.target.resume()
                    s.machine.shell(f"kill {self.proc.pid}")
                    s.target.interrupt()
            except (GuestError, TargetError) as exc:
                self.result.errors.append(f"cleanup: {exc}")
        verdict = check_events(self.log.events)
        self.result.invariant_violations = verdict.messages() + list(self.model.violations)
        self.result.seconds = time.monotonic() - start
        return self.result

    def _with_kernel_vdso(self, memory, maps: str):
        """``memory`` with the vDSO served from the kernel's image (``struct vdso_image``: data
        pointer, then size; ``vdso_image_64`` up to 6.x, ``vdso64_image`` in 7.x), when the kernel
        has the symbol and the image is an ELF file."""
        vdso = next((m for m in parse_maps(maps) if m.path == VDSO), None)
        bits = 32 if self.ws == 4 else 64
        syms = self.s.info.symbols
        sym = syms.get(f"vdso_image_{bits}") or syms.get(f"vdso{bits}_image")
        if vdso is None or sym is None:
            return memory
        try:
            data, size = struct.unpack("<QQ", self.s.read(sym, 16))
            if not 0 < size <= vdso.end - vdso.start:
                return memory
            image = self.s.read(data, size)
        except (MemoryFault, TargetError):
            return memory
        if image[:4] != b"\x7fELF":
            return memory
        return VdsoBackedMemory(memory, vdso.start, image)

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

    def _on_request(self, point) -> None:
        s = self.s
        self.n_requests += 1
        task = s.current()
        iregs = s.regs_at(point)
        mt = self._model_task(task)
        if task.exiting:
            mt.flags |= PF_EXITING
        uregs = None if task.kthread else s.task_user_regs(task)
        user = uregs is not None and uregs.user_mode
        if not mt.in_kernel and not mt.dead:
            self.model.enter_kernel(mt, point.kind if iregs.user_mode else "kernel", cpu=s.target.cpu)
        # A task the model saw exit (its work delivered in do_exit) may still be on its way out:
        # PF_EXITING is set and the request fails with -EINVAL, as in the kernel.
        kind = {"nmi": NMI, "syscall": SYSCALL}.get(point.kind, IRQ)
        ctx = Context(kind, user_mode=user)
        self.result.sampled += self._own_kind(task) is not None
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
                if where.startswith(ENTRY_EXIT_ASM):
                    window = where
            want = iregs if iregs.user_mode else uregs
            # The syscall the task is in (a request at its entry, or one that interrupted its
            # kernel code): orig_ax of its pt_regs.
            syscall = want.orig_ax if want is not None and (point.kind == "syscall" or not iregs.user_mode) else None
            self.pending[task.pid] = Pending(want, window, where, syscall, self._own_kind(task))

    def _kernel_symbol(self, addr: int) -> str:
        found = self.s.symbols.nearest(addr, text=True)
        return found[0].name if found else ""

    def _arm_returns(self, on: bool) -> None:
        """Return-to-user breakpoints sit in the kernel only while some task has pending work,
        so a trace costs about two stops, not one per kernel exit."""
        if on == self._returns_armed:
            return
        for a in self.return_points:
            (self.s.target.set_breakpoint if on else self.s.target.remove_breakpoint)(a)
        self._returns_armed = on

    def _drive(self, waiting, max_stops: int = 5000) -> None:
        """Continue from return point to return point while ``waiting()``; deliver on the way."""
        self._arm_returns(bool(self.pending))
        n = 0
        self._seen = collections.Counter()
        while waiting():
            n += 1
            if n > max_stops:
                seen = ", ".join(f"{k[1]}[{k[0]}] at {k[2]} x{v}" for k, v in self._seen.most_common(6))
                what = "; ".join(f"{pid}: {p.own or 'other'}, requested at ip={p.want.ip if p.want else 0:#x} "
                                 f"in {p.where or 'user mode'}" for pid, p in sorted(self.pending.items()))
                self.result.failures.append(
                    f"pending work of {sorted(self.pending)} not delivered within {max_stops} stops ({what}); "
                    f"stops were: {seen}")
                self.pending.clear()
                break
            stop = self.s.target.cont(timeout=30)
            self.result.stops += 1
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
        self._arm_returns(bool(self.pending))

    def _flush_pending(self) -> None:
        """At the end, wake sleeping tasks (init reads the console) so that their pending work
        is delivered; what still stays pending is reported, not dropped."""
        if not self.pending:
            return
        # No new requests now: with the request points still in, timer interrupts on every vCPU
        # would spend the drive's stops while init wakes up.
        for a in self.request_points:
            self.s.target.remove_breakpoint(a)
        self.s.target.resume()
        self.s.machine.console.send("")  # an empty line wakes init's read loop
        self.s.target.interrupt()
        try:
            self._drive(lambda: bool(self.pending), max_stops=200)
        except TargetTimeout:
            pass
        if self.pending:
            self.result.expected["still pending at the end of the run (task never returned)"] += len(self.pending)
        self.pending.clear()

    def _on_return(self, point) -> None:
        s = self.s
        task = s.current()
        self._seen[(task.pid, task.comm, point.name)] += 1
        if task.pid not in self.pending:
            return
        mt = self.model.tasks[task.pid]
        regs = s.regs_at(point)
        pending = self.pending.pop(task.pid)
        self._walk_regs, self._walk_task = regs, task
        self._delivered_now = []
        if point.kind == "exit":
            self.model.exit(mt)
        else:
            self.model.return_to_user(mt)
        self._check(task, regs, pending, point)
        self._arm_returns(bool(self.pending))

    # -- oracles -------------------------------------------------------------------------------
    def _check(self, task: TaskInfo, regs: UserRegs, p: Pending, point) -> None:
        r = self.result
        if not self._delivered_now:
            return
        r.stacks += 1
        traces = {d.trace for d in self._delivered_now}
        if len(traces) != 1:
            r.failures.append(f"pid {task.pid}: tracers got different traces in one entry")
        trace = self._last_trace
        if p.want is not None:
            if (p.want.ip, p.want.sp, p.want.bp) == (regs.ip, regs.sp, regs.bp):
                r.checked["regs"] += 1
            elif p.window is not None:
                r.expected[f"request inside {p.window}: delivered at the next exit"] += 1
            elif self._handler_frame_saved(regs, p.want):
                r.expected[SIGNAL_DELIVERY] += 1
            elif p.syscall in (59, 322) and regs.fresh_exec:
                r.expected[EXEC_REPLACED] += 1
            elif p.syscall == 15 and self._sigreturn_restored(p.want, regs):
                r.expected[SIGRETURN_RESTORED] += 1
            else:
                r.failures.append(f"pid {task.pid}: delivered stack of ip={regs.ip:#x} sp={regs.sp:#x}, "
                                  f"requested at ip={p.want.ip:#x} sp={p.want.sp:#x} "
                                  f"(request interrupted {p.where or 'user mode'})")
        own = self._own_kind(task)
        if own is None:
            r.expected[FOREIGN] += 1
            return
        r.tasks.add(task.pid)
        r.children += own == "child"
        r.at_exit += point.kind == "exit"
        truncated = trace.stop.reason is StopReason.LIMIT
        if truncated:
            r.truncated += 1
            if len(trace) != self.max_entries or any(len(t) != self.max_entries for t in traces):
                r.failures.append(f"pid {task.pid}: trace truncated at {len(trace)} entries, "
                                  f"not UNWIND_MAX_ENTRIES = {self.max_entries}")
        # 32-bit tasks too: unwind_cfi walks compat registers with the i386 numbering and
        # 4-byte words, and ends at an i386 signal trampoline (_signal_frame_regs is 64-bit).
        cfi, marks = self._cfi(regs)
        self._compare("cfi", trace.ips, cfi, marks, regs, truncated)
        if self.shadow is not None:
            try:
                expected = self._shadow_chain(regs)
            except MemoryFault:
                # Right after an exec the image's data pages are not present yet; the kernel would
                # fault them in, a debugger read cannot.
                r.expected[SHADOW_NOT_PRESENT] += 1
                expected = None
            if expected is not None:
                self._compare("shadow", trace.ips, expected, {0}, regs, truncated)

    def _cfi(self, regs: UserRegs) -> tuple[list[int], set[int]]:
        """The DWARF CFI trace, continued through signal frames; and the indices of its entries
        that are interrupted IPs (0, and the frame after each signal frame), not return addresses.

        harness.unwind.cfi stops at a signal trampoline (glibc's ``__restore_rt``, CIE
        augmentation "zRS") by name: it gives every register as ``DW_CFA_expression`` over the
        ucontext the kernel saved, and the frame below it is an interrupted IP, not a return
        address.  Here, for 64-bit tasks, those rules are evaluated (each is ``DW_OP_breg7 (rsp)
        N``: the register is at sp + N) and the walk goes on from the interrupted context,
        looking its IP up at itself ('S').  A 32-bit trampoline ends the walk there."""
        ips: list[int] = []
        marks = {0}
        cur = regs
        for _ in range(16):
            t = unwind_cfi(self.memory, cur, self._cfi_tables, max_entries=CFI_MAX_ENTRIES - len(ips))
            ips += t.ips
            if t.stop.reason is not StopReason.UNSUPPORTED_RULE or len(t.frames) < 2:
                break
            nxt = self._signal_frame_regs(t.frames[-1].ip, t.frames[-1].sp)
            if nxt is None:
                break
            marks.add(len(ips))
            cur = nxt
        return ips, marks

    def _sigreturn_restored(self, want: UserRegs, regs: UserRegs) -> bool:
        """``regs`` are those that rt_sigreturn restored from the signal frame at ``want.sp``
        (the ucontext; __restore_rt's CFI describes it)."""
        if want.compat:
            return False
        restored = self._signal_frame_regs(want.ip, want.sp)
        return restored is not None and (restored.ip, restored.sp, restored.bp) == (regs.ip, regs.sp, regs.bp)

    def _handler_frame_saved(self, regs: UserRegs, want: UserRegs) -> bool:
        """``regs`` enter a signal handler whose signal frame saved the registers ``want``: the
        request came while the kernel was delivering a signal, after get_signal() had run the task
        work, so the work queued by the request runs once the handler's frame is set up."""
        if regs.compat:
            return False
        try:
            ra = struct.unpack("<Q", self.memory.read(regs.sp, 8))[0]  # the frame's pretcode
        except MemoryFault:
            return False
        saved = self._signal_frame_regs(ra, regs.sp + 8)
        return saved is not None and (saved.ip, saved.sp, saved.bp) == (want.ip, want.sp, want.bp)

    def _signal_frame_regs(self, ra: int, sp: int) -> UserRegs | None:
        """The interrupted registers of the signal frame whose trampoline ``ra`` returns to."""
        e = self.space.elf_at(ra - 1)
        if e is None:
            return None
        table = cfi_table(e.image)
        if table.arch is not X86_64:  # an i386 trampoline: the compat CFI walk ends there
            return None
        link = e.link_address(ra - 1)
        fde = table.fde_for(link)
        if fde is None or b"S" not in bytes(fde.cie["augmentation"] or b""):
            return None
        found = table.row_for(link)
        if found is None:
            return None
        row, _ra_col = found

        def sp_offset(expr) -> int | None:
            ops = table.parse_expr(expr)
            if not ops or ops[0].op_name != "DW_OP_breg7":
                return None
            return ops[0].args[0]

        try:
            values = {}
            for reg, name in DWARF_TO_PT_REGS.items():
                rule = row.get(reg)
                if rule is None or rule.type != RegisterRule.EXPRESSION:
                    continue
                off = sp_offset(rule.arg)
                if off is None:
                    return None
                values[name] = struct.unpack("<Q", self.memory.read(sp + off, 8))[0]
        except (MemoryFault, CorruptCFI):
            return None
        if "ip" not in values or "sp" not in values:
            return None
        return UserRegs(**values)

    def _shadow_chain(self, regs: UserRegs) -> list[int] | None:
        """[ip, return addresses...] as the shadow stack has them (innermost first)."""
        fs_base = self.s.target.read_registers()["fs_base"] if self.shadow.tls_offset is not None else 0
        addr = self.shadow.address(fs_base)
        raw = self.memory.read(addr, 16)
        magic, depth, overflow = struct.unpack("<QII", raw)
        if magic != SHADOW_MAGIC:
            self.result.failures.append(f"shadow stack magic {magic:#x} at {addr:#x} (fs_base {fs_base:#x})")
            return None
        if overflow or depth > 2048:
            return None
        frames = self.memory.read(addr + 16, 16 * depth)
        sites = [struct.unpack_from("<QQ", frames, 16 * i)[1] for i in range(depth)]
        ip = regs.ip & 0xFFFFFFFF if regs.compat else regs.ip
        return [ip, *reversed(sites)]

    def _compare(self, oracle: str, got: list[int], want: list[int], marks: set[int], regs: UserRegs,
                 truncated: bool) -> None:
        r = self.result
        aligned = self._align(oracle, got, want, marks)
        if aligned is None:
            if oracle == "shadow" and self._in_hooks(got[0] if got else regs.ip):
                r.expected["shadow: IP inside the instrumentation hooks"] += 1
                r.diverged[oracle] += 1
                return
            r.failures.append(self._side_by_side(oracle, got, want))
            return
        reasons, i, j = aligned
        if reasons:
            r.diverged[oracle] += 1
            for why in sorted(set(reasons)):
                r.expected[why] += 1
                if why not in r.examples:
                    r.examples[why] = self._side_by_side(oracle, got, want)
        else:
            r.checked[oracle] += 1
        if i == len(got) and j < len(want):
            if truncated:
                r.expected[f"{self.sc.unwinder}: truncated at {self.max_entries} entries "
                           f"(UNWIND_MAX_ENTRIES; {oracle} goes on)"] += 1
            else:
                r.expected[f"{self.sc.unwinder} stops early ({oracle} goes on)"] += 1

    def _align(self, oracle: str, got: list[int], want: list[int],
               marks: set[int]) -> tuple[list[str], int, int] | None:
        """Align the unwinder's trace ``got`` with the oracle's ``want``, skipping frames that one
        of them lacks for a reason the code shows.  Returns (reasons, end of got, end of want) of
        the alignment with the fewest skips, or None when some difference has no such reason.

        A skip inside a run of equal entries (recursion: rec+0x2a, rec+0x2a, ...) is explained at
        the run's first entry: removing any entry of the run leaves the same trace, and only at
        the run's start does the frame before it tell why (the IP that had not pushed its frame,
        not the 390th identical return address)."""
        best: list = []

        def run_start(seq: list[int], idx: int) -> int:
            k = idx
            while k - 1 >= 1 and seq[k - 1] == seq[idx]:
                k -= 1
            return k

        def walk(i: int, j: int, reasons: list[str]) -> None:
            while i < len(got) and j < len(want) and got[i] == want[j]:
                i += 1
                j += 1
            if i == len(got) or j == len(want):
                if not best or len(reasons) < len(best[0][0]):
                    best[:] = [(reasons, i, j)]
                return
            if i == 0 or j == 0 or len(reasons) >= 8 or (best and len(reasons) + 1 >= len(best[0][0])):
                return
            why = self._unwinder_lost(want, run_start(want, j), marks)
            if why:
                walk(i, j + 1, [*reasons, why])
            why = self._oracle_lacks(oracle, got, run_start(got, i)) if oracle == "shadow" else None
            if why:
                walk(i + 1, j, [*reasons, why])

        walk(0, 0, [])
        return best[0] if best else None

    def _unwinder_lost(self, want: list[int], j: int, marks: set[int]) -> str | None:
        """Why a frame-pointer step would lose ``want[j]``, the return address (or interrupted IP)
        of the frame below ``want[j-1]``; None when it should not have."""
        prev, prev_is_ip = want[j - 1], (j - 1) in marks
        if j in marks:
            # want[j] is the IP a signal interrupted: nothing on the stack links the handler's
            # frames to it.  The handler saved the interrupted rbp, so the step after the
            # trampoline reads the interrupted function's frame and yields its return address.
            return "fp: interrupted IP lost across a signal frame (the step from __restore_rt follows the interrupted rbp)"
        if self.sc.unwinder == "sframe" and self._has_fre(prev, prev_is_ip):
            return None  # SFrame describes that frame: a lost caller is a real divergence
        f = self._function(prev, not prev_is_ip)
        if f is None:
            return None
        ctx = "" if j - 1 == 0 else " of the interrupted context"
        setup = self._frame_setup(f)
        if setup is None:
            if prev_is_ip:
                return f"fp: caller lost at an IP in a function without frame setup ({f.name}){ctx}"
            return f"fp: caller of {f.name} lost ({f.name} sets up no frame pointer)"
        if prev_is_ip:
            if prev < setup:
                return f"fp: caller lost at a prologue IP (entry rule off){ctx}"
            if self._at_epilogue(prev):
                return f"fp: caller lost at an epilogue IP (after pop %rbp, before ret){ctx}"
        return None

    def _oracle_lacks(self, oracle: str, got: list[int], i: int) -> str | None:
        """Why the shadow stack has no entry for ``got[i]``, the return address of the function
        at ``got[i-1]``: that function is not instrumented, or (at the IP) has not pushed its
        shadow frame yet or has popped it already."""
        prev, prev_is_ip = got[i - 1], i - 1 == 0
        f = self._function(prev, not prev_is_ip)
        if f is None:
            return None
        if not self._instrumented(f):
            return f"shadow: no frame for uninstrumented code ({f.name})"
        if prev_is_ip and not self._shadow_pushed(prev, f):
            return "shadow: IP before the enter hook or after the exit hook"
        return None

    # -- facts about code at an address (memoized: text does not change) ----------------------
    def _function(self, addr: int, return_address: bool) -> _Func | None:
        key = (addr, return_address)
        if key not in self._funcs:
            probe = addr - 1 if return_address else addr
            e = self.space.elf_at(probe)
            found = None
            if e is not None:
                link = e.link_address(probe)
                sym = symbol_index(e.image).lookup(link)
                if sym is not None:
                    found = _Func(sym.name, sym.addr + e.bias, sym.size)
                else:
                    # no symbol (the vDSO exports only its entry points): the bounds of the FDE
                    fde = cfi_table(e.image).fde_for(link)
                    if fde is not None:
                        start = fde["initial_location"]
                        found = _Func(f"{e.path.rsplit('/', 1)[-1]}+{start:#x}", start + e.bias,
                                      fde["address_range"])
            self._funcs[key] = found
        return self._funcs[key]

    def _fact(self, kind: str, addr: int, compute):
        key = (kind, addr)
        if key not in self._facts:
            try:
                self._facts[key] = compute()
            except MemoryFault:
                self._facts[key] = None
        return self._facts[key]

    def _frame_setup(self, f: _Func) -> int | None:
        """The address after ``mov %rsp,%rbp``: right after a ``push %rbp`` in the first bytes of
        ``f``, or further on when ``push %rbp`` is its first instruction (after ``endbr64``);
        None when there is no such setup (the function keeps no frame pointer)."""
        def compute():
            head = self.memory.read(f.start, min(f.size or 32, 32))
            mov = MOV_SP_FP[self.ws]
            k = head.find(b"\x55" + mov, 0, 24)  # adjacent: also after i386 main's stack realignment
            if k >= 0:
                return f.start + k + 1 + len(mov)
            push = 4 if head.startswith((b"\xf3\x0f\x1e\xfa", b"\xf3\x0f\x1e\xfb")) else 0
            if head[push : push + 1] != b"\x55":
                return None
            k = head.find(mov, push + 1, 24)
            return f.start + k + len(mov) if k >= 0 else None
        return self._fact("setup", f.start, compute)

    def _at_epilogue(self, ip: int) -> bool:
        """``ip`` is a ``ret`` right after ``pop %rbp`` or ``leave``: the frame pointer is the
        caller's already."""
        def compute():
            code = self.memory.read(ip - 1, 2)
            return code[1] == 0xC3 and code[0] in (0x5D, 0xC9)
        return bool(self._fact("epilogue", ip, compute))

    def _calls(self, start: int, end: int) -> set[int]:
        """Targets of the ``call rel32`` instructions in [start, end)."""
        code = self.memory.read(start, end - start) if end > start else b""
        out = set()
        for k in range(len(code) - 4):
            if code[k] == 0xE8:
                out.add((start + k + 5 + struct.unpack_from("<i", code, k + 1)[0]) & ((1 << 64) - 1))
        return out

    def _hooks(self) -> tuple[int | None, int | None]:
        if "hooks" not in self._facts:
            self._facts["hooks"] = (self.symbolizer.address_of("__cyg_profile_func_enter"),
                                    self.symbolizer.address_of("__cyg_profile_func_exit"))
        return self._facts["hooks"]

    def _instrumented(self, f: _Func) -> bool:
        """``f`` calls ``__cyg_profile_func_enter`` (built with -finstrument-functions)."""
        enter, _ = self._hooks()
        if enter is None:
            return False
        return bool(self._fact("instrumented", f.start,
                               lambda: enter in self._calls(f.start, f.start + min(f.size or 256, 1 << 16))))

    def _shadow_pushed(self, ip: int, f: _Func) -> bool:
        """Whether the function at ``ip`` has pushed its shadow frame and not yet popped it: a
        ``call __cyg_profile_func_enter`` completes before ``ip`` and no ``call ..._exit`` does."""
        enter, leave = self._hooks()
        try:
            calls = self._calls(f.start, ip)
        except MemoryFault:
            return True
        return enter in calls and leave not in calls

    def _in_hooks(self, ip: int) -> bool:
        f = self._function(ip, False)
        return f is not None and f.name.startswith("__cyg_profile_func")

    def _has_fre(self, addr: int, is_ip: bool) -> bool:
        """SFrame has a row for the frame at ``addr`` (looked up at ra - 1 for a return address)."""
        pc = addr if is_ip else addr - 1
        provider = self._sframe_tables(pc)
        try:
            return provider is not None and provider.rule_for(pc) is not None
        except SFrameError:
            return False

    def _side_by_side(self, oracle: str, got: list[int], want: list[int]) -> str:
        sym = self.symbolizer.name if self.symbolizer else hex
        lines = [f"{self.sc.name}: {self.sc.unwinder} vs {oracle} differ:"]
        for i in range(max(len(got), len(want))):
            a = sym(got[i], i > 0) if i < len(got) else ""
            b = sym(want[i], i > 0) if i < len(want) else ""
            mark = "  " if (got[i] if i < len(got) else None) == (want[i] if i < len(want) else None) else "!!"
            lines.append(f"  {mark} #{i:<3} {a:40} {b}")
        return "\n".join(lines)



def _shadow_symbol(path: Path) -> ShadowSymbol | None:
    """``harness_shadow`` of a non-PIE build: its address, or its TLS offset (``__thread``)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        if symtab is None:
            return None
        syms = symtab.get_symbol_by_name("harness_shadow")
        if not syms:
            return None
        if elf.header.e_type == "ET_DYN":
            return None  # PIE: needs the load bias; shadow checks use non-PIE builds
        sym = syms[0]
        if sym["st_info"]["type"] != "STT_TLS":
            return ShadowSymbol(sym["st_value"])
        tls = next((s for s in elf.iter_segments() if s["p_type"] == "PT_TLS"), None)
        if tls is None:
            return None
        align = max(tls["p_align"], 1)
        return ShadowSymbol(sym["st_value"], -(-tls["p_memsz"] // align) * align)


def user_scenario(path: str, args: list[str], samples: int = 60) -> Scenario:
    """A scenario for a user's own binary: SFrame-based unwinding where it has SFrame, else
    frame pointers; the CFI oracle always, the shadow stack only for our instrumented builds."""
    from .images.programs import user_program

    p = user_program(path)
    return Scenario(f"user:{p.name}", program=p.name, toolchain=p.toolchain, variant=p.variant,
                    args=tuple(args), samples=samples, unwinder="sframe" if p.variant.sframe else "fp",
                    user_path=str(p.path))


def programs_for(scenarios: list[Scenario]) -> list[tuple[str, str, Variant]]:
    seen = []
    for sc in scenarios:
        if sc.user_path:
            continue
        key = (sc.program, sc.toolchain, sc.variant)
        if key not in seen:
            seen.append(key)
    return seen


def run_scenarios(session: Session, scenarios: list[Scenario], log_dir: Path | None = None) -> list[Result]:
    results = []
    for sc in scenarios:
        # The same scenario named twice gets a log per run: forkexec.jsonl, forkexec.2.jsonl, ...
        n = sum(r.scenario.name == sc.name for r in results)
        log = open(log_dir / f"{sc.name}{f'.{n + 1}' if n else ''}.jsonl", "w") if log_dir else None
        try:
            results.append(Engine(session, sc, log).run())
        finally:
            if log:
                log.close()
    return results


def raw_stop_rate(session: Session, program: Program, n: int = 200) -> float:
    """The floor: stops per second at a breakpoint the program hits continuously (a syscall
    return), with nothing done at each stop but reading the registers."""
    proc = session.run_program([program.guest_path, "100000000", "raw"])
    point = session.stops["return_syscall64"]
    session.target.set_breakpoint(point.addr)
    try:
        session.target.cont(timeout=30)
        start = time.monotonic()
        for _ in range(n):
            session.target.cont(timeout=30)
        return n / (time.monotonic() - start)
    finally:
        session.target.remove_breakpoint(point.addr)
        session.target.resume()
        session.machine.shell(f"kill {proc.pid}")
        session.target.interrupt()
