"""``harness kernel-diff``: the guest kernel's own ``unwind_deferred`` against the model, event by event.

The kernel's tracer is perf with ``defer_callchain`` (``guest_programs/perfcc.c -d`` sampling a
catalog program); the guest stops in the kernel's own code and every stop becomes an
:class:`~harness.lockstep.compare.Event` that the pure :class:`~harness.lockstep.compare.Lockstep`
feeds to the model (mainline profile, or seed-v10 as a control) and compares.

Where the guest stops, on a 7.x kernel (each a real function there: checked in its kallsyms and
code, see :func:`resolve_points`):

* ``unwind_deferred_request`` (entry: the current task, the tracer's ``work`` in rdi and the
  cookie pointer in rsi; the return address read at entry gets a breakpoint, and the stop there
  with the same vCPU and rsp + 8 is its return: eax is the value, ``*cookie`` the cookie and the
  task's ``unwind_info.id`` is read through BTF);
* ``unwind_deferred_task_work`` (entry; ``process_unwind_deferred`` is a separate function it
  tail-calls) and ``unwind_deferred_task_exit`` (entry and return, from ``do_exit``);
* ``unwind_user`` when its return address is in ``unwind_user_faultable`` (the cache was empty:
  the stack is walked; no stop there means the cache was reused);
* the indirect call of ``work->func`` in ``process_unwind_deferred`` (each callback: rdi the work,
  rsi the trace, rdx the cookie);
* ``unwind_task_init`` (a fork: ``copy_process`` clears the new task's unwind state);
* inside ``exit_signals()`` right after ``tsk->flags |= PF_EXITING`` (interrupts are off there; a
  request after that store fails with -EINVAL, even before ``exit_signals()`` returns);
* the return-to-user points, while some task has state (``unwind_reset_info()`` is inlined into
  the exit-to-user path, so there is no symbol of its own: the points after it are used).

Orchestration (drives a :class:`~harness.session.Session`): the comparison itself is pure.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..deferred.profile import get_profile
from ..errors import HarnessError
from ..kernel import current_task, user_regs
from ..memory import MemoryFault
from ..perf.capture import PERFCC, PerfSpec
from ..scenarios.catalog import Scenario
from ..session import Session
from ..transport.errors import TargetError, TargetTimeout
from ..transport.target import TargetMemory
from ..unwind.user import UnwindConfig, unwind_user
from .compare import CallMatcher, Event, Lockstep, LockstepError, Summary, deferred_support
from .defaults import DEFAULT_FREQ, DEFAULT_PROFILE, DEFAULT_SAMPLES, DEFAULT_SCENARIOS, DEFAULT_SHOW
from .points import Points, resolve_points

__all__ = ["DEFAULT_FREQ", "DEFAULT_PROFILE", "DEFAULT_SAMPLES", "DEFAULT_SCENARIOS", "DEFAULT_SHOW", "KernelDiff",
           "KernelDiffResult", "check_support", "events_path", "read_recording"]

WALK_MAX = 1022  # our walk goes past any profile's UNWIND_MAX_ENTRIES; the model cuts it
GUEST_OUT = "/tmp/kernel-diff.perfcc"
#: the drain's bound on stops, a multiple of its bound on requests (each request is 5-7 stops here)
DRAIN_STOPS_PER_REQUEST = 10


@dataclass
class KernelDiffResult:
    scenario: str
    smp: int
    summary: Summary
    stops: int = 0
    seconds: float = 0.0
    program_exit: int | None = None
    errors: list[str] = field(default_factory=list)
    events_path: str = ""

    @property
    def requests(self) -> int:
        return self.summary.kernel["request"]


class KernelDiff:
    """One scenario: perfcc samples its program, every kernel event goes through the lockstep."""

    def __init__(self, session: Session, scenario: Scenario, profile: str = DEFAULT_PROFILE,
                 samples: int = DEFAULT_SAMPLES, freq: int = DEFAULT_FREQ, events: IO[str] | None = None,
                 points: Points | None = None,
                 single: bool = False):
        self.s = session
        self.sc = scenario
        self.profile = get_profile(profile)
        self.samples = samples  # requests of the kernel's tracer to see, then the program is ended
        self.freq = freq
        # perf's events: one inherited event per CPU (several events, as perf record opens them), or
        # one cpu = -1 event on the program's first thread only (perfcc -1)
        self.single = single
        self.events_out = events
        self.p = points or resolve_points(session)
        btf = session.btf
        self.o_info = btf.member_offset("task_struct", "unwind_info")
        self.o_mask = btf.member_offset("unwind_task_info", "unwind_mask")
        self.o_cache = btf.member_offset("unwind_task_info", "cache")
        self.o_id = btf.member_offset("unwind_task_info", "id")
        self.o_nr = btf.member_offset("unwind_cache", "nr_entries")
        self.o_tr_nr = btf.member_offset("unwind_stacktrace", "nr")
        self.o_tr_entries = btf.member_offset("unwind_stacktrace", "entries")
        self.o_bit = btf.member_offset("unwind_work", "bit")
        self.preempt = session.info.symbols.get("__preempt_count")
        self.memory = TargetMemory(session.target)
        self.seq = 0
        self.requests = CallMatcher()
        self.exits = CallMatcher()
        self.request_returns: set[int] = set()
        self.exit_returns: set[int] = set()
        self._returns_armed = False
        self.unmatched_returns = 0
        self.rehits: set[tuple[int, int, int]] = set()  # (vCPU, pc, rsp) a stepped-over point will hit again
        self.rehit_count = 0
        self.step_retries = 0
        self.stray: list[str] = []

    # -- reading the stopped kernel --------------------------------------------------------------
    def _u64(self, addr: int) -> int:
        return struct.unpack("<Q", self.s.read(addr, 8))[0]

    def _u32(self, addr: int) -> int:
        return struct.unpack("<I", self.s.read(addr, 4))[0]

    def _current(self, regs):
        return current_task(self.s.info, self.s.read, regs["gs_base"])

    def _unwind_info(self, task_addr: int) -> tuple[int, int, int]:
        """(unwind_mask, cache pointer, id) of a task."""
        raw = self.s.read(task_addr + self.o_info, self.o_id + 8)
        return (int.from_bytes(raw[self.o_mask:self.o_mask + 8], "little"),
                int.from_bytes(raw[self.o_cache:self.o_cache + 8], "little"),
                int.from_bytes(raw[self.o_id:self.o_id + 8], "little"))

    def _our_walk(self, task, gs_base: int) -> tuple[tuple[int, ...], str]:
        """Our unwinder on the task's saved user registers (the kernel's next walk starts there)."""
        try:
            regs = user_regs(self.s.info, self.s.read, task, gs_base)
        except (MemoryFault, TargetError) as exc:
            return (), f"pt_regs unreadable: {exc}"
        if not regs.user_mode:
            return (), "the saved registers are not user mode"
        return tuple(unwind_user(self.memory, regs, UnwindConfig(max_entries=WALK_MAX)).ips), ""

    def percpu_ctr(self) -> dict[int, int]:
        """The kernel's ``unwind_ctx_ctr`` of each CPU now (``__per_cpu_offset[cpu] + &unwind_ctx_ctr``)."""
        syms = self.s.info.symbols
        out = {}
        for cpu in range(self.s.spec.smp):
            off = self._u64(syms["__per_cpu_offset"] + 8 * cpu)
            out[cpu] = self._u32((off + syms["unwind_ctx_ctr"]) & ((1 << 64) - 1))
        return out

    # -- events ----------------------------------------------------------------------------------
    def _emit(self, kind: str, task, cpu: int, **kw) -> None:
        ev = Event(self.seq, kind, task.addr, task.pid, cpu, task.comm, **kw)
        self.seq += 1
        if self.events_out is not None:
            self.events_out.write(json.dumps(ev.to_dict()) + "\n")
        self.ls.feed(ev)

    def _context(self, gs_base: int) -> str:
        if self.preempt is None:
            return "irq"
        pc = self._u64((gs_base + self.preempt) & ((1 << 64) - 1))
        hard = self.p.hardirq_offset
        return "nmi" if pc & (0xF * hard << 4) else "irq" if pc & (0xF * hard) else "syscall"

    def _leave(self):
        """Step the stopped vCPU off its breakpoint (as Target.resume would) and look where the
        step went.  A step that did not move is repeated.  A step that lands in an interrupt's entry
        (``asm_*``) did not execute the instruction: it runs after the interrupt returns and hits the
        same breakpoint again, with the same registers; that second stop is no event of the kernel's
        and is dropped (counted).
        Returns the step's stop when it landed on another point of ours (to handle as a stop)."""
        t = self.s.target
        if t.stop_cpu is not None and t.stop_cpu != t.cpu:
            t.select_cpu(t.stop_cpu)
        regs = t.read_registers()
        pc = regs["rip"]
        if pc not in t.breakpoints:
            return None
        stepped = t.step()
        for _ in range(8):
            # A step can end without executing anything (TCG had an exit request pending): the
            # vCPU is still at the point, which is no second event.  Step again.
            if stepped.pc != pc or stepped.cpu != t.cpu:
                break
            self.step_retries += 1
            stepped = t.step()
        if stepped.pc in t.breakpoints and stepped.pc != pc:
            return stepped
        found = self.s.symbols.nearest(stepped.pc, text=True)
        if found and found[0].name.startswith("asm_"):
            self.rehits.add((stepped.cpu, pc, regs["rsp"]))
        return None

    def _on_stop(self, cpu: int, pc: int) -> None:
        p = self.p
        t = self.s.target
        regs = t.read_registers()
        gs = regs["gs_base"]
        key = (cpu, pc, regs["rsp"])
        if key in self.rehits:
            self.rehits.discard(key)
            self.rehit_count += 1
            return
        if pc == p.request:
            task = self._current(regs)
            ret_addr = self._u64(regs["rsp"])
            if ret_addr not in self.request_returns:
                t.set_breakpoint(ret_addr)
                self.request_returns.add(ret_addr)
            try:
                user = user_regs(self.s.info, self.s.read, task, gs).user_mode
            except (MemoryFault, TargetError):
                user = False
            self.requests.enter(cpu, regs["rsp"], (task, regs["rdi"], regs["rsi"], self._context(gs), user))
            return
        if pc in self.request_returns:
            hit = self.requests.leave(cpu, regs["rsp"])
            if hit is not None:
                task, work, cookie_ptr, ctx, user = hit
                now = self._u64((gs + self.s.info.current_task_sym) & ((1 << 64) - 1))
                if now != task.addr:
                    self.errors.append(f"the return of pid {task.pid}'s request (vCPU {cpu}, rsp {regs['rsp']:#x}) "
                                       f"came on task {now:#x}")
                ret = struct.unpack("<i", struct.pack("<I", regs["rax"] & 0xFFFFFFFF))[0]
                mask, _cache, task_id = self._unwind_info(task.addr)
                self._emit("request", task, cpu, work=work, ret=ret, cookie=self._u64(cookie_ptr),
                           task_id=task_id, mask=mask, context=ctx, user_mode=user, kthread=task.kthread)
                return
            # The instruction after the call is also reached by branches that skip the call
            # (perf_callchain() asks only for user tasks): a stop there with no entry of ours.
            self.unmatched_returns += 1
            return
        if pc in self.exit_returns:
            hit = self.exits.leave(self._u64((gs + self.s.info.current_task_sym) & ((1 << 64) - 1)), regs["rsp"])
            if hit is not None:
                self._emit("task_exit_done", hit, cpu)
                return
        if pc == p.task_work or pc == p.task_exit:
            task = self._current(regs)
            mask, cache, _ = self._unwind_info(task.addr)
            cache_nr = self._u32(cache + self.o_nr) if cache else None
            if pc == p.task_work or mask & 1:
                trace, err = self._our_walk(task, gs)
            else:
                trace, err = (), "nothing pending"
            kind = "task_work" if pc == p.task_work else "task_exit"
            if kind == "task_exit":
                ret_addr = self._u64(regs["rsp"])
                if ret_addr not in self.exit_returns:
                    t.set_breakpoint(ret_addr)
                    self.exit_returns.add(ret_addr)
                # keyed by task, not vCPU: the exit's callbacks may sleep and the task move
                self.exits.enter(task.addr, regs["rsp"], task)
            self._emit(kind, task, cpu, mask=mask, cache_nr=cache_nr, trace=trace, walk_error=err)
            return
        if pc == p.unwind_user:
            ret_addr = self._u64(regs["rsp"])
            if p.faultable[0] <= ret_addr < p.faultable[1]:
                self._emit("walk", self._current(regs), cpu)
            return
        if pc == p.callback:
            nr = self._u32(regs["rsi"] + self.o_tr_nr)
            entries = self._u64(regs["rsi"] + self.o_tr_entries)
            raw = self.s.read(entries, 8 * nr) if nr else b""
            trace = struct.unpack(f"<{nr}Q", raw)
            self._emit("callback", self._current(regs), cpu, work=regs["rdi"], cookie=regs["rdx"], trace=trace)
            return
        if pc == p.fork:
            parent = self._current(regs)
            self._emit("fork", parent, cpu, child=regs["rdi"])
            return
        if pc in p.exiting:
            self._emit("exiting", self._current(regs), cpu)
            return
        if pc in p.returns:
            task = self._current(regs)
            if self.ls.wants_return(task.addr):
                self._emit("return", task, cpu, point=p.returns[pc])
            return
        # Not a point of ours (seen once in ~20,000 stops on 2 vCPUs): nothing the kernel did is
        # lost by it; said in the notes and resumed.
        self.stray.append(f"{pc:#x} ({self.s.symbols.symbolize(pc, text=True)}) on vCPU {cpu}")

    def _arm_returns(self) -> None:
        want = bool(self.ls.open_tasks())
        if want == self._returns_armed:
            return
        for a in self.p.returns:
            (self.s.target.set_breakpoint if want else self.s.target.remove_breakpoint)(a)
        self._returns_armed = want

    def _clean_up(self, fixed: list[int], proc, status: int | None, kill: str) -> int | None:
        """Every breakpoint out, the program and perfcc ended, the guest stopped again: the
        next scenario starts from a quiet guest.  Returns perfcc's exit status."""
        s, t = self.s, self.s.target
        try:
            for a in [*fixed, *self.request_returns, *self.exit_returns, *self.p.returns]:
                t.remove_breakpoint(a)
            self._returns_armed = False
            if s.machine.alive():
                t.resume()
                if status is None:
                    s.machine.shell(kill + " 2>/dev/null")
                    status = s.machine.wait_exit(proc, timeout=120)
                s.machine.shell(f"rm -f {GUEST_OUT}")
                t.interrupt()
        except (TargetError, HarnessError) as exc:
            self.errors.append(f"cleanup: {exc}")
        return status

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> KernelDiffResult:
        s, p, t = self.s, self.p, self.s.target
        start = time.monotonic()
        self.errors: list[str] = []
        perf_bit = struct.unpack("<i", s.read(p.perf_work + self.o_bit, 4))[0]
        ctr = self.percpu_ctr()
        self.ls = Lockstep(self.profile, {p.perf_work: "perf"}, ctr)
        if self.events_out is not None:
            self.events_out.write(json.dumps({
                "header": "kernel-diff", "release": s.info.release, "scenario": self.sc.name,
                "profile": self.profile.name, "smp": s.spec.smp, "tracers": {str(p.perf_work): "perf"},
                "percpu_ctr": {str(c): v for c, v in ctr.items()}}) + "\n")
        model_bit = self.ls.works[p.perf_work].bit
        summary = self.ls.summary
        if perf_bit != model_bit and self.profile.name == "mainline":
            self.errors.append(f"perf's unwind_work has bit {perf_bit} in the kernel, {model_bit} in the model")
        prog = s.program(self.sc.program, self.sc.toolchain, self.sc.variant)
        perfcc = s.program(*PERFCC)
        # perfcc samples for a while (guest seconds; more than the requests asked for should take:
        # about a quarter of a spinning program's samples became requests here, the guest clock
        # runs on while it is stopped), and is ended by the kill below once they are reached.
        # So the window costs nothing when it is long: at 15 samples a request one 11.1 run
        # ended at 76 of 80 requests (a program that sleeps between its requests).
        seconds = max(1.0, 40 * self.samples / self.freq)
        spec = PerfSpec(seconds=seconds, freq=self.freq, stack_bytes=8, defer=True, data_pages=16,
                        inherit=not self.single)
        # perfcc starts a second (guest time) after the breakpoints are in: no request goes unseen.
        proc = s.machine.run_later(spec.argv(perfcc.guest_path, GUEST_OUT, [prog.guest_path, *self.sc.args]), 1)
        # The program is perfcc's child (its own process group), perfcc the subshell's child.
        kill = (f"p=$(cat /tmp/.later.{proc.id}); for c in $(cat /proc/$p/task/$p/children); do "
                f"kill -KILL $(cat /proc/$c/task/$c/children); done")
        fixed = [p.request, p.task_work, p.task_exit, p.unwind_user, p.callback, p.fork]
        fixed += list(p.exiting)
        for a in fixed:
            t.set_breakpoint(a)
        # What perfcc's window holds, on the guest's clock: its cpu-clock events fire ``freq``
        # times a second of guest time on each CPU, one request each, and perfcc ends the program
        # itself when the window ends.  So the drain after the kill below is bounded by that many
        # requests, not by a count of stops: each stop lets the guest's clock run on while QEMU's
        # vCPU thread waits for a host CPU (after each continue and each step over a point), so on
        # a loaded host the same guest time costs ever more stops, and the kill, which the guest's
        # own shell carries out between the samples, ever more of them (2026-12-06, threads on 2
        # vCPUs at load 8-9 on 2 cores: 6,300-9,700 stops and 900-1,800 requests for the 80 asked;
        # one CI run past the 20,000 stops the bound was then, with an RCU stall on the console).
        window_requests = int(seconds * self.freq * s.spec.smp)
        request_limit = self.samples + window_requests * 3 // 2
        stops = 0
        status = None
        interrupted = False
        kill_sent = False
        kill_stops = kill_requests = 0
        try:
            idle = 0
            while True:
                status = s.machine.exit_status(proc)
                if status is not None:
                    break  # perfcc is done: its child's tasks have gone through do_exit
                if not kill_sent and summary.kernel["request"] >= self.samples:
                    # Enough: end the program through the console while every event is still
                    # watched (its tasks exit with whatever state they have; no request goes
                    # unseen, and those made meanwhile are compared too).  perfcc then kills the
                    # child's process group and exits.
                    s.machine.shell_start(kill)
                    kill_sent = True
                    kill_stops, kill_requests = stops, summary.kernel["request"]
                # A bound on stops too, for stops without requests (about 5-7 a request here).
                if kill_sent and (summary.kernel["request"] > request_limit
                                  or stops - kill_stops > DRAIN_STOPS_PER_REQUEST * request_limit):
                    self.errors.append(
                        f"the program did not end within perfcc's window: {summary.kernel['request']} requests "
                        f"(its {seconds:g} s at {self.freq} Hz on {s.spec.smp} vCPU(s) hold {window_requests}), "
                        f"{summary.kernel['request'] - kill_requests} requests and {stops - kill_stops} stops "
                        f"since the kill")
                    break
                landed = self._leave()
                try:
                    if landed is not None:
                        stop = landed
                    else:
                        t.resume()
                        stop = t.wait_stop(timeout=3)
                except TargetTimeout:
                    # No stop for a while (perfcc may be done: its exit is read between stops);
                    # wait_stop has interrupted the guest.  A breakpoint stop that came just before
                    # the interrupt is its answer: the vCPU then sits on a point of ours.
                    idle += 1
                    if idle >= 40:
                        self.errors.append("no kernel event for 2 minutes and perfcc still runs")
                        break
                    pc = t.read_registers()["rip"]
                    if pc in t.breakpoints:
                        stops += 1
                        self._on_stop(t.cpu, pc)
                        self._arm_returns()
                    continue
                idle = 0
                stops += 1
                self._on_stop(stop.cpu, stop.pc)
                self._arm_returns()
        except KeyboardInterrupt:
            # No clean-up in the guest (each step could wait for its timeout): the session shuts
            # QEMU down next.
            interrupted = True
            raise
        finally:
            if not interrupted:
                status = self._clean_up(fixed, proc, status, kill)
        if status not in (None, 0):
            self.errors.append(f"perfcc exited with status {status}: " + " | ".join(s.machine.console.tail(5)))
        summary = self.ls.finish()
        summary.notes.insert(0, f"callbacks observed at {p.callback_how}; perf's unwind_work bit {perf_bit}")
        if self.step_retries:
            summary.notes.append(f"{self.step_retries} single step(s) over a point ended without executing "
                                 f"anything and were repeated (no second event)")
        if self.stray:
            summary.notes.append(f"{len(self.stray)} stop(s) at no point of ours, resumed: {', '.join(self.stray[:5])}")
        if self.rehit_count:
            summary.notes.append(f"{self.rehit_count} stop(s) dropped: a point hit again after the single step "
                                 f"over it took an interrupt instead (the instruction ran after the interrupt)")
        return KernelDiffResult(self.sc.name, s.spec.smp, summary, stops, time.monotonic() - start,
                                status, self.errors)


def check_support(sess: Session) -> tuple[bool, str]:
    return deferred_support(sess.btf, sess.info.symbols)


def events_path(out_dir: Path, scenario: str, smp: int) -> Path:
    return out_dir / f"{scenario}.smp{smp}.events.jsonl"


def read_recording(path: Path) -> tuple[list[Event], dict]:
    """The events and the header line of a recorded event file (:func:`events_path`), for
    :func:`harness.lockstep.compare.replay`; a file that is not one raises :class:`LockstepError`."""
    events, header = [], {}
    try:
        for line in path.read_text().splitlines():
            d = json.loads(line)
            if "header" in d:
                header = d
                continue
            events.append(Event.from_dict(d))
    except (OSError, ValueError, LockstepError) as exc:
        raise LockstepError(f"{path}: {exc}") from exc
    if not header or "tracers" not in header:
        raise LockstepError(f"{path}: no kernel-diff header line (tracers, per-CPU counters) before the events")
    return events, header
