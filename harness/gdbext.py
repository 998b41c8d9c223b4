"""The harness inside gdb: kernel symbols from kallsyms and the commands ``tasks``, ``user-bt
[PID]`` and ``deferred [request|deliver] [PID]``.

``harness boot`` writes ``session.json`` (the kernel's vmlinux, kallsyms dump and ELF symbol file,
the programs in the guest, the maps of the programs it started) and a loader, ``harness-gdb.py``,
into the guest's work directory; ``gdb -x .../harness-gdb.py`` (what ``harness boot --gdb`` runs,
and what it prints for a gdb started by hand) puts this repository and its virtual environment on
gdb's ``sys.path`` (gdb embeds Debian's python3.11, the venv's version) and calls :func:`setup`.

The commands run :class:`harness.interactive.Guest` over a :class:`GdbTarget`: the same task
walk, unwinders, oracles, verdicts and renderer as ``harness shell``, reading the guest through
``gdb.selected_inferior().read_memory`` (physical reads through QEMU's ``Qqemu.PhyMemMode``).
gdb cannot ask /init for ``/proc/PID/maps``: a task's maps are those ``harness boot --start``
dumped before gdb attached, else laid out from its program's ELF (static, non-PIE, no ASLR),
found by comm.

Only this module imports ``gdb`` (outside gdb it imports, and registers nothing); the rest of the
harness does not import it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

try:
    import gdb
except ImportError:  # imported outside gdb (tests walk every module): nothing to register
    gdb = None

from .images.programs import Program, Variant
from .interactive import Guest, Started
from .kernel import KernelInfo, read_task, task_addresses
from .kernel.btf import Btf
from .kernel.kallsyms import Kallsyms
from .kernel.stops import find_stop_points
from .session import GuestSpec, Session
from .transport.target import Stop, Target
from .unwind.maps import ElfImage

_STATE: dict = {}


class GdbTarget(Target):
    """The debugger-target interface over gdb's own connection (all-stop: stopped while a
    command runs)."""

    def __init__(self) -> None:
        super().__init__()
        th = gdb.selected_thread()
        self.cpu = th.num - 1 if th is not None else 0
        self._bps: dict[int, gdb.Breakpoint] = {}

    def _threads(self) -> dict[int, object]:
        return {t.num - 1: t for t in gdb.selected_inferior().threads()}

    def cpus(self) -> list[int]:
        return sorted(self._threads())

    def select_cpu(self, cpu: int) -> None:
        th = self._threads().get(cpu)
        if th is None:
            raise gdb.GdbError(f"no vCPU {cpu}")
        th.switch()
        self.cpu = cpu

    def read_registers(self) -> dict[str, int]:
        frame = gdb.newest_frame()
        out = {}
        for name in self.CORE_REGS:
            try:
                out[name] = int(frame.read_register(name)) & (2**64 - 1)
            except (gdb.error, ValueError):
                pass
        return out

    def write_register(self, name: str, value: int) -> None:
        gdb.execute(f"set ${name} = {value}", to_string=True)

    def _read_chunk(self, addr: int, size: int, physical: bool) -> bytes | None:
        if physical:
            gdb.execute("maintenance packet Qqemu.PhyMemMode:1", to_string=True)
        try:
            return bytes(gdb.selected_inferior().read_memory(addr, size))
        except gdb.MemoryError:
            return None
        finally:
            if physical:
                gdb.execute("maintenance packet Qqemu.PhyMemMode:0", to_string=True)

    def _insert(self, addr: int) -> None:
        bp = self._bps[addr] = gdb.Breakpoint(f"*{addr:#x}", internal=True)
        bp.silent = True

    def _remove(self, addr: int) -> None:
        bp = self._bps.pop(addr, None)
        if bp is not None:
            bp.delete()

    def _resume(self, step: bool, timeout: float) -> Stop:
        gdb.execute("stepi" if step else "continue", to_string=True)
        self.stop_cpu = gdb.selected_thread().num - 1
        self.cpu = self.stop_cpu
        return Stop(self.cpu, int(gdb.parse_and_eval("$pc")) & (2**64 - 1))

    def _continue_nowait(self) -> None:
        raise gdb.GdbError("the guest cannot be left running from a gdb command")

    def _next_stop(self, deadline: float) -> Stop:
        raise gdb.GdbError("the guest cannot be left running from a gdb command")

    def interrupt(self, timeout: float = 5.0) -> Stop:
        return Stop(self.cpu, int(gdb.parse_and_eval("$pc")) & (2**64 - 1))

    def close(self) -> None:
        pass


class GdbSession(Session):
    """What :class:`Guest` needs of a session, from ``session.json`` and gdb's connection."""

    def __init__(self, cfg: dict):
        super().__init__(GuestSpec(kernel=cfg.get("kernel_name", "default")))
        self.cfg = cfg
        self.target = GdbTarget()
        self.symbols = Kallsyms.parse(Path(cfg["kallsyms"]).read_text())
        self.btf = Btf.from_elf(cfg["vmlinux"])
        self.info = KernelInfo.build(cfg["release"], self.symbols.unique(), self.btf)
        for p in cfg["programs"]:
            prog = Program(p["name"], p["toolchain"], Variant.parse(p["variant"]), Path(p["path"]),
                           tuple((Path(h), g) for h, g in p["runtime"]))
            self.programs[prog.guest_path] = prog

    @property
    def stops(self):
        if self._stops is None:
            self._stops = find_stop_points(self.info, self.target.read_kernel, self.symbols.next_symbol_address)
        return self._stops

    @stops.setter
    def stops(self, value) -> None:
        self._stops = value

    def run_program(self, argv):
        raise gdb.GdbError("gdb cannot start guest programs: harness boot --gdb --start SCENARIO, or harness shell")


