"""A live guest for interactive use: ``harness shell`` puts a :class:`Guest` in a Python REPL (as
drgn puts ``prog``), ``harness shell --batch FILE.py`` runs a script with it.

Session-level code: it owns nothing but a :class:`harness.session.Session` and reuses the pieces
the engine uses at a delivery stop.  A user stack is walked by every unwinder model (frame
pointers; SFrame with the FP fallback) and judged by every registered oracle through the engine's
own evaluation (:class:`harness.scenarios.snapshot.StackChecker`, on the live guest's memory),
and the result is a stack record like the engine's log holds, drawn by
:func:`harness.report.text.stack_columns`.  The deferred
model (:class:`harness.deferred.model.DeferredModel`, one tracer ``shell``) is driven by hand:
:meth:`Guest.request` asks for a task's user stack, :meth:`Guest.deliver` runs the guest to the
task's next return to user space (or ``do_exit``/``get_signal``) and runs the task work there.

The guest runs between calls; a call that reads it interrupts it and lets it run on afterwards.
:meth:`Guest.until_return`, :meth:`Guest.break_at` and :meth:`Guest.deliver` leave it stopped
where they stopped (``guest.cont()`` lets it run).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from .deferred.log import EventLog
from .deferred.model import IRQ, SYSCALL, Context, DeferredModel, UnwindWork
from .deferred.profile import get_profile
from .images.programs import Program, user_program
from .kernel import (
    PF_EXITING,
    TaskInfo,
    TaskListInfo,
    current_task,
    mm_pgd,
    read_task,
    task_addresses,
    task_cpu,
    user_regs,
)
from .kernel.stops import StopPoint, delivery_points
from .kernel.vdso import with_kernel_vdso
from .memory import MemoryFault
from .oracles.base import Request, Setup, build_oracles
from .regs import UserRegs
from .report.text import format_table, side_by_side, stack_columns
from .scenarios.catalog import CATALOG
from .scenarios.snapshot import StackChecker, StopSnapshot
from .transport.errors import TargetError, TargetTimeout
from .transport.target import PAGE, TargetMemory
from .unwind.maps import AddressSpace, parse_maps
from .unwind.user import Unwinder

__all__ = ["UNWINDERS", "Guest", "Text", "user_regs_from_cpu"]

log = logging.getLogger(__name__)

UNWINDERS = tuple(Unwinder)
DIRECT_MAP = 0xFFFF_8880_0000_0000  # page_offset_base without KASLR (the guest boots without it)
_CR4_LA57 = 1 << 12


def _state(state: int) -> str:
    """``__state`` as ps prints it (TASK_NOLOAD | TASK_UNINTERRUPTIBLE is I, idle)."""
    if state == 0:
        return "R"
    if state & 0x400 and state & 2:
        return "I"
    for bit, letter in ((1, "S"), (2, "D"), (4, "T"), (8, "t"), (0x10, "X"), (0x20, "Z"), (0x40, "P")):
        if state & bit:
            return letter
    return hex(state)


class Text(str):
    """A string the REPL shows as itself (not its repr): tables and stacks print readably."""

    def __repr__(self) -> str:
        return str(self)


def percpu_base(regs: dict[str, int]) -> int:
    """The kernel's per-CPU base on a stopped vCPU.  In user mode gs_base is the user's and the
    kernel's waits in KERNEL_GS_BASE; so it does in kernel mode from an entry to its swapgs (and
    from the exit's swapgs to its sysret/iret), where an interrupt of ``harness shell`` can stop
    the vCPU.  The kernel's base is a kernel address (bit 63 set); a user's never is."""
    if regs["cs"] & 3 == 3 or not regs["gs_base"] >> 63:
        return regs["k_gs_base"]
    return regs["gs_base"]


def user_regs_from_cpu(regs: dict[str, int]) -> UserRegs:
    """The user registers of a vCPU stopped in user mode (gdb's register names)."""
    names = {"r15": "r15", "r14": "r14", "r13": "r13", "r12": "r12", "bp": "rbp", "bx": "rbx",
             "r11": "r11", "r10": "r10", "r9": "r9", "r8": "r8", "ax": "rax", "cx": "rcx", "dx": "rdx",
             "si": "rsi", "di": "rdi", "ip": "rip", "cs": "cs", "flags": "eflags", "sp": "rsp", "ss": "ss"}
    return UserRegs(**{k: regs[v] for k, v in names.items() if v in regs}, orig_ax=-1 & (2**64 - 1))


class PageWalkMemory:
    """User memory of a task that is not on the stopped vCPU: its virtual addresses translated
    through its own page tables (``mm->pgd``, read from physical memory)."""

    def __init__(self, target, cr3: int, la57: bool):
        self.target, self.cr3, self.la57 = target, cr3, la57
        self._pages: dict[int, bytes | None] = {}
        self._generation = target.generation

    def read(self, addr: int, size: int) -> bytes:
        if self._generation != self.target.generation:
            self._pages.clear()
            self._generation = self.target.generation
        out = bytearray()
        cur, end = addr, addr + size
        while cur < end:
            base = cur - cur % PAGE
            if base not in self._pages:
                phys = self.target.translate(base, self.cr3, self.la57)
                r = self.target.read_partial(phys, PAGE, physical=True) if phys is not None else None
                self._pages[base] = r.data if r is not None and r.fault is None else None
            page = self._pages[base]
            if page is None:
                raise MemoryFault(cur)
            n = min(end - cur, PAGE - (cur - base))
            out += page[cur - base: cur - base + n]
            cur += n
        return bytes(out)


@dataclass
class TaskRow:
    task: TaskInfo
    cpu: int
    on_cpu: bool
    state: int
    current_on: int | None = None  # the vCPU it is current on, at this stop
    mode: str = "kernel"  # "user" only for a task current on a vCPU stopped in user mode

    def as_row(self, started: dict, model) -> dict:
        t = self.task
        mt = model.tasks.get(t.pid)
        return {"pid": t.pid, "tgid": t.tgid, "comm": t.comm, "cpu": self.cpu,
                "state": "running" if self.current_on is not None else _state(self.state),
                "kind": "kthread" if t.kthread else "user",
                "mode": self.mode if self.current_on is not None else ("kernel" if not t.kthread else "-"),
                "deferred": _mask_text(model, mt) if mt is not None and mt.info.unwind_mask else "",
                "started": started[t.pid].argv[0] if t.pid in started else ""}


@dataclass
class Started:
    """A program started from this session: what /init reported and which program it is."""

    pid: int
    argv: tuple[str, ...]
    program: Program | None
    guest_proc: object


@dataclass
class _Pending:
    request: Request
    task: TaskInfo


@dataclass
class Guest:
    """The live guest of ``harness shell``: ``guest.tasks()``, ``guest.start("fp-spin")``,
    ``guest.user_stack(pid)``, ``guest.request(pid)`` + ``guest.deliver(pid)``, ``guest.deferred()``."""

    session: object
    max_entries: int = 510
    started: dict[int, Started] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = self.session
        self.target = s.target
        self.tl = TaskListInfo.build(s.info.symbols, s.btf)
        self.events = EventLog(None, keep=True)
        self.model = DeferredModel(get_profile("mainline"), self._walk, log=self.events)
        self.tracer = UnwindWork(self._callback, name="shell")
        self.model.init(self.tracer)
        self.pending: dict[int, _Pending] = {}
        self.deliveries: list[dict] = []
        self._maps: dict[int, str] = {}
        self._walk_ctx = None
        self._delivered: list[tuple[int, tuple]] = []
        self._page_offset = None
        self.last: dict | None = None

    # -- running and stopping -------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.target.running

    def stop(self) -> Text:
        """Interrupt the guest (it stays stopped until :meth:`cont`)."""
        if self.running:
            self.target.interrupt()
        return self.where()

    def cont(self) -> None:
        """Let the guest run."""
        if not self.running:
            self.target.resume()

    @contextlib.contextmanager
    def _stopped(self):
        was = self.running
        if was:
            self.target.interrupt()
        try:
            yield
        finally:
            if was and not self.running:
                self.target.resume()

    def _read(self, addr: int, size: int) -> bytes:
        return self.target.read_kernel(addr, size)

    def _symbol(self, addr: int) -> str:
        found = self.session.symbols.nearest(addr, text=True)
        return f"{found[0].name}+{addr - found[0].address:#x}" if found else f"{addr:#x}"

    def _cpus(self) -> list[tuple[int, dict, TaskInfo]]:
        """(vCPU, its registers, its current task) of every vCPU, the selection left as it was."""
        out = []
        keep = self.target.cpu
        for c in self.target.cpus():
            self.target.select_cpu(c)
            regs = self.target.read_registers()
            out.append((c, regs, current_task(self.session.info, self._read, percpu_base(regs))))
        self.target.select_cpu(keep)
        return out

    def where(self) -> Text:
        """Where each vCPU is: its pc (symbolized), user or kernel mode, its current task."""
        state = "running" if self.running else "stopped"
        with self._stopped():
            lines = []
            for c, regs, t in self._cpus():
                mode = "user" if regs["cs"] & 3 == 3 else "kernel"
                at = self._symbol(regs["rip"]) if mode == "kernel" else f"{regs['rip']:#x}"
                lines.append(f"cpu {c}: {mode} mode at {at}, current pid {t.pid} ({t.comm})")
        return Text("\n".join(lines) + f"\nguest {state}")

    # -- tasks ------------------------------------------------------------------------------------
    def _task_rows(self) -> list[TaskRow]:
        info = self.session.info
        cur = {t.addr: (c, regs) for c, regs, t in self._cpus()}
        rows = []
        for addr in task_addresses(info, self.tl, self._read):
            t = read_task(info, self._read, addr)
            cpu, on_cpu, state = task_cpu(self.tl, self._read, addr)
            row = TaskRow(t, cpu, on_cpu, state)
            if addr in cur:
                row.current_on = cur[addr][0]
                row.mode = "user" if cur[addr][1]["cs"] & 3 == 3 else "kernel"
            rows.append(row)
        return rows

    def tasks(self, kthreads: bool = False) -> Text:
        """Every user task (and kernel thread with ``kthreads=True``): pid, comm, CPU, state,
        user task or kernel thread, the mode of a running one, its deferred state and the
        program this session started as it."""
        with self._stopped():
            all_rows = self._task_rows()
        rows = [r.as_row(self.started, self.model) for r in all_rows
                if kthreads or not r.task.kthread or r.current_on is not None]
        hidden = len(all_rows) - len(rows)
        return Text(format_table(rows) + (f"\n({hidden} kernel threads not shown: guest.tasks(kthreads=True))"
                                          if hidden else ""))

    def task(self, pid: int) -> TaskInfo:
        with self._stopped():
            return self._find(pid).task

    def _find(self, pid: int | None) -> TaskRow:
        rows = self._task_rows()
        if pid is None:
            row = next((r for r in rows if r.current_on == self.target.cpu and r.task.pid), None)
            if row is None:
                raise LookupError("no task is current on the selected vCPU (it is idle): name a pid")
            return row
        row = next((r for r in rows if r.task.pid == pid), None)
        if row is None:
            raise LookupError(f"no task with pid {pid}")
        return row

    # -- programs ----------------------------------------------------------------------------------
    def programs(self) -> Text:
        """The programs in this guest's initramfs, and the catalog scenarios that run them."""
        rows = []
        for g, p in self.session.programs.items():
            scs = [n for n, sc in CATALOG.items()
                   if (sc.program, sc.toolchain, sc.variant) == (p.name, p.toolchain, p.variant)]
            rows.append({"guest path": g, "toolchain": p.toolchain, "variant": p.variant.tag,
                         "scenarios": ", ".join(scs)})
        return Text(format_table(rows))

    def _resolve_program(self, what: str) -> tuple[str, list[str], Program | None]:
        progs = self.session.programs
        if what in CATALOG:
            sc = CATALOG[what]
            try:
                p = self.session.program(sc.program, sc.toolchain, sc.variant)
            except KeyError:
                raise LookupError(f"scenario {what}'s program is not in this guest "
                                  f"(harness shell --scenario {what})") from None
            return p.guest_path, list(sc.args), p
        if what in progs:
            return what, [], progs[what]
        for p in progs.values():  # a host path given with --program
            if what and Path(what).resolve() == p.path:
                return p.guest_path, [], p
        if Path(what).is_file() and not what.startswith(("/bin/", "/progs/", "/user/", "/tc/")):
            p = self.upload(what)  # a binary of this machine the guest does not have yet
            return p.guest_path, [], p
        if what.startswith("/"):
            return what, [], None  # a file of the image (/bin/busybox, ...)
        raise LookupError(f"{what!r}: not a scenario, a guest path or a --program of this session; "
                          f"see guest.programs()")

    def upload(self, host_path: str) -> Program:
        """Copy a binary of this machine into the running guest, with the interpreter and
        libraries it needs that the guest lacks (as ``--program`` puts them in the initramfs), at
        ``/user/NAME``, as base64 text on the console (:meth:`harness.transport.qemu.Machine.upload`).
        Returns its :class:`Program`."""
        prog = user_program(host_path)
        present = {g for p in self.session.programs.values() for _, g in p.runtime}
        present |= set(self.session.programs)
        files = [(prog.path, prog.guest_path)] + [(h, g) for h, g in prog.runtime if g not in present]
        with self._running():
            m = self.session.machine
            for host, guest_path in files:
                d = guest_path.rsplit("/", 1)[0] or "/"
                if m.shell(f"mkdir -p {shlex.quote(d)}") != 0:
                    raise LookupError(f"cannot create {d} in the guest")
                m.upload(Path(host).read_bytes(), guest_path)
        self.session.programs[prog.guest_path] = prog
        log.info("uploaded %s as %s (%d file(s))", prog.path, prog.guest_path, len(files))
        return prog

    def start(self, what: str, *args: str) -> Started:
        """Start a program in the guest: a catalog scenario's (``"fp-spin"``: with its arguments
        unless others are given), a guest path, a host binary given with ``--program``, or any
        other binary of this machine (uploaded first: :meth:`upload`)."""
        path, default_args, prog = self._resolve_program(what)
        argv = [path, *(args or default_args)]
        proc = self.session.run_program(argv)
        st = Started(proc.pid, tuple(argv), prog, proc)
        self.started[proc.pid] = st
        log.info("started pid %d: %s", proc.pid, " ".join(argv))
        return st

    def kill(self, pid: int, sig: str = "KILL") -> int:
        with self._running():
            return self.session.machine.shell(f"kill -{sig} {pid}")

    def sh(self, command: str) -> int:
        """Run a shell command in the guest; log its output (stdout and stderr, from the guest's
        program-output channel: ``harness shell`` shows this module's log) and return its exit
        status."""
        with self._running():
            status, out = self.session.machine.shell_output(command)
        if out:
            log.info("%s", out.decode(errors="replace").removesuffix("\n"))
        return status

    @contextlib.contextmanager
    def _running(self):
        was = self.running
        if not was:
            self.target.resume()
        try:
            yield
        finally:
            if not was and self.running:
                self.target.interrupt()

    def maps(self, pid: int, refresh: bool = False) -> str:
        """/proc/PID/maps (the guest runs while /init copies it); kept per pid."""
        if refresh or pid not in self._maps:
            with self._running():
                self._maps[pid] = self.session.machine.dump(f"/proc/{pid}/maps").decode()
        return self._maps[pid]

    # -- a task's user stack, every unwinder and oracle ---------------------------------------------
    def _resolver(self):
        files = {"/bin/busybox": shutil.which("busybox") or "/bin/busybox"}
        for p in self.session.programs.values():
            files[p.guest_path] = str(p.path)
            files.update({guest: str(host) for host, guest in p.runtime})
        return files.get

    def _program_of(self, t: TaskInfo) -> Program | None:
        """The program the task runs: one this session started, else the program whose guest
        path its maps show, else one with its comm."""
        st = self.started.get(t.tgid)
        if st is not None and st.program is not None:
            return st.program
        maps = self._maps.get(t.tgid)
        if maps:
            paths = {m.path for m in parse_maps(maps)}
            found = next((p for g, p in self.session.programs.items() if g in paths), None)
            if found is not None:
                return found
        return next((p for p in self.session.programs.values() if p.comm == t.comm), None)

    def _memory_for(self, row: TaskRow, regs: dict):
        """Memory as the task sees it: the vCPU's own view when the task is current on the selected
        vCPU, else a page walk of its mm->pgd."""
        if row.current_on == self.target.cpu:
            return TargetMemory(self.target)
        if self._page_offset is None:
            sym = self.session.info.symbols.get("page_offset_base")
            self._page_offset = int.from_bytes(self._read(sym, 8), "little") if sym else DIRECT_MAP
        pgd = mm_pgd(self.tl, self._read, row.task.mm)
        return PageWalkMemory(self.target, pgd - self._page_offset, bool(regs.get("cr4", 0) & _CR4_LA57))

    def _context(self, pid: int | None):
        """(task row, its user registers, the registers of the vCPU it is current on, else of
        the selected one) at this stop."""
        row = self._find(pid)
        t = row.task
        if t.kthread or not t.mm:
            raise LookupError(f"pid {t.pid} ({t.comm}) is a kernel thread: it has no user stack")
        if row.current_on is not None:
            self.target.select_cpu(row.current_on)
        regs = self.target.read_registers()
        if row.current_on is not None and row.mode == "user":
            uregs = user_regs_from_cpu(regs)
        else:
            uregs = user_regs(self.session.info, self._read, t,
                              percpu_base(regs) if row.current_on is not None else None)
        return row, uregs, regs

    def _thread_pointer(self, t: TaskInfo) -> int:
        """fs_base of ``t``: the vCPU's while it runs there, else the one its task_struct saved."""
        regs = self.target.read_registers()
        if current_task(self.session.info, self._read, percpu_base(regs)).addr == t.addr:
            return regs["fs_base"]
        return int.from_bytes(self._read(t.addr + self.tl.fsbase, 8), "little")

    def _space(self, t: TaskInfo, memory, bits: int):
        maps = self.maps(t.tgid)
        memory = with_kernel_vdso(memory, maps, self._read, self.session.info.symbols, bits,
                                  (MemoryFault, TargetError))
        return memory, AddressSpace.from_maps(maps, self._resolver(), memory)

    def _snapshot(self, t: TaskInfo, uregs: UserRegs, memory, request: Request | None = None,
                  point: StopPoint | None = None) -> tuple[StackChecker, StopSnapshot]:
        """The engine's checker, built on ``t``'s own address space and oracles, and ``t``'s stack
        as a snapshot on the live guest's memory.  Every oracle applies (``own``: the space is the
        task's own); the request, made up where the stack is looked at where it stands, says
        whether the task runs a program of this session (the causes read it)."""
        prog = self._program_of(t)
        bits = 32 if uregs.compat else 64
        memory, space = self._space(t, memory, bits)
        oracles = build_oracles(Setup(space, memory, str(prog.path) if prog else None,
                                      bool(prog and prog.variant.shadow)))
        checker = StackChecker(space, oracles, self.unwinder, self.max_entries, 4 if bits == 32 else 8)
        request = request or Request(uregs, own="main" if prog is not None else None)
        return checker, StopSnapshot(t, point, uregs, request, "main", self._thread_pointer(t), memory)

    def _record(self, t: TaskInfo, uregs: UserRegs, memory, where: str, request: Request | None = None,
                walked: dict | None = None, cookie: int = 0, point: StopPoint | None = None) -> dict:
        """The stack record of ``t``'s user stack: every unwinder's walk (those in ``walked``, the
        model's, as they are), every oracle's frames, every (unwinder, oracle) verdict -- the
        engine's ``stack`` record, for one stop.  Without ``walked`` the stack was taken where it
        stands: no request whose registers the registers oracles could compare."""
        prog = self._program_of(t)
        checker, snap = self._snapshot(t, uregs, memory, request, point)
        traces = {u: (walked or {}).get(u) or checker.walk(snap, unwinder=u) for u in UNWINDERS}
        ev = checker.evaluate(snap, traces, registers=bool(walked))
        # A registers oracle's one "frame" is the requested IP: its verdict is listed, but a column
        # of one frame beside the stacks would mark every row below it as a difference.
        regs_oracles = {o.name for o in checker.oracles if o.registers}
        return {"task": t.pid, "comm": t.comm, "cookie": cookie, "point": where,
                "scenario": prog.guest_path if prog else "",
                "regs": {"ip": uregs.ip, "sp": uregs.sp, "bp": uregs.bp},
                "frames": {k: v for k, v in ev.frames.items() if k not in regs_oracles},
                "stops": {k: v for k, v in ev.stops.items() if k not in regs_oracles},
                "verdicts": ev.records(self.unwinder)}

    def user_stack(self, pid: int | None = None, raw: bool = False):
        """``pid``'s user stack as it stands (the current task's when None): every unwinder and
        oracle side by side, symbolized, each difference with its cause.  ``raw=True`` returns
        the stack record (a dict) instead of the text."""
        if pid is not None:
            self.maps(pid)  # the guest runs while /init copies it: before the snapshot
        with self._stopped():
            row = self._find(pid)
            self.maps(row.task.tgid)
            row, uregs, regs = self._context(row.task.pid)
            where = (f"cpu {row.current_on} in {row.mode} mode" if row.current_on is not None
                     else f"not running ({_state(row.state)}): its saved pt_regs")
            rec = self._record(row.task, uregs, self._memory_for(row, regs), where)
        self.last = rec
        return rec if raw else Text(stack_columns(rec))

    def pair(self, unwinder: str = "fp", oracle: str = "cfi", rec: dict | None = None) -> Text:
        """One (unwinder, oracle) pair of the last stack, drawn as the report draws a failure."""
        rec = rec or self.last
        v = next((v for v in rec["verdicts"] if v["unwinder"] == unwinder and v["oracle"] == oracle), None)
        return Text(side_by_side(rec, unwinder, oracle, v))

    # -- stopping at the next return to user, or at a kernel symbol ---------------------------------
    def _return_points(self, with_signal: bool = True) -> dict[int, StopPoint]:
        return delivery_points(self.session.stops, self.session.info.symbols, with_signal=with_signal)

    def _run_until(self, addrs, accept, timeout: float, max_stops: int = 2000):
        """Continue with breakpoints at ``addrs`` until ``accept(pc)`` holds; leave it stopped."""
        t = self.target
        if t.running:
            t.interrupt()
        for a in addrs:
            t.set_breakpoint(a)
        try:
            for _ in range(max_stops):
                stop = t.cont(timeout)
                if stop.pc in addrs and accept(stop):
                    return stop
            raise TimeoutError(f"no matching stop in {max_stops} stops")
        finally:
            for a in addrs:
                t.remove_breakpoint(a)

    def until_return(self, pid: int | None = None, timeout: float = 30.0) -> Text:
        """Run to the next return to user space (of ``pid``, or of any task); stay stopped there."""
        pts = self._return_points(with_signal=False)

        def accept(stop):
            return pid is None or self.session.current().pid == pid

        stop = self._run_until(pts, accept, timeout)
        t = self.session.current()
        return Text(f"stopped at {pts[stop.pc].name} ({self._symbol(stop.pc)}) on cpu {stop.cpu}: "
                    f"pid {t.pid} ({t.comm}) returns to user space\n"
                    f"guest.user_stack({t.pid}) shows its stack; guest.cont() lets the guest run")

    # Single steps from a return point to the user mode it returns to: the exit path's last
    # instructions (restore the registers, swapgs, sysret or iret; PTI's CR3 switch), tens of them.
    # Past this many the step went elsewhere (an interrupt taken on the way, as KVM may): the
    # guest is run to the next return again.
    USER_STEPS = 400

    def until_user(self, pid: int, timeout: float = 30.0) -> Text:
        """Run until ``pid`` runs in user mode on a vCPU and stay stopped there, that vCPU
        selected: what a debugger attached to the task would see.  Where the guest is stopped
        with the task there already, it stays; else it runs to the task's next return to user
        space (:meth:`until_return`'s points) and single-steps the vCPU from there into user
        mode.  LookupError when there is no such task or it exits on the way; TimeoutError when
        it does not return to user space within ``timeout`` seconds (the guest is left stopped
        wherever it stopped last)."""
        deadline = time.monotonic() + timeout
        t = self.target
        if t.running:
            t.interrupt()
        row = self._find(pid)
        if row.task.kthread:
            raise LookupError(f"pid {pid} ({row.task.comm}) is a kernel thread: it never runs in user mode")
        if not row.task.mm:
            raise LookupError(f"pid {pid} ({row.task.comm}) has exited (it has no mm)")
        how = "it was there"
        if row.current_on is None or row.mode != "user":
            pts = delivery_points(self.session.stops, self.session.info.symbols, with_signal=False)

            def accept(stop):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"pid {pid} did not return to user space within {timeout:g} s")
                return self.session.current().pid == pid

            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"pid {pid} did not return to user space within {timeout:g} s")
                try:
                    stop = self._run_until(pts, accept, left)
                except TargetTimeout:
                    if t.running:  # not the bound: the stub did not answer the interrupt either
                        raise
                    raise TimeoutError(f"pid {pid} did not return to user space within {timeout:g} s") from None
                point = pts[stop.pc]
                if point.kind == "exit":
                    raise LookupError(f"pid {pid} exits (stopped at {point.name}): it will not run in user mode again")
                steps = self._step_to_user(self.USER_STEPS)
                if steps is not None:
                    break
            how = f"{steps} single steps from {point.name}"
            row = self._find(pid)
            if row.current_on is None or row.mode != "user":  # another task's user mode: never seen
                raise LookupError(f"pid {pid} returned to user space at {point.name}, "
                                  f"but the vCPU is not in its user mode")
            t.select_cpu(row.current_on)
        ip = t.read_registers()["rip"]
        return Text(f"pid {pid} ({row.task.comm}) runs in user mode on cpu {row.current_on} at {ip:#x} ({how}), "
                    f"the guest stays stopped there")

    def _step_to_user(self, limit: int) -> int | None:
        """Single-step the selected vCPU until it is in user mode: the number of steps, or None
        when ``limit`` steps did not get there."""
        t = self.target
        for n in range(1, limit + 1):
            t.step()
            if t.read_registers()["cs"] & 3 == 3:
                return n
        return None

    def break_at(self, symbol: str | int, pid: int | None = None, timeout: float = 30.0) -> Text:
        """Run until the kernel reaches ``symbol`` (a kallsyms name or an address), in ``pid``'s
        context if given; stay stopped there."""
        addr = symbol if isinstance(symbol, int) else self.session.info.sym(symbol)

        def accept(stop):
            return pid is None or self.session.current().pid == pid

        stop = self._run_until({addr}, accept, timeout)
        t = self.session.current()
        return Text(f"stopped at {self._symbol(stop.pc)} on cpu {stop.cpu}, current pid {t.pid} ({t.comm})")

    # -- the deferred model, by hand -------------------------------------------------------------------
    def _walk(self, mtask) -> list[int]:
        uregs, memory, t = self._walk_ctx
        checker, snap = self._snapshot(t, uregs, memory)
        self._walk_traces = {u: checker.walk(snap, unwinder=u) for u in UNWINDERS}
        return self._walk_traces[self.unwinder].ips

    # The walk whose trace the tracer receives (the kernel's SFrame with the FP fallback).
    unwinder = Unwinder.SFRAME

    def _callback(self, work, trace, cookie) -> None:
        self._delivered.append((cookie, tuple(trace)))

    def request(self, pid: int | None = None, timeout: float = 30.0) -> Text:
        """``unwind_deferred_request()`` of the ``shell`` tracer for ``pid`` (the current task when
        None), as the engine's tracers request: from a kernel entry of that task.  A task running
        in user mode is first run to its next timer interrupt or syscall entry (the request's
        registers are then the interrupted ones); a task already in the kernel (asleep, or
        stopped in kernel mode) is asked for where it is, with the user registers it saved.
        The guest is left stopped; :meth:`deliver` steps to the delivery."""
        if pid is not None:
            self.maps(pid)
        # The guest stays stopped from here to the delivery: let run, the task would return to
        # user space before deliver() arms the return points.
        self.stop()
        row = self._find(pid)
        self.maps(row.task.tgid)
        pid = row.task.pid
        s = self.session
        if row.current_on is not None and row.mode == "user":
            pts = {s.stops[n].addr: s.stops[n] for n in ("apic_timer", "syscall_entry") if n in s.stops.points}
            stop = self._run_until(pts, lambda st: s.current().pid == pid, timeout)
            point = pts[stop.pc]
            row = self._find(pid)
            iregs = s.regs_at(point)
            kind = SYSCALL if point.kind == "syscall" else IRQ
            where_text = f"at {point.name} ({self._symbol(stop.pc)})"
        else:
            iregs, point = None, None
            kind = IRQ
            where_text = "in the kernel, where it stands"
        row, uregs, regs = self._context(pid)
        t = row.task
        mt = self.model.tasks.get(t.pid) or self.model.spawn(t.pid, kthread=t.kthread)
        if t.exiting:
            mt.flags |= PF_EXITING
        if not mt.in_kernel and not mt.dead:
            self.model.enter_kernel(mt, kind if iregs is None or iregs.user_mode else "kernel", cpu=row.cpu)
        ret, cookie = self.model.request(self.tracer, mt, row.cpu, Context(kind, user_mode=uregs.user_mode))
        if ret >= 0 and t.pid not in self.pending:
            want = iregs if iregs is not None and iregs.user_mode else uregs
            where = (None if iregs is not None and iregs.user_mode
                     else self._symbol(regs["rip"]) if row.current_on is not None else "asleep in the kernel")
            self.pending[t.pid] = _Pending(Request(want, None, where, None, "main"), t)
        what = {0: "queued", 1: "already pending"}.get(ret, f"failed ({ret})")
        return Text(f"request for pid {t.pid} ({t.comm}) {where_text}: {ret} {what}, cookie {cookie:#x}\n"
                    f"{self.deferred(t.pid)}\nguest.deliver({t.pid}) runs to its delivery (guest stopped)")

    def deliver(self, pid: int | None = None, timeout: float = 30.0) -> Text:
        """Run the guest to the return to user space (or do_exit, get_signal) of a task with
        pending work, run the model's task work there and show the delivered stack judged by
        every oracle; other tasks' work delivered on the way is shown too.  Stays stopped."""
        if not self.pending:
            return Text("nothing pending: guest.request(pid) first")
        pid = pid if pid is not None else next(iter(self.pending))
        if pid not in self.pending:
            return Text(f"pid {pid} has no pending work (pending: {sorted(self.pending)})")
        pts = self._return_points()
        out = []
        while pid in self.pending:
            stop = self._run_until(pts, lambda s: self.session.current().pid in self.pending, timeout)
            out.append(self._deliver_here(pts[stop.pc]))
        return Text("\n\n".join(out) + "\nguest stopped; guest.cont() lets it run")

    def _deliver_here(self, point: StopPoint) -> str:
        s = self.session
        t = s.current()
        pend = self.pending.pop(t.pid)
        mt = self.model.tasks[t.pid]
        uregs = s.regs_at(point)
        memory = TargetMemory(self.target)
        self._walk_ctx = (uregs, memory, t)
        self._delivered = []
        self._walk_traces = {}
        if point.kind == "exit":
            self.model.exit(mt)
        else:
            self.model.return_to_user(mt)
        if not self._delivered:
            return f"pid {t.pid}: no callback ran at {point.name}"
        cookie, trace = self._delivered[0]
        walked = self._walk_traces or None
        rec = self._record(t, uregs, memory, f"{point.name} (delivered)", pend.request, walked, cookie, point)
        rec["delivered"] = list(trace)
        self.deliveries.append(rec)
        self.last = rec
        return (f"delivered to tracer shell at {point.name}: cookie {cookie:#x}, {len(trace)} entries "
                f"(the {self.unwinder} walk)\n" + stack_columns(rec))

    def deferred(self, pid: int | None = None) -> Text:
        """The deferred model's state per task: mask, pending, cookie, cache, kernel entries."""
        rows = []
        for p, mt in sorted(self.model.tasks.items()):
            if pid is not None and p != pid:
                continue
            info = mt.info
            rows.append({"pid": p, "in kernel": "yes" if mt.in_kernel else "no", "entry": mt.entry,
                         "mask": _mask_text(self.model, mt), "pending": "yes" if p in self.pending else "no",
                         "cookie": f"{info.id:#x}" if info.id else "-",
                         "cache": f"{info.cache.nr_entries} entries" if info.cache and info.cache.nr_entries
                         else ("empty" if info.cache else "none"),
                         "delivered": sum(d["task"] == p for d in self.deliveries)})
        if not rows:
            return Text("(no task has been requested yet: guest.request(pid))")
        return Text(format_table(rows))

    def __repr__(self) -> str:
        s = self.session
        return (f"<guest: {s.machine.release}, {s.accel}, {s.spec.smp} vCPU(s), "
                f"{'running' if self.running else 'stopped'}, {len(s.programs)} programs>")


