"""The engine: breakpoints in a live guest drive the deferred-unwinding model.

Injected NMIs stop the guest at ``exc_nmi``: the engine plays the tracers that *request* a
deferred user stack for the current task.  While a task has pending work, breakpoints sit on
the return-to-user points (and ``do_exit``); when the task reaches one, the engine runs the
model's task work there: the Python unwinder walks the user stack from the saved pt_regs by
reading guest memory, and each requesting tracer's callback receives (trace, cookie).  At that
same stop the oracles check the stack: the program's own shadow stack (instrumented builds), the
DWARF CFI unwinder, and whether the registers are those of the request (the right stack).

A user-mode NMI returns through ``swapgs_restore_regs_and_return_to_usermode``; the kernel's
request from NMI context raises a self-IPI (TWA_NMI_CURRENT) whose exit runs the task work
before any user instruction, with the same user registers.  The engine runs the work at that
first return, which sees exactly those registers.
"""

from __future__ import annotations

import collections
import json
import random
import struct
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from elftools.elf.elffile import ELFFile

from .deferred.log import EventLog
from .deferred.model import IRQ, NMI, Context, DeferredModel, UnwindWork
from .deferred.profile import get_profile
from .deferred.check import check_events
from .images.programs import Program, Variant
from .kernel import TaskInfo
from .memory import MemoryFault
from .regs import UserRegs
from .session import Session
from .transport.errors import GuestError, TargetError, TargetTimeout
from .transport.target import TargetMemory
from .unwind.cfi import cfi_tables_for, unwind_cfi
from .unwind.maps import AddressSpace
from .unwind.mixed import sframe_tables_for
from .unwind.rule import FrameRule, ValueRule
from .unwind.symbolize import Symbolizer
from .unwind.user import Trace, UnwindConfig, unwind_user

SHADOW_MAGIC = 0x5348414430574B53  # guest_programs/shadow.h
# Entry and exit assembly: a request interrupting it sees pt_regs that are not (or no longer)
# those of the user context the task returns to next.
ENTRY_EXIT_ASM = ("entry_", "asm_", "error_", "common_interrupt_return", "swapgs_restore",
                  "native_irq_return", "restore_regs_and_return", "paranoid_", "xen_",
                  "sync_regs", "fixup_bad_iret")
FOREIGN = "not checked: another task or a 32-bit task (no oracle)"


@dataclass(frozen=True)
class Scenario:
    name: str
    program: str = "callchain"
    toolchain: str = "host"
    variant: Variant = Variant(shadow=True)
    args: tuple[str, ...] = ("100000000", "spin")
    profile: str = "mainline"
    samples: int = 60  # NMIs injected
    tracers: int = 2
    unwinder: str = "fp"  # "fp" (frame pointers only) or "sframe" (SFrame where an FRE exists, else FP)
    # Where tracers request: "nmi" (QMP inject-nmi: reaches vCPU 0 only) and/or "timer" (the
    # local APIC timer interrupt, on every vCPU: the request point for SMP guests).
    requests: tuple[str, ...] = ("nmi",)
    # Up to this many seconds of guest run time before each NMI, drawn at random (seeded): TCG
    # takes interrupts at translation-block boundaries, and without a delay the NMI lands at
    # the same few IPs sample after sample.
    jitter: float = 0.01
    seed: int = 0
    break_ra: bool = False  # test-only: every frame's RA read at the wrong offset
    user_path: str | None = None  # a user's own binary (toolchain "user") instead of a guest program

    def describe(self) -> str:
        return (f"{self.program} [{self.variant.tag}] {self.toolchain}, {self.unwinder}, {self.profile}, "
                f"{self.samples} requests at {'+'.join(self.requests)}, {self.tracers} tracers")


CATALOG: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("fp-spin"),
        Scenario("fp-syscall", args=("100000000", "raw")),
        Scenario("fp-libc-syscall", args=("100000000", "libc")),
        Scenario("sframe-v1-nofp", variant=Variant(frame_pointers=False, shadow=True), unwinder="sframe"),
        Scenario("sframe-v2-nofp", toolchain="trixie", variant=Variant(frame_pointers=False, shadow=True),
                 unwinder="sframe"),
        Scenario("sframe-v3-nofp", toolchain="sid", variant=Variant(frame_pointers=False, shadow=True),
                 unwinder="sframe"),
        Scenario("fp-seed-v10", profile="seed-v10"),
        Scenario("fp-dynamic", variant=Variant(static=False, shadow=True), args=("100000000", "raw")),
        Scenario("fp-timer", requests=("timer",)),
        Scenario("sframe-v2-timer", toolchain="trixie", variant=Variant(frame_pointers=False, shadow=True),
                 unwinder="sframe", requests=("timer",), args=("100000000", "raw")),
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