class GdbGuest(Guest):
    def __post_init__(self) -> None:
        super().__post_init__()
        progs = self.session.programs
        for pid, argv in self.session.cfg.get("started", {}).items():
            self.started[int(pid)] = Started(int(pid), tuple(argv), progs.get(argv[0]), None)

    def maps(self, pid: int, refresh: bool = False) -> str:
        known = self.session.cfg.get("maps", {})
        if str(pid) in known:
            return known[str(pid)]
        if pid not in self._maps:
            self._maps[pid] = self._synth_maps(pid)
        return self._maps[pid]

    def _synth_maps(self, pid: int) -> str:
        """The maps of a static, non-PIE program (the guest runs without ASLR): its PT_LOAD
        segments and the stack, or just the stack when the task's comm names no program."""
        info = self.session.info
        t = next((read_task(info, self._read, a) for a in task_addresses(info, self.tl, self._read)
                  if read_task(info, self._read, a).pid == pid), None)
        prog = self._program_of(t) if t is not None else None
        lines = []
        if prog is not None and prog.variant.static:
            img = ElfImage.from_path(prog.path)
            for s in img.segments:
                if s.p_type != "PT_LOAD":
                    continue
                start, end = s.vaddr & ~0xFFF, (s.vaddr + s.memsz + 0xFFF) & ~0xFFF
                lines.append(f"{start:x}-{end:x} r-xp {s.offset & ~0xFFF:08x} 00:00 0 {prog.guest_path}")
        if prog is not None and prog.variant.bits == 32:
            lines.append("fffdd000-ffffe000 rw-p 00000000 00:00 0 [stack]")
        else:
            lines.append("7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return f"<guest in gdb: {self.session.info.release}>"


def guest() -> GdbGuest:
    if "guest" not in _STATE:
        if "cfg" not in _STATE:
            raise gdb.GdbError("the harness extension has no session: harness-session PATH/session.json")
        t0 = time.monotonic()
        _STATE["guest"] = GdbGuest(GdbSession(_STATE["cfg"]))
        gdb.write(f"[harness: kernel {_STATE['cfg']['release']} understood in {time.monotonic() - t0:.1f}s]\n")
    return _STATE["guest"]


def _pid(arg: str) -> int | None:
    """A pid, or a name: the one user task whose comm starts with it (``user-bt callchain``)."""
    arg = arg.strip()
    if not arg:
        return None
    try:
        return int(arg, 0)
    except ValueError:
        pass
    g = guest()
    info = g.session.info
    tasks = [read_task(info, g._read, a) for a in task_addresses(info, g.tl, g._read)]
    found = sorted({t.tgid for t in tasks if not t.kthread and (t.comm.startswith(arg) or arg.startswith(t.comm))})
    if len(found) != 1:
        raise gdb.GdbError(f"{arg!r}: not a pid, and {len(found)} user processes have such a comm ({found})")
    return found[0]


_GdbCommand = gdb.Command if gdb is not None else object


class _Command(_GdbCommand):
    def invoke(self, arg, from_tty):
        try:
            gdb.write(str(self.run(arg)).rstrip("\n") + "\n")
        except LookupError as exc:
            if isinstance(exc, KeyError):
                raise
            raise gdb.GdbError(str(exc)) from None


class TasksCommand(_Command):
    """tasks [all]: every user task (all: kernel threads too): pid, comm, CPU, state, mode."""

    def __init__(self):
        super().__init__("tasks", gdb.COMMAND_STATUS)

    def run(self, arg):
        return guest().tasks(kthreads=arg.strip() == "all")


class UserBtCommand(_Command):
    """user-bt [PID|COMM]: the task's user stack (the current task's without PID), every unwinder
    (frame pointers, SFrame) and oracle (DWARF CFI, the shadow stack) side by side, with the
    verdict of each pair and the cause of each difference."""

    def __init__(self):
        super().__init__("user-bt", gdb.COMMAND_STACK)

    def run(self, arg):
        return guest().user_stack(_pid(arg))


class DeferredCommand(_Command):
    """deferred [PID]: the deferred model's state per task (mask, pending, cookie, cache).
    deferred request [PID]: a request of the `shell` tracer for the task (current without PID).
    deferred deliver [PID]: continue to the task's return to user space and run its task work."""

    def __init__(self):
        super().__init__("deferred", gdb.COMMAND_STATUS)

    def run(self, arg):
        words = arg.split()
        if words and words[0] == "request":
            return guest().request(_pid(" ".join(words[1:])))
        if words and words[0] == "deliver":
            return guest().deliver(_pid(" ".join(words[1:])))
        return guest().deferred(_pid(arg))


class SessionCommand(_GdbCommand):
    """harness-session PATH: load a session.json written by harness boot (kernel symbols too)."""

    def __init__(self):
        super().__init__("harness-session", gdb.COMMAND_SUPPORT, gdb.COMPLETE_FILENAME)

    def invoke(self, arg, from_tty):
        setup(arg.strip())


def setup(session_json: str) -> None:
    """Read the session, give gdb the kernel's symbols, register the commands."""
    cfg = json.loads(Path(session_json).read_text())
    _STATE.clear()
    _STATE["cfg"] = cfg
    confirm = gdb.parameter("confirm")
    gdb.execute("set confirm off")
    try:
        gdb.execute(f"add-symbol-file {cfg['symfile']}", to_string=True)
    finally:
        gdb.execute(f"set confirm {'on' if confirm else 'off'}")
    gdb.write(f"[harness: {cfg['release']}: kernel symbols from kallsyms loaded ({cfg['symfile']}); "
              f"commands: tasks, user-bt [PID], deferred [request|deliver] [PID]]\n")


if gdb is not None:
    TasksCommand()
    UserBtCommand()
    DeferredCommand()
    SessionCommand()
