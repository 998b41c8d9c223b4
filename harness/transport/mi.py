"""GDB/MI transport: the reference :class:`~harness.transport.target.Target`, and the one
interactive sessions use (the same GDB can be shown to a person).

GDB 13 runs as ``gdb --interpreter=mi3 -nx -q``, spawned here with ``die_with_parent`` (pygdbmi's
``GdbController`` takes no ``preexec_fn``) and in its own session, so a Ctrl-C at the harness's
terminal does not reach it.  Output is parsed with pygdbmi's :mod:`~pygdbmi.gdbmiparser`; the
pipes are read here rather than through pygdbmi's ``IoManager``, because ``IoManager`` cannot
tell an EOF (GDB died) from "no output yet" and parses stderr as if it were MI.  Every command
carries a numeric token and the reader returns as soon as the result record with that token
arrives, bounded by a deadline: pygdbmi's default write waits ~200 ms per command.

GDB 13 cannot connect to a Unix socket, so the stub is reached through
``target remote | socat STDIO UNIX-CONNECT:<path>``.

Facts about GDB 13 against QEMU 7.2's stub that shape this module (observed here):

* ``scheduler-locking`` can only be set once connected.  Without ``step`` locking,
  ``-exec-step-instruction`` sends ``vCont;s:<thread>;c`` (the other vCPUs run too); when
  another vCPU stopped first, a later interrupt came back as a SIGTRAP of the stepping vCPU
  (its single-step flag was left set).  With it, the step is ``vCont;s:<thread>`` alone, like
  the RSP transport's.
* A stop can arrive in the same read as the result of the command that caused it: records are
  consumed one at a time, and async ones (``*stopped``) are queued, never dropped.
* ``-exec-interrupt`` on a guest GDB already reported stopped still sends a Ctrl-C (which the
  stopped stub ignores): the output already read is checked for the ``*stopped`` first.
* ``-data-read-memory-bytes`` returns the readable *blocks* of a range, which need not start at
  the requested address (a read across the start of a mapping returns its tail); a range with
  nothing readable is ``^error "Unable to read memory."``.
* ``-target-disconnect`` drops the connection without ``D``: the guest stays stopped and the
  next client finds it at the same stop.  ``-target-detach`` resumes it.
* The stub does not offer ``QStartNoAckMode`` (forcing it fails the connect): GDB runs with acks.
* pygdbmi's parser costs ~1.4 ms on a 4 KiB read reply and ~2 ms on a 60-register reply; the
  two hot reply shapes take a regex fast path with the same result (a contract test checks).
"""

from __future__ import annotations

import collections
import os
import re
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

from pygdbmi import gdbmiparser

from .errors import TargetDied, TargetError, TargetTimeout
from .qemu import die_with_parent
from .target import Stop, Target

#: register names never fetched (x87 stack, vectors): not integers, not needed by the harness
_SKIP_REG = re.compile(r"^(st\d+|[xyz]mm\d+\w*|k\d+|fctrl|fstat|ftag|fiseg|fioff|foseg|fooff|fop|mxcsr)$")
_SIGNALS = {"SIGINT": 2, "SIGTRAP": 5, "0": 0}
#: ^error messages that mean the connection to the stub is gone, not that the command failed
_GONE = ("Remote connection closed", "Remote communication error", "The program is not being run",
         "Cannot execute this command without a live selected thread", "No registers",
         "Target disconnected")

# Fast paths for the two hot reply shapes (fall back to gdbmiparser for anything else).
_FAST_MEMORY = re.compile(
    r'^(\d+)\^done,memory=\[\{begin="(0x[0-9a-f]+)",offset="(0x[0-9a-f]+)",end="(0x[0-9a-f]+)",'
    r'contents="([0-9a-f]*)"\}\]$')
_FAST_REGS = re.compile(r'^(\d+)\^done,register-values=\[((?:\{number="\d+",value="0x[0-9a-f]+"\},?)*)\]$')
_FAST_REG = re.compile(r'\{number="(\d+)",value="(0x[0-9a-f]+)"\}')