@dataclass
class Result:
    scenario: Scenario
    requests: collections.Counter = field(default_factory=collections.Counter)
    stacks: int = 0
    checked: collections.Counter = field(default_factory=collections.Counter)  # oracle -> agreed
    expected: collections.Counter = field(default_factory=collections.Counter)  # divergence kind -> n
    failures: list[str] = field(default_factory=list)
    callbacks: int = 0
    cookies: set = field(default_factory=set)
    walks: int = 0
    stops: int = 0
    seconds: float = 0.0
    loop_seconds: float = 0.0  # the sampling loop alone (no program start, no log check)
    invariant_violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def row(self) -> dict:
        return {
            "scenario": self.scenario.name,
            "stacks": self.stacks,
            "shadow ok": self.checked["shadow"],
            "cfi ok": self.checked["cfi"],
            "regs ok": self.checked["regs"],
            "expected": sum(self.expected.values()),
            "failures": len(self.failures),
            "req 0/1/-EINVAL": f"{self.requests[0]}/{self.requests[1]}/{self.requests[-22]}",
            "callbacks": self.callbacks,
            "cookies": len(self.cookies),
            "walks saved": self.callbacks - self.walks,
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


class Engine:
    RETURN_POINTS = ("return_syscall64", "return_irq", "return_syscall32", "return_sysenter32")

    def __init__(self, session: Session, scenario: Scenario, log: IO[str] | None = None):
        self.s = session
        self.sc = scenario
        self.result = Result(scenario)
        self.log = EventLog(log, keep=True)
        self.model = DeferredModel(get_profile(scenario.profile), self._walk, log=self.log)
        self.works = []
        for i in range(scenario.tracers):
            w = UnwindWork(self._callback, name=f"tracer{i}")
            self.model.init(w)
            self.works.append(w)
        if scenario.user_path:
            self.program = next(p for p in session.programs.values() if p.path == Path(scenario.user_path).resolve())
        else:
            self.program = session.program(scenario.program, scenario.toolchain, scenario.variant)
        self.memory = TargetMemory(session.target)
        self.space: AddressSpace | None = None
        self.proc = None
        # pid -> (user regs at the request, the entry/exit asm window the request interrupted or
        # None, the kernel function it interrupted or None for user mode)
        self.pending: dict[int, tuple[UserRegs | None, str | None, str | None]] = {}
        self._walk_regs: UserRegs | None = None
        self._walk_task: TaskInfo | None = None
        self._delivered_now: list[Delivered] = []
        self.symbolizer: Symbolizer | None = None
        self.shadow_addr = _symbol_address(self.program.path, "harness_shadow") if scenario.variant.shadow else None

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
        cfg = UnwindConfig()
        if self.sc.break_ra:
            cfg = replace(cfg, tables_for=lambda ip: _BrokenRA())
        elif self.sc.unwinder == "sframe" and self.space is not None:
            cfg = replace(cfg, tables_for=sframe_tables_for(self.space))
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
        self.space = AddressSpace.from_maps(maps, lambda p: resolve.get(p), self.memory)
        self.symbolizer = Symbolizer(self.space)
        names = {"nmi": "nmi", "timer": "apic_timer"}
        self.request_points = {s.stops[names[r]].addr: s.stops[names[r]] for r in self.sc.requests}
        self.return_points = {s.stops[p].addr: s.stops[p] for p in self.RETURN_POINTS if p in s.stops.points}
        if "exit" in s.stops.points:
            self.return_points[s.stops["exit"].addr] = s.stops["exit"]
        self._returns_armed = False
        for a in self.request_points:
            s.target.set_breakpoint(a)
        loop_start = time.monotonic()
        rng = random.Random(self.sc.seed)
        try:
            requests = 0
            while requests < self.sc.samples:
                s.target.resume()
                if "nmi" in self.sc.requests:
                    if self.sc.jitter:
                        time.sleep(rng.uniform(0, self.sc.jitter))
                    s.machine.inject_nmi()
                stop = s.target.wait_stop(timeout=15)
                self.result.stops += 1
                if stop.pc in self.request_points:
                    requests += 1
                    self._on_request(self.request_points[stop.pc])
                elif stop.pc in self.return_points:
                    self._on_return(self.return_points[stop.pc])
                else:
                    self.result.errors.append(f"stopped at {stop.pc:#x}, not at a breakpoint of ours")
                    continue
                # The program's own pending work is delivered before the next request; other
                # tasks' (init asleep on the console, say) whenever they return.
                self._drive(lambda: self.proc.pid in self.pending)
            self.result.loop_seconds = time.monotonic() - loop_start
            self._flush_pending()
        except (GuestError, TargetError) as exc:
            self.result.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            if not self.result.loop_seconds:
                self.result.loop_seconds = time.monotonic() - loop_start
            try:
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

    def _model_task(self, task: TaskInfo):
        mt = self.model.tasks.get(task.pid)
        if mt is None:
            mt = self.model.spawn(task.pid, kthread=task.kthread)
        return mt

    def _on_request(self, point) -> None:
        s = self.s
        task = s.current()
        iregs = s.regs_at(point)
        mt = self._model_task(task)
        if task.exiting:
            mt.flags |= 0x4
        uregs = None if task.kthread else s.task_user_regs(task)
        user = uregs is not None and uregs.user_mode
        if not mt.in_kernel:
            self.model.enter_kernel(mt, point.kind if iregs.user_mode else "kernel", cpu=s.target.cpu)
        ctx = Context(NMI if point.kind == "nmi" else IRQ, user_mode=user)
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
            if not iregs.user_mode:
                name = self._kernel_symbol(iregs.ip)
                if name.startswith(ENTRY_EXIT_ASM):
                    window = name
            self.pending[task.pid] = (iregs if iregs.user_mode else uregs,
                                      window, None if iregs.user_mode else self._kernel_symbol(iregs.ip))

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
        while waiting():
            n += 1
            if n > max_stops:
                self.result.failures.append(
                    f"pending work of {sorted(self.pending)} not delivered within {max_stops} stops")
                self.pending.clear()
                break
            stop = self.s.target.cont(timeout=30)
            self.result.stops += 1
            point = self.return_points.get(stop.pc) or self.request_points.get(stop.pc)
            if point is None:
                self.result.errors.append(f"stopped at {stop.pc:#x}, not at a breakpoint of ours")
            elif stop.pc in self.return_points:
                self._on_return(point)
            # a request point reached while delivering is passed over: requests are counted
            # by the sampling loop only, so a trace's cost stays measurable
        self._arm_returns(bool(self.pending))

    def _flush_pending(self) -> None:
        """At the end, wake sleeping tasks (init reads the console) so that their pending work
        is delivered; what still stays pending is reported, not dropped."""
        if not self.pending:
            return
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
        if task.pid not in self.pending:
            return
        mt = self.model.tasks[task.pid]
        regs = s.task_user_regs(task) if point.kind == "exit" else s.regs_at(point)
        want, window, where = self.pending.pop(task.pid)
        self._walk_regs, self._walk_task = regs, task
        self._delivered_now = []
        if point.kind == "exit":
            self.model.exit(mt)
        else:
            self.model.return_to_user(mt)
        self._check(task, regs, want, window, where)
        self._arm_returns(bool(self.pending))

    # -- oracles -------------------------------------------------------------------------------
    def _check(self, task: TaskInfo, regs: UserRegs, want: UserRegs | None, window: str | None,
               where: str | None) -> None:
        r = self.result
        if not self._delivered_now:
            return
        r.stacks += 1
        traces = {d.trace for d in self._delivered_now}
        if len(traces) != 1:
            r.failures.append(f"pid {task.pid}: tracers got different traces in one entry")
        trace = self._last_trace
        if want is not None:
            if (want.ip, want.sp, want.bp) == (regs.ip, regs.sp, regs.bp):
                r.checked["regs"] += 1
            elif window is not None:
                r.expected[f"request inside {window}: delivered at the next exit"] += 1
            else:
                r.failures.append(f"pid {task.pid}: delivered stack of ip={regs.ip:#x} sp={regs.sp:#x}, "
                                  f"requested at ip={want.ip:#x} sp={want.sp:#x} "
                                  f"(request interrupted {where or 'user mode'})")
        if task.tgid != self.proc.pid or regs.compat:
            r.expected[FOREIGN] += 1
            return
        cfi = unwind_cfi(self.memory, regs, cfi_tables_for(self.space))
        self._compare("cfi", trace.ips, cfi.ips, regs)
        if self.shadow_addr is not None:
            expected = self._shadow_chain(regs)
            if expected is not None:
                self._compare("shadow", trace.ips, expected, regs)

    def _shadow_chain(self, regs: UserRegs) -> list[int] | None:
        """[ip, return addresses...] as the shadow stack has them (innermost first)."""
        raw = self.memory.read(self.shadow_addr, 16)
        magic, depth, overflow = struct.unpack("<QII", raw)
        if magic != SHADOW_MAGIC:
            self.result.failures.append(f"shadow stack magic {magic:#x} at {self.shadow_addr:#x}")
            return None
        if overflow or depth > 2048:
            return None
        frames = self.memory.read(self.shadow_addr + 16, 16 * depth)
        sites = [struct.unpack_from("<QQ", frames, 16 * i)[1] for i in range(depth)]
        return [regs.ip, *reversed(sites)]

    def _compare(self, oracle: str, got: list[int], want: list[int], regs: UserRegs) -> None:
        r = self.result
        n = min(len(got), len(want))
        if got[:n] == want[:n]:
            r.checked[oracle] += 1
            if len(got) < len(want):
                r.expected[f"{self.sc.unwinder} stops early ({oracle} goes on)"] += 1
            return
        kind = self._divergence(oracle, got, want, regs)
        if kind:
            r.expected[kind] += 1
            return
        r.failures.append(self._side_by_side(oracle, got, want))

    def _divergence(self, oracle: str, got: list[int], want: list[int], regs: UserRegs) -> str | None:
        """Name a divergence that is expected at this IP, or return None (a failure)."""
        loc = self.symbolizer.locate(regs.ip)
        if oracle == "shadow" and loc.symbol and loc.symbol.startswith("__cyg_profile_func"):
            return "shadow: IP inside the instrumentation hooks"
        lost_caller = len(got) >= 2 and got[1:] == want[2 : len(got) + 1]
        shadow_short = len(got) >= 2 and want == got[:1] + got[2 : len(want) + 1]
        if lost_caller and self.sc.unwinder == "fp" and loc.symbol:
            if loc.offset <= 8:
                # mainline applies the function-entry rule only under a uprobe
                return "fp: caller lost at a prologue IP (entry rule off)"
            if self._frameless(regs.ip, loc):
                return f"fp: caller lost in a leaf without a frame ({loc.symbol})"
        if oracle == "shadow" and shadow_short and not self._shadow_pushed(regs.ip, loc):
            return "shadow: IP before the enter hook or after the exit hook"
        return None

    def _frameless(self, ip: int, loc) -> bool:
        """The function at ``ip`` sets up no frame pointer (``push %rbp; mov %rsp,%rbp`` is not
        among its first bytes): a leaf such as glibc's ``syscall()`` or our own shadow hooks."""
        try:
            head = self.memory.read(ip - loc.offset, 16)
        except MemoryFault:
            return False
        return b"\x55\x48\x89\xe5" not in head

    def _shadow_pushed(self, ip: int, loc) -> bool:
        """Whether the function at ``ip`` has pushed its shadow frame and not yet popped it: a
        ``call __cyg_profile_func_enter`` completes before ``ip`` and no ``call ..._exit`` does."""
        if not loc.symbol:
            return True
        enter = self.symbolizer.address_of("__cyg_profile_func_enter")
        leave = self.symbolizer.address_of("__cyg_profile_func_exit")
        start = ip - loc.offset
        try:
            code = self.memory.read(start, loc.offset)
        except MemoryFault:
            return True
        calls = set()
        for i in range(len(code) - 4):
            if code[i] == 0xE8:
                calls.add(start + i + 5 + struct.unpack_from("<i", code, i + 1)[0])
        return enter in calls and leave not in calls

    def _side_by_side(self, oracle: str, got: list[int], want: list[int]) -> str:
        sym = self.symbolizer.name if self.symbolizer else hex
        lines = [f"{self.sc.name}: {self.sc.unwinder} vs {oracle} differ:"]
        for i in range(max(len(got), len(want))):
            a = sym(got[i]) if i < len(got) else ""
            b = sym(want[i]) if i < len(want) else ""
            mark = "  " if a == b else "!!"
            lines.append(f"  {mark} #{i:<3} {a:40} {b}")
        return "\n".join(lines)


def _symbol_address(path: Path, name: str) -> int | None:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        if symtab is None:
            return None
        syms = symtab.get_symbol_by_name(name)
        if not syms:
            return None
        if elf.header.e_type == "ET_DYN":
            return None  # PIE: needs the load bias; shadow checks use non-PIE builds
        return syms[0].entry.st_value


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
        log = open(log_dir / f"{sc.name}.jsonl", "w") if log_dir else None
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