def _mask_text(model, mt) -> str:
    """``unwind_mask`` in hex with its bits named: PENDING, USED and the tracers'."""
    m = mt.info.unwind_mask
    names = []
    prof = model.profile
    if m & (1 << prof.pending_bit):
        names.append("PENDING")
    if prof.used_bit is not None and m & (1 << prof.used_bit):
        names.append("USED")
    for w in model.callbacks:
        if w.bit >= 0 and m & (1 << w.bit):
            names.append(w.name)
    return f"{m:#x}" + (f" ({'|'.join(names)})" if names else "")


BANNER = """harness shell: {guest!r}
  guest.tasks()                 every task: pid, comm, CPU, state, user/kernel
  guest.programs()              programs in the image (and catalog scenarios running them)
  guest.start("fp-spin")        start a scenario's program (or a guest path, or a --program)
  guest.user_stack(pid)         its user stack: every unwinder and oracle side by side, with causes
  guest.until_return(pid)       run to its next return to user space (stays stopped)
  guest.until_user(pid)         run until it runs in user mode (stays stopped)
  guest.break_at("do_exit")     run to a kernel symbol (stays stopped); guest.cont(), guest.stop()
  guest.request(pid)            a deferred-unwind request by hand; guest.deliver(pid) steps to it
  guest.deferred()              the deferred model's state per task (mask, pending, cookie, cache)
  session: the Session (session.symbols, session.info, session.target)"""