def parse_record(line: str) -> dict:
    """One MI output line as pygdbmi's ``parse_response`` would return it (minus ``stream``)."""
    m = _FAST_MEMORY.match(line)
    if m:
        block = {"begin": m.group(2), "offset": m.group(3), "end": m.group(4), "contents": m.group(5)}
        return {"type": "result", "message": "done", "payload": {"memory": [block]}, "token": int(m.group(1))}
    m = _FAST_REGS.match(line)
    if m:
        values = [{"number": n, "value": v} for n, v in _FAST_REG.findall(m.group(2))]
        return {"type": "result", "message": "done", "payload": {"register-values": values},
                "token": int(m.group(1))}
    return gdbmiparser.parse_response(line)


def _cpu_of_target_id(target_id: str) -> int | None:
    """QEMU's threads are vCPUs: "Thread 1.2" (multiprocess) or "Thread 2" is vCPU 1."""
    m = re.search(r"Thread (?:\d+\.)?(\d+)", target_id)
    return int(m.group(1)) - 1 if m else None


class MiTarget(Target):
    """A QEMU guest seen through GDB/MI.  Not thread-safe: use it from one thread.

    ``close()`` detaches (the guest runs on), ``close(detach=False)`` leaves the guest stopped
    where it is for the next client.  Also a context manager.
    """

    #: the command GDB runs to reach the stub's Unix socket (its stdio is the RSP stream)
    bridge = "socat STDIO UNIX-CONNECT:{path}"

    def __init__(self, socket_path: str | Path, timeout: float = 5.0, gdb: str = "gdb",
                 connect_timeout: float = 15.0):
        super().__init__()
        self.timeout = timeout
        self.path = str(socket_path)
        exe = shutil.which(gdb)
        if exe is None:
            raise TargetError(f"{gdb!r} not found on PATH")
        if shutil.which("socat") is None:
            raise TargetError("socat not found on PATH (GDB reaches QEMU's Unix socket through it)")
        self.proc = subprocess.Popen(
            [exe, "--interpreter=mi3", "-nx", "-q"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, bufsize=0, preexec_fn=die_with_parent, start_new_session=True)
        self._out = bytearray()
        self._err = bytearray()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self.log_tail: collections.deque[str] = collections.deque(maxlen=40)  # console/log streams
        self._events: list[dict] = []  # async records not yet consumed (*stopped, =...)
        self._token = 0
        self.connected = False
        self._was_connected = False
        self._stderr_open = True
        self.running = False
        self.phys_mode = False
        self.commands = 0
        self._regs_cache: dict[str, int] | None = None
        self._bp_numbers: dict[int, str] = {}
        self._gdb_to_cpu: dict[str, int] = {}
        self._cpu_to_gdb: dict[int, str] = {}
        try:
            self._setup(connect_timeout)
        except BaseException:
            self._kill()
            raise

    # -- process and pipes --------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self.proc.pid

    def helper_pids(self) -> list[int]:
        """PIDs of GDB's children (the socat bridge), for leak checks."""
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                out.append(int(entry))
        return out

    def _died(self, what: str) -> TargetDied:
        try:
            rc = self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            rc = None
        self._drain_stderr()
        self.connected = False
        self.running = False
        msg = f"GDB exited (status {rc}) {what}"
        if self.stderr_tail:
            msg += "\n--- GDB's last stderr lines ---\n" + "\n".join(list(self.stderr_tail)[-10:])
        return TargetDied(msg)

    def _drain_stderr(self) -> None:
        try:
            while select.select([self.proc.stderr], [], [], 0)[0]:
                data = os.read(self.proc.stderr.fileno(), 65536)
                if not data:
                    break
                self._take_stderr(data)
        except (OSError, ValueError):
            pass

    def _take_stderr(self, data: bytes) -> None:
        self._err += data
        *lines, rest = self._err.split(b"\n")
        self._err = bytearray(rest)
        for ln in lines:
            if ln.strip():
                self.stderr_tail.append(ln.decode(errors="replace"))

    def _next_record(self, deadline: float) -> dict:
        """The next MI record, waiting until ``deadline`` for GDB to print it."""
        while True:
            nl = self._out.find(b"\n")
            if nl >= 0:
                line = self._out[:nl].decode(errors="replace").rstrip("\r")
                del self._out[: nl + 1]
                if not line or gdbmiparser.response_is_finished(line):
                    continue
                return parse_record(line)
            fds = [self.proc.stdout, self.proc.stderr] if self._stderr_open else [self.proc.stdout]
            ready = select.select(fds, [], [], max(0.0, deadline - time.monotonic()))[0]
            if not ready:
                raise TargetTimeout("no answer from GDB in time")
            if self.proc.stderr in ready:
                data = os.read(self.proc.stderr.fileno(), 65536)
                if data:
                    self._take_stderr(data)
                else:
                    self._stderr_open = False
            if self.proc.stdout in ready:
                data = os.read(self.proc.stdout.fileno(), 1 << 20)
                if not data:
                    raise self._died("(its MI output closed)")
                self._out += data

    def _write(self, text: str) -> None:
        try:
            os.write(self.proc.stdin.fileno(), text.encode() + b"\n")
        except (BrokenPipeError, OSError, ValueError):
            raise self._died("(writing to it failed)") from None

    def _note(self, rec: dict) -> None:
        """Keep what an async or stream record tells us."""
        kind = rec.get("type")
        if kind in ("console", "log", "target"):
            if rec.get("payload"):
                self.log_tail.append(str(rec["payload"]).rstrip("\n"))
        elif kind == "notify":
            msg = rec.get("message")
            if msg == "thread-group-exited" and self.connected:
                self.connected = False
                self._events.append(rec)
            elif msg in ("stopped", "running"):
                self._events.append(rec)

    def _command(self, cmd: str, timeout: float | None = None) -> tuple[dict, list[str]]:
        """Send ``cmd`` with a fresh token; return its result record and the console text that
        came with it.  ^error raises :class:`TargetError` (:class:`TargetDied` when the
        connection to the stub is gone)."""
        if self.proc.poll() is not None:
            raise self._died("before the command")
        self._token += 1
        token = self._token
        self.commands += 1
        deadline = time.monotonic() + (timeout or self.timeout)
        self._write(f"{token}{cmd}")
        console: list[str] = []
        while True:
            try:
                rec = self._next_record(deadline)
            except TargetTimeout:
                raise TargetTimeout(f"GDB did not answer {cmd!r} within {timeout or self.timeout:.1f}s") from None
            if rec.get("type") == "result" and rec.get("token") == token:
                if rec.get("message") == "error":
                    msg = (rec.get("payload") or {}).get("msg", "")
                    if self._was_connected and (not self.connected or any(g in msg for g in _GONE)):
                        self.connected = False
                        raise TargetDied(f"{cmd}: {msg} (the connection to QEMU's stub is gone)"
                                         + self._log_excerpt())
                    raise TargetError(f"{cmd}: {msg}")
                return rec, console
            if rec.get("type") == "console" and rec.get("payload"):
                console.append(rec["payload"])
            self._note(rec)

    def _log_excerpt(self) -> str:
        lines = [ln for ln in self.log_tail if ln.strip()][-5:]
        return ("\n--- GDB's last messages ---\n" + "\n".join(lines)) if lines else ""

    def console(self, command: str, timeout: float | None = None) -> str:
        """Run a GDB CLI command; return what it printed."""
        quoted = command.replace("\\", "\\\\").replace('"', '\\"')
        _, out = self._command(f'-interpreter-exec console "{quoted}"', timeout)
        return "".join(out)

    # -- set-up ---------------------------------------------------------------------------------
    def _setup(self, connect_timeout: float) -> None:
        for cmd in ("-gdb-set mi-async on", "-gdb-set architecture i386:x86-64",
                    "-gdb-set breakpoint always-inserted on",  # no z/Z packets around each resume
                    "-gdb-set stack-cache off", "-gdb-set code-cache off",  # PhyMemMode changes what an address means
                    "-gdb-set pagination off", "-gdb-set confirm off"):
            self._command(cmd, timeout=connect_timeout)
        self._command(f"-target-select remote | {self.bridge.format(path=self.path)}", timeout=connect_timeout)
        self.connected = self._was_connected = True
        self._events.clear()  # the *stopped of the attach
        self._command("-gdb-set scheduler-locking step")  # only possible once connected (see above)
        names = self._command("-data-list-register-names")[0]["payload"]["register-names"]
        self.reg_numbers: dict[str, int] = {}
        for i, name in enumerate(names):
            if name == "al":  # pseudo registers (al, ax, eax, ...) follow the raw ones
                break
            if name and not _SKIP_REG.match(name):
                self.reg_numbers[name] = i
        missing = [n for n in self.CORE_REGS if n not in self.reg_numbers]
        if missing:
            raise TargetError(f"GDB's register set lacks {missing}")
        self._reg_by_number = {str(v): k for k, v in self.reg_numbers.items()}
        self._reg_list = " ".join(str(v) for v in self.reg_numbers.values())
        current = self._refresh_threads()
        self.cpu = self._gdb_to_cpu.get(current, 0)

    def _refresh_threads(self) -> str | None:
        """Map GDB thread ids to vCPUs; return GDB's current thread id."""
        payload = self._command("-thread-info")[0]["payload"]
        self._gdb_to_cpu, self._cpu_to_gdb = {}, {}
        for t in payload.get("threads", []):
            cpu = _cpu_of_target_id(t.get("target-id", ""))
            if cpu is not None:
                self._gdb_to_cpu[t["id"]] = cpu
                self._cpu_to_gdb[cpu] = t["id"]
        return payload.get("current-thread-id")

    # -- Target primitives ----------------------------------------------------------------------
    def cpus(self) -> list[int]:
        return sorted(self._cpu_to_gdb)

    def select_cpu(self, cpu: int) -> None:
        if cpu not in self._cpu_to_gdb:
            raise TargetError(f"no vCPU {cpu} (have {self.cpus()})")
        if cpu != self.cpu:
            self._command(f"-thread-select {self._cpu_to_gdb[cpu]}")
            self.cpu = cpu
            self._regs_cache = None

    def read_registers(self) -> dict[str, int]:
        if self._regs_cache is None:
            rec, _ = self._command(f"-data-list-register-values x {self._reg_list}")
            regs = {}
            for item in rec["payload"]["register-values"]:
                name = self._reg_by_number.get(item["number"])
                try:
                    regs[name] = int(item["value"], 16)
                except (TypeError, ValueError):
                    continue  # unavailable or not an integer
            self._regs_cache = regs
        return dict(self._regs_cache)

    def write_register(self, name: str, value: int) -> None:
        if name not in self.reg_numbers:
            raise TargetError(f"no register {name!r}")
        self._command(f"-data-evaluate-expression ${name}={value:#x}")
        self._regs_cache = None

    def _insert(self, addr: int) -> None:
        rec, _ = self._command(f"-break-insert *{addr:#x}")
        self._bp_numbers[addr] = rec["payload"]["bkpt"]["number"]

    def _remove(self, addr: int) -> None:
        number = self._bp_numbers.pop(addr, None)
        if number is not None:
            self._command(f"-break-delete {number}")

    def _set_phys(self, on: bool) -> None:
        if on != self.phys_mode:
            out = self.console(f"maintenance packet Qqemu.PhyMemMode:{int(on)}")
            if 'received: "OK"' not in out:
                raise TargetError(f"Qqemu.PhyMemMode:{int(on)}: the stub answered {out.strip()!r}")
            self.phys_mode = on

    def _read_chunk(self, addr: int, size: int, physical: bool) -> bytes | None:
        self._set_phys(physical)
        try:
            rec, _ = self._command(f"-data-read-memory-bytes {addr:#x} {size}")
        except TargetError as exc:
            if isinstance(exc, TargetDied) or "Unable to read memory" not in str(exc):
                raise
            return None
        blocks = rec["payload"]["memory"]
        if len(blocks) != 1:
            return None
        b = blocks[0]
        if int(b["begin"], 16) != addr or int(b["end"], 16) != addr + size:
            return None  # only part of it was readable
        return bytes.fromhex(b["contents"])

    # -- resuming ---------------------------------------------------------------------------------
    def _wait_stopped(self, deadline: float) -> dict:
        while True:
            for i, ev in enumerate(self._events):
                if ev.get("message") == "stopped":
                    del self._events[: i + 1]
                    return ev
                if ev.get("message") == "thread-group-exited":
                    self._events.clear()
                    self.running = False
                    raise TargetDied("the connection to QEMU's stub closed while the guest ran"
                                     + self._log_excerpt())
            self._events.clear()
            rec = self._next_record(deadline)
            if rec.get("type") != "result":  # a late result of an earlier command: nothing waits for it
                self._note(rec)

    def _parse_stopped(self, ev: dict) -> Stop:
        self.running = False
        self._regs_cache = None
        p = ev.get("payload") or {}
        reason = p.get("reason", "")
        if reason.startswith("exited"):
            self.connected = False
            raise TargetDied(f"the target exited: {p}" + self._log_excerpt())
        tid = p.get("thread-id")
        if tid is not None and tid not in self._gdb_to_cpu:
            self._refresh_threads()
        if tid in self._gdb_to_cpu:
            self.cpu = self._gdb_to_cpu[tid]  # GDB switches to the thread that stopped
        self.stop_cpu = self.cpu
        signal_name = p.get("signal-name", "SIGTRAP")
        pc = int(p["frame"]["addr"], 16) if "frame" in p else self.read_registers()["rip"]
        return Stop(self.cpu, pc, _SIGNALS.get(signal_name, 5))

    def _start(self, cmd: str) -> None:
        if self.running:
            raise TargetError("the guest is running: interrupt it or wait for its stop first")
        if self.phys_mode:
            self._set_phys(False)  # GDB reads code at the stop; keep it meaningful
        self._regs_cache = None
        self._events.clear()
        self._command(cmd)
        self.running = True

    def _resume(self, step: bool, timeout: float) -> Stop:
        self._start("-exec-step-instruction" if step else "-exec-continue")
        return self.wait_stop(timeout)

    def _continue_nowait(self) -> None:
        self._start("-exec-continue")

    def _next_stop(self, deadline: float) -> Stop:
        return self._parse_stopped(self._wait_stopped(deadline))

    def _interrupt_running(self, timeout: float) -> Stop:
        deadline = time.monotonic() + timeout
        # A stop GDB has already printed needs no interrupt (and a Ctrl-C to a stopped stub is
        # noise at best): take what is there first.
        try:
            while True:
                rec = self._next_record(time.monotonic())
                if rec.get("type") != "result":
                    self._note(rec)
        except TargetTimeout:
            pass
        if any(ev.get("message") == "stopped" for ev in self._events):
            return self._parse_stopped(self._wait_stopped(deadline))
        try:
            self._command("-exec-interrupt", timeout)
        except TargetDied:
            raise
        except TargetError:
            # The guest stopped on its own just before: its *stopped is what ends the wait.
            if not any(ev.get("message") == "stopped" for ev in self._events):
                raise
        try:
            ev = self._wait_stopped(deadline)
        except TargetTimeout:
            raise TargetTimeout(f"the guest did not stop within {timeout:.1f}s of -exec-interrupt") from None
        return self._parse_stopped(ev)

    def interrupt(self, timeout: float = 5.0) -> Stop:
        """Stop a running guest.  On a stopped one, report where the selected vCPU is."""
        if self.running:
            return self._interrupt_running(timeout)
        return Stop(self.cpu, self.read_registers()["rip"], 0)

    # -- shutdown -----------------------------------------------------------------------------------
    def close(self, detach: bool = True) -> None:
        """End the session and GDB (bounded).  ``detach`` lets the guest run on (``D``);
        otherwise the connection is dropped and the guest stays stopped where it is."""
        try:
            if self.proc.poll() is None and self.connected:
                if self.running:
                    self._interrupt_running(2.0)
                if self.phys_mode:
                    self._set_phys(False)
                self._command("-target-detach" if detach else "-target-disconnect", timeout=2.0)
                self.connected = False
            if self.proc.poll() is None:
                self._write("-gdb-exit")
                self.proc.wait(timeout=2.0)
        except (TargetError, subprocess.TimeoutExpired):
            pass
        self._kill()

    def _kill(self) -> None:
        helpers = self.helper_pids() if self.proc.poll() is None else []
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            pass
        for pid in helpers:  # socat ends on EOF from GDB; make sure of it
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        self.connected = False
        self.running = False

    def __enter__(self) -> MiTarget:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
