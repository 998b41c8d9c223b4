"""The delivery half of the engine: a pending request's return-point stop, its snapshot, the
model's task work on it and the oracles' checks, and the end of a run's flush.

:class:`harness.scenarios.engine.Engine` runs the sampling loop (NMIs, requests, the drive from
return point to return point) and takes these from :class:`DeliveryWork`; the engine module's
docstring says what a delivery is and where the kernel runs it.  A delivery stop reads what the
walk and the oracles will read in one batch of pipelined reads (the snapshot, sealed before the
guest runs on); its walk and checks run while the guest runs to the next stop.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace

from ..deferred.model import Delivery, ModelError
from ..kernel import TaskInfo
from ..memory import CapturedMemory, MemoryFault, Overlay
from ..oracles.base import Request
from ..regs import UserRegs
from ..transport.errors import TargetError, TargetTimeout
from ..transport.target import PAGE
from ..unwind.code import CodeFacts
from ..unwind.maps import VDSO
from ..unwind.user import StopReason, Trace
from ..verdicts.types import NOT_CHECKED
from .snapshot import StopSnapshot, loaded_digest, save

__all__ = ["FAILURES_KEPT", "SNAPSHOTS_KEPT", "DeliveryWork", "PendingCheck", "own_text_steps"]

FAILURES_KEPT = 1000  # failing stack records kept in memory per run (all are in the log)
SNAPSHOTS_KEPT = 20  # failing stacks whose snapshots are saved per scenario (Engine's failing_dir)
# Pages read above sp when sp is in no mapping the run knows (a thread stack mapped after the
# program's maps were read): up to the first unreadable page.
UNKNOWN_STACK_PAGES = 16
MAX_STACK_PAGES = 1024  # 4 MiB: a cap on one snapshot's stack
#: pages read at the requested sp when it is on another stack than the walked one (a signal frame)
SIGFRAME_PAGES = 2
FP_CHAIN_HOPS = 256  # frame records followed at a delivery stop (Engine._follow_fp_chain)


@dataclass(frozen=True)
class PendingCheck:
    """A delivery whose task work is done, waiting for its checks: the snapshot, the trace the
    model's walk gave (or its cache) and the callbacks made (the model's own
    :class:`~harness.deferred.model.Delivery` records: tracer, task, entry, epoch, cookie, trace)."""

    snap: StopSnapshot
    trace: Trace
    delivered: list[Delivery]


class DeliveryWork:
    """The engine's delivery half, a mixin of :class:`harness.scenarios.engine.Engine` (whose
    state it reads and writes: the session ``s``, ``result``, ``model``, ``pending``, the
    oracles and the checker): the return-point stop that captures a snapshot of the stack
    (:meth:`_on_return`, :meth:`_capture`), the model's task work on it and the oracles' checks
    once the guest runs on (:meth:`_process_queue`, :meth:`_deliver`, :meth:`_check`), and the
    end of a run's flush of the work still pending (:meth:`_flush_pending`).  The sampling loop
    (requests, the drive from stop to stop, its bounds) stays in the engine."""

    # -- model hooks -------------------------------------------------------------------------
    def _walk(self, mtask) -> list[int]:
        """``unwind_user()`` for the model: the Python unwinder on the delivery's snapshot."""
        self.result.walks += 1
        trace = self.checker.walk(self._snap)
        self._last_trace = trace
        return trace.ips

    def _callback(self, work, trace, cookie) -> None:
        self.result.callbacks += 1
        self.result.cookies.add(cookie)
        pid = self._walk_task.pid
        mt = self.model.tasks[pid]
        self._delivered_now.append(Delivery(work.name, pid, mt.entry, mt.epoch, cookie, tuple(trace)))

    def _process_queue(self, waiting: bool = True, checks: bool = True) -> None:
        """The captured deliveries' task work and (``checks``) their checks.  ``waiting``: the
        guest is on its way to the next stop meanwhile (a stop point or an injected NMI ahead),
        so whether that stop came before the work was done says whether it set the pace."""
        if not self._queue and not (checks and self._checks):
            return
        t0 = time.perf_counter()
        while self._queue:
            self._deliver(self._queue.pop(0))
        while checks and self._checks:
            self._check(self._checks.pop(0))
        if not waiting:
            return
        ov = self.overlap
        ov["deliveries"] += 1
        ov["seconds"] += time.perf_counter() - t0
        # Was the guest's next stop already waiting when the checks were done?  Then they, not
        # the guest, set the pace (a worker on another core might pay); else they were hidden.
        if self.s.target.running and self.s.target.stop_arrived():
            ov["late"] += 1

    def _process_queue_safely(self) -> None:
        try:
            self._process_queue()
        except ModelError as exc:
            self.result.errors.append(f"{type(exc).__name__}: {exc}")

    def _at_interrupt(self, stop) -> None:
        """Where the harness's own interrupt stopped a guest that ran with the return points
        in: QEMU reports a breakpoint reached before the ^C as that interrupt's stop (and
        ignores the ^C), so a task at a return point is delivered there, as :meth:`_drive`
        delivers; continued past, its work would run at its next exit with other registers
        (issue 21's flake campaign, run b2: an NMI on /init's child delivered at its next
        syscall's exit).  Any other place is an ordinary interrupt's."""
        if stop.pc in self.lifecycle:
            self._on_lifecycle(self.lifecycle[stop.pc])
        elif stop.pc in self.return_points:
            self._on_return(self.return_points[stop.pc])

    def _flush_pending(self, stop=None) -> None:
        """At the end, wake sleeping tasks (init reads the console) so that their pending work
        is delivered; what still stays pending is reported, not dropped.  ``stop``: where an
        interrupt just stopped the guest, if it ran."""
        if stop is not None:
            self._at_interrupt(stop)
        self._process_queue()
        if not self.pending:
            return
        # No new requests now: with the request points still in, timer interrupts on every vCPU
        # would spend the drive's stops while init wakes up.
        for a in self.request_points:
            if a not in self._timer_points or self._timer_in:
                self.s.target.remove_breakpoint(a)
        self._timer_in = False
        self.s.target.resume()
        self.s.machine.wake()  # an empty control line wakes init's read loop
        self._at_interrupt(self.s.target.interrupt())
        try:
            # A task asleep (init waiting on the console, woken above only once the host's QEMU
            # gets to the control line) may stay asleep past the bound while the program's own
            # syscalls spend its stops: noted below, not an error of the run (a loaded host).
            self._drive(lambda: bool(self.pending), max_stops=200, bound_is_problem=False)
        except TargetTimeout:
            pass
        self.result.pending_at_end += len(self.pending)
        if self.pending:
            self.result.notes.append(f"work of {sorted(self.pending)} still pending at the end of the run "
                                     f"(the task never returned to user space)")
        self.pending.clear()

    def _on_return(self, point) -> None:
        s = self.s
        s.prefetch_stop(point)
        task = s.current()
        self._seen[(task.pid, task.comm, point.name)] += 1
        if task.pid not in self.pending:
            return
        regs = s.regs_at(point)
        pending = self.pending.pop(task.pid)
        self._queue.append(self._capture(task, regs, pending, point))
        self._arm_returns(bool(self.pending))

    # -- the delivery stop: a snapshot, walked and judged once the guest runs on -------------------
    def _capture(self, task: TaskInfo, regs: UserRegs, req: Request, point) -> StopSnapshot:
        """What the walk and the oracles will read, in one batch of pipelined reads: the stack
        from sp's page to the end of its mapping (or the first unreadable page), and each
        oracle's own data (the shadow stack).  The memory is sealed before the guest runs on."""
        own = self._own_kind(task)
        fs_base = self.s.target.read_registers()["fs_base"]
        self.s.expected_reads.pop(task.pid, None)
        ranges = self._capture_ranges(regs, req.want, own, fs_base)
        # The oracles that will judge this stack (another task's: only the request's registers).
        oracles = self.oracles if own is not None else [o for o in self.oracles if o.registers]
        mem = CapturedMemory(backing=self._own_backing if own is not None else self._vdso, live=self.memory)
        for (addr, _), got in zip(ranges, self.s.read_many(ranges), strict=True):
            mem.add(addr, got.data)
            if got.fault is not None:
                mem.add_fault(got.fault)
        for o in oracles:
            o.complete(mem, regs, fs_base, req)  # what the first reads said is needed too
        if own is not None:
            self._follow_fp_chain(mem, regs)
        snap = StopSnapshot(task, point, regs, req, own, fs_base, mem)
        if self.verify:
            snap = replace(snap, expected=self._live_check(snap))
        mem.seal()
        return snap

    def _follow_fp_chain(self, mem: CapturedMemory, regs: UserRegs) -> None:
        """Read the frame-pointer chain at the stop, through ``mem`` (what the capture missed is
        read from the stopped guest and kept): the walk after the guest runs on may follow it
        off the stack sp is in, where the capture did not look.  A Go runtime thread's does: its
        outermost frame's rbp, inherited at clone(), points into the main thread's [stack], and
        the snapshot would answer that read with a miss the live guest never gives.  Within the
        captured stack this reads nothing new; at most FP_CHAIN_HOPS frames, upward only."""
        ws = self.ws
        mask = (1 << (8 * ws)) - 1
        bp = regs.bp & mask
        for _ in range(FP_CHAIN_HOPS):
            if bp == 0 or bp % ws:
                return
            try:
                # The whole page (the walk's reads are page-sized: UserAccess), and the next one
                # where the frame record straddles it.
                for page in dict.fromkeys((bp - bp % PAGE, (bp + 2 * ws - 1) - (bp + 2 * ws - 1) % PAGE)):
                    mem.read(page, PAGE)
                nxt = int.from_bytes(mem.read(bp, ws), "little")
            except (MemoryFault, TargetError):
                return
            if nxt <= bp:
                return
            bp = nxt

    def _capture_ranges(self, regs: UserRegs, want: UserRegs | None, own: str | None,
                        fs_base: int) -> list[tuple[int, int]]:
        """What a delivery stop reads for the snapshot: the stack from sp's page to the end of
        its mapping (at most MAX_STACK_PAGES), and the oracles' own ranges (the shadow stack)."""
        sp = regs.sp & 0xFFFFFFFF if regs.compat else regs.sp
        base = sp - sp % PAGE
        m = self.space.mapping_at(sp) if own is not None else None
        end = m.end if m is not None else base + UNKNOWN_STACK_PAGES * PAGE
        # The requested registers' stack too, where it lies below sp on the same stack: the
        # signal frame rt_sigreturn restored from (the sigreturn-restored cause reads it there).
        if want is not None and want.user_mode:
            wsp = want.sp & 0xFFFFFFFF if want.compat else want.sp
            if (m is not None and m.start <= wsp < sp) or (m is None and sp - UNKNOWN_STACK_PAGES * PAGE <= wsp < sp):
                base = wsp - wsp % PAGE
        ranges = [(base, min(end, base + MAX_STACK_PAGES * PAGE) - base)]
        if want is not None and want.user_mode and own is not None:
            # ... and on another stack: a signal frame on the alternate signal stack (Go runs
            # every handler there), which rt_sigreturn restored the walked registers from.
            wsp = want.sp & 0xFFFFFFFF if want.compat else want.sp
            if not base <= wsp < base + ranges[0][1]:
                ranges.append((wsp - wsp % PAGE, SIGFRAME_PAGES * PAGE))
        if own is not None:
            for o in self.oracles:
                ranges += o.captures(regs, fs_base)
        return ranges

    def _live_check(self, snap: StopSnapshot) -> dict:
        """Verify mode: the walk and the checks on the live guest, as before snapshots."""
        if self._live_code is None:
            # Code where the live guest has no page for it (text a forked child has not touched
            # yet) from the files it maps, as the snapshot reads it: a difference there is the
            # guest's paging, not the snapshot's capture (seen once in forkexec: an empty
            # prologue disassembly in the live check's evidence).
            self._live_code = CodeFacts(self.space, Overlay(self.memory, self._own_backing), self.ws)
        trace = self.checker.walk(snap, self.memory)
        ev = self.checker.evaluate(snap, {self.sc.unwinder: trace}, self.memory, self._live_code)
        return _comparable(trace, ev, self.sc.unwinder)

    def _deliver(self, snap: StopSnapshot) -> None:
        """The model's task work at the delivery (its walk reads the snapshot); its checks are
        queued when a tracer got a trace."""
        self._snap = snap
        self._walk_regs, self._walk_task = snap.regs, snap.task
        self._delivered_now = []
        self._task_work(self.model.tasks[snap.task.pid], snap.point)
        if self._delivered_now:
            self._checks.append(PendingCheck(snap, self._last_trace, self._delivered_now))

    def _task_work(self, mt, point) -> None:
        """The model's task work at this delivery: in ``do_exit()`` or at the return to user space."""
        if point.kind == "exit":
            self.model.exit(mt)
        else:
            self.model.return_to_user(mt)

    # -- the oracles and their verdicts, on the delivery's snapshot -----------------------------
    def _check(self, d: PendingCheck) -> None:
        r = self.result
        snap = d.snap
        task, regs, req, point = snap.task, snap.regs, snap.request, snap.point
        trace = d.trace
        problems = []
        if len({x.trace for x in d.delivered}) != 1:
            problems.append(f"pid {task.pid}: tracers got different traces in one entry")
        own = snap.own
        ev = self.checker.evaluate(snap, {self.sc.unwinder: trace})
        problems += ev.problems
        if snap.memory.misses:
            where = ", ".join(f"{a:#x}+{n}" for a, n in snap.memory.misses[:4])
            problems.append(f"pid {task.pid}: the checks read memory the stop's snapshot did not capture "
                            f"({where}): judged on a fault the live guest might not have given")
        if snap.expected is not None:
            got = _comparable(trace, ev, self.sc.unwinder)
            if got != snap.expected:
                diff = sorted(k for k in got if got[k] != snap.expected.get(k))
                first = diff[0]
                problems.append(f"pid {task.pid}: the snapshot's walk and checks differ from the live guest's "
                                f"in {', '.join(diff)} (the first: snapshot {_short(got[first])}, "
                                f"live {_short(snap.expected.get(first))})")
                r.problems.append(problems[-1])
        frames, stops, verdicts = ev.frames, ev.stops, ev.verdicts
        entry, epoch = d.delivered[-1].entry, d.delivered[-1].epoch  # one entry: that of the task work
        ev.problems = problems
        records = ev.records(self.sc.unwinder)
        rec = self.log.emit(
            "stack", task=task.pid, entry=entry, epoch=epoch, cookie=d.delivered[0].cookie,
            point=point.name, comm=task.comm, own=own, scenario=self.sc.name,
            regs={"ip": regs.ip, "sp": regs.sp, "bp": regs.bp}, request=self._request_record(req),
            unwinder=self.sc.unwinder,
            frames=frames, stops=stops, verdicts=records)
        if self.keep_snapshots:
            self.snapshots.append((snap, rec))
        # Counted once its record is written, all of them together: a full disk that refuses
        # the record leaves the table's stacks and its oracle and cause columns agreeing with
        # the log (they were 43 stacks beside 44 verdicts per oracle on a 200 KiB disk).
        r.stacks += 1  # the end record's count is the log's
        if own is None:
            r.foreign += 1
        else:
            r.tasks.add(task.pid)
            r.children += own == "child"
            r.at_exit += point.kind == "exit"
            if trace.stop.reason is StopReason.LIMIT:
                r.truncated += 1
            r.own_frames_checked += own_text_steps(frames.get("cfi", []), self._own_module)
            if in_vdso(frames.get("cfi", [])):
                r.vdso_stacks += 1
                if not reaches(frames.get("cfi", []), self._own_module):
                    r.vdso_lost += 1
        undeclared = False
        for v in verdicts:
            r.pairs[(v.oracle, v.verdict)] += 1
            if v.verdict == NOT_CHECKED:
                r.not_checked[(v.oracle, v.reason)] += 1
            for dv in v.divergences:
                if dv.cross is not None:
                    r.cross[(dv.cause, dv.cross)] += 1
                if dv.cause:
                    r.causes[dv.cause] += 1
                    # another task (init's shell, a kernel thread's user) is no program of the
                    # scenario's: its facts are unknown, only the program's stacks are declared
                    if own is not None and r.declared is not None and dv.cause not in r.declared:
                        r.undeclared[dv.cause] += 1
                        undeclared = True
        failed = problems or any(v.failed for v in verdicts)
        if failed:
            r.failed_stacks += 1
            if len(r.failures) < FAILURES_KEPT:
                r.failures.append(rec)
        for v in verdicts:
            for dv in v.divergences:
                if dv.cause and dv.cause not in r.examples:
                    r.examples[dv.cause] = rec
        if self.failing_dir is not None and (failed or undeclared) and len(r.kept_snapshots) < SNAPSHOTS_KEPT:
            self._keep_failing(snap, rec)

    def _keep_failing(self, snap: StopSnapshot, rec: dict) -> None:
        """Save a failing stack's snapshot beside the log (``failing/SCENARIO-SEQ/delivery.json``).
        A disk that refuses it costs the copy, not the run: a note says so."""
        where = self.failing_dir / f"{self.sc.name}-{rec['seq']}"
        try:
            path = save(where, snap, rec, self.maps, self.program_identity(), self.vdso_image())
        except OSError as e:
            self.result.notes.append(f"the failing stack of seq {rec['seq']} was not saved to {where}: {e}")
            return
        self.result.kept_snapshots.append(path)

    def program_identity(self) -> dict:
        """What a saved delivery says of its program, to know its binary again when replayed."""
        prog = self.program
        return {"source": prog.name, "toolchain": prog.toolchain, "variant": asdict(prog.variant),
                "guest_path": prog.guest_path, "loaded_sha256": loaded_digest(prog.path),
                "max_entries": self.max_entries}

    @staticmethod
    def _request_record(req: Request) -> dict:
        """What the request was about: its registers and where in the kernel it hit."""
        out = {"where": req.where or "user mode", "window": req.window, "syscall": req.syscall}
        if req.want is not None:
            out["regs"] = {"ip": req.want.ip, "sp": req.want.sp, "bp": req.want.bp}
        return out

    def vdso_image(self) -> tuple[int, bytes] | None:
        """(address, bytes) of the kernel's vDSO image the snapshots are served from, if any."""
        if self._vdso is None:
            return None
        (base, data), = self._vdso.regions.items()
        return base, data


def _short(value, limit: int = 600) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _comparable(trace: Trace, ev, unwinder: str) -> dict:
    """A check's outcome as plain data (as the log would hold it), for verify mode."""
    return json.loads(json.dumps({"trace": trace.ips, "stop": str(trace.stop), "frames": ev.frames,
                                  "stops": ev.stops, "verdicts": ev.records(unwinder)}))


def in_vdso(records: list) -> bool:
    """The oracle's topmost frame (``[address, module, symbol]``) is in the vDSO."""
    return bool(records) and records[0][1] == VDSO


def reaches(records: list, module: str) -> bool:
    """Some frame of the oracle's list is in the program's own ``module``."""
    return any(rec[1] == module for rec in records)


def own_text_steps(records: list, module: str) -> int:
    """Frames of an oracle's list (``[address, module, symbol]`` records) in the program's own
    ``module`` that the oracle stepped from to the next one: each such step read the module's own
    unwind information there (for the CFI oracle: an FDE of the program's text)."""
    return sum(rec[1] == module for rec in records[:-1])
