"""The QEMU process: command line, the guest's serial channels, QMP and a bounded shutdown.

The guest has four serial ports, each with one job (images/init.sh says the same from inside):

* ttyS0, QEMU's stdio: the kernel console, carrying the kernel's log only (in syslog form, so
  that the kernel's own records can be told from what user space writes to /dev/kmsg).  A
  thread drains it into a ring of recent lines and ``console.log``; panic and oops detection
  reads it and nothing else.
* ttyS1, a file: the dump port (raw bytes of guest files).
* a pci-serial device on a Unix socket: the control channel, /init's line protocol.  Only /init
  holds it open; no program inherits it, so no program can forge a reply or swallow a command.
* a pci-serial device on a Unix socket: program output, framed per program by /init and
  written by :class:`ProgramOutput` into one file per program run.

What is defended: a guest program (root or not) that prints anything at all, however much,
with or without newlines; that writes /dev/kmsg (its records carry a user facility, which the
panic detection ignores); that opens /dev/console or the ports' nodes by name (they are gone);
that names itself like a kernel message (the death headers are matched in full, at the start of
a facility-0 record, and are longer than a task name).  What is not: a root program that
recreates the nodes with mknod, writes the UARTs' I/O ports or /dev/mem, ptraces /init, or loads
a module; it can write any channel, and no channel authenticates the kernel or /init.

Every socket is a Unix socket in a private temporary directory (no TCP listener).  QEMU runs
with ``PR_SET_PDEATHSIG(SIGKILL)`` so it dies with the harness even when the harness is killed.
Waits are bounded and end early on a kernel panic or when QEMU exits.
"""

from __future__ import annotations

import base64
import collections
import ctypes
import gzip
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pexpect

from .. import signals
from ..images.qemu import resolve_qemu
from .channels import END, PANIC_RE, FrameDecoder, control_line, panic_message  # noqa: F401 (PANIC_RE: re-exported)
from .errors import GuestDied, GuestError, GuestPanic, GuestTimeout, QemuStartError
from .fdio import nonblocking, read_now, wait_readable, write_all

PROTOCOL_PREFIX = "@@H "
#: PCI addresses of the control and output ports (images/init.sh finds its ttys by them)
CONTROL_PCI_ADDR = "1e.0"
OUTPUT_PCI_ADDR = "1f.0"
#: bytes of one program's output kept on the host; the rest is counted, not written
OUTPUT_LIMIT = 64 << 20

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died between fork and prctl.
    if os.getppid() == 1:
        os._exit(1)


#: what a kernel that runs prints once it is past its early boot: it looked for a root file system
KVM_BOOTED_RE = re.compile(r"VFS: Unable to mount root|Kernel panic - not syncing: VFS|Run /init|No working init")
#: what QEMU says when the accelerator cannot run the guest (it may keep running, paused)
KVM_FAILED_RE = re.compile(r"KVM internal error|emulation failure|failed to set MSR|kvm_.*Assertion|"
                           r"Could not access KVM|failed to initialize kvm|KVM_[A-Z_]+ failed")
#: seconds a guest may stay silent before its first byte: with earlyprintk the kernel writes
#: "Linux version ..." within its first milliseconds under a KVM that runs it (0.2-0.5 s after
#: QEMU starts, TCG included); a KVM that cannot run it writes nothing (this machine's
#: paravirtual KVM spins, QEMU 11 silent, for as long as it is let: the old probe's 30 s)
PROBE_FIRST_OUTPUT = 3.0


def boot_probe(qemu: list[str], vmlinux: Path, accel: str = "kvm", timeout: float = 30.0,
               first_output: float = PROBE_FIRST_OUTPUT) -> tuple[bool, str, float]:
    """Boot ``vmlinux`` with no root file system under ``accel`` and watch its console as it
    comes: (booted, why, seconds).  It booted when it gets as far as looking for its root; it
    did not when QEMU ends or reports the accelerator's failure (at once), or when the console
    stays silent for ``first_output`` seconds; ``timeout`` bounds a boot that prints but never
    gets there.  QEMU is killed as soon as the answer is known."""
    start = time.monotonic()
    cmd = [*qemu, "-accel", accel, "-cpu", "host" if accel == "kvm" else "max,la57=off", "-m", "256",
           "-nodefaults", "-display", "none", "-no-reboot", "-serial", "stdio", "-kernel", str(vmlinux),
           "-append", "console=ttyS0 earlyprintk=serial,ttyS0 panic=-1 loglevel=7"]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent)
    except OSError as exc:
        return False, f"QEMU did not start: {exc}", time.monotonic() - start
    out = bytearray()
    why = None
    try:
        fd = proc.stdout.fileno()
        while why is None:
            now = time.monotonic()
            console = any(not ln.startswith(b"qemu-system") for ln in bytes(out).splitlines() if ln.strip())
            limit = start + (timeout if console else first_output)
            if now >= limit:
                why = (f"no boot within {timeout:g} s" if console
                       else f"no console output within {first_output:g} s")
                break
            if not wait_readable(fd, limit - now):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                why = f"QEMU exited (status {proc.wait(timeout=5)})"
                break
            out += chunk
            text = out.decode(errors="replace")
            if KVM_BOOTED_RE.search(text):
                return True, f"{accel.upper()} booted the guest kernel", time.monotonic() - start
            if KVM_FAILED_RE.search(text):
                why = "QEMU reported the failure"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()
    last = [ln for ln in out.decode(errors="replace").splitlines() if ln.strip()][-3:]
    return False, f"{why}: " + (" | ".join(last) if last else "no output"), time.monotonic() - start


def kvm_usable(qemu: list[str], vmlinux: Path, timeout: float = 30.0) -> tuple[bool, str]:
    """Whether KVM runs ``vmlinux`` (:func:`boot_probe`): (usable, why).  Seconds where KVM
    cannot (the first console byte's wait, or QEMU's error at once), about a second where it
    can."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is missing or not accessible"
    ok, why, _seconds = boot_probe(qemu, vmlinux, "kvm", timeout)
    return ok, why if ok else "KVM cannot boot this kernel: " + why


def default_qemu() -> list[str]:
    """The command prefix of the QEMU chosen by ``$HARNESS_QEMU`` (host, backports or auto;
    harness/images/qemu.py), resolved once per process."""
    return list(resolve_qemu().prefix)


@dataclass
class MachineConfig:
    vmlinux: Path
    initrd: Path
    smp: int = 1
    memory_mb: int = 512
    accel: str = "tcg"  # "tcg" or "kvm" (resolve "auto" with kvm_usable before)
    pti: bool = False
    append: str = ""
    qemu: list[str] = field(default_factory=default_qemu)  # command prefix
    boot_timeout: float = 90.0

    def command(self, workdir: Path) -> list[str]:
        cpu = "host" if self.accel == "kvm" else "max,la57=off"  # pin 4-level paging
        # console_msg_format=syslog: each console line starts with <facility * 8 + level>, and
        # facility 0 is the kernel's alone (harness/transport/channels.py).
        # noirqdebug: on PREEMPT_RT every handler runs in a thread, and the 8250's threaded handler
        # finds QEMU's UART idle for most of the edges it is woken for; the spurious-IRQ check
        # then disables IRQ 3 ("irq 3: nobody cared") and the dump port ttyS1 stops sending, so
        # the /proc/kallsyms dump hung.  The guest's IRQs are QEMU's, never a stuck device.
        append = "console=ttyS0 console_msg_format=syslog panic=-1 loglevel=4 nokaslr rdinit=/init noirqdebug"
        append += " pti=on" if self.pti else " pti=off"
        if self.append:
            append += " " + self.append
        accel = self.accel
        if accel == "tcg" and self.smp > 1:
            # Multi-threaded TCG races with the kernel's int3-based code patching (text_poke_bp):
            # about one 2-vCPU boot in eight died with "Oops: int3" in sched_clock_cpu.  One
            # thread running the vCPUs round-robin does not.
            accel = "tcg,thread=single"
        return [
            *self.qemu,
            "-accel", accel, "-cpu", cpu, "-smp", str(self.smp), "-m", str(self.memory_mb),
            "-nodefaults", "-display", "none", "-no-reboot",
            # Threads named ("CPU 0/TCG"): --pin tells the vCPU threads by name, and 7.2 names
            # none without it (11.x does by default).
            "-name", "debug-threads=on",
            "-kernel", str(self.vmlinux), "-initrd", str(self.initrd), "-append", append,
            # signal=off: a stray ^C on the console must not kill QEMU.
            "-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
            "-chardev", f"file,id=dump,path={workdir / 'dump.bin'}", "-serial", "chardev:dump",
            "-chardev", f"socket,id=ctl,path={workdir / 'ctl.sock'},server=on,wait=off",
            "-device", f"pci-serial,chardev=ctl,addr={CONTROL_PCI_ADDR}",
            "-chardev", f"socket,id=out,path={workdir / 'out.sock'},server=on,wait=off",
            "-device", f"pci-serial,chardev=out,addr={OUTPUT_PCI_ADDR}",
            "-chardev", f"socket,id=gdb0,path={workdir / 'gdb.sock'},server=on,wait=off", "-gdb", "chardev:gdb0",
            "-qmp", f"unix:{workdir / 'qmp.sock'},server=on,wait=off",
            # A human monitor for the sampling loop's NMIs (HmpMonitor, below).
            "-chardev", f"socket,id=nmi,path={workdir / 'nmi.sock'},server=on,wait=off",
            "-mon", "chardev=nmi,mode=readline",
        ]


class HmpMonitor:
    """The sampling loop's NMI monitor: QEMU's human monitor (HMP, readline mode) on a socket
    of its own, for one hot command, ``nmi``, once per sampled trace.

    Why HMP and not a second QMP monitor (what this was until #13's last round): QMP sends
    STOP and RESUME events to every monitor at every gdb stop and continue (four JSON lines a
    trace to read past), and its commands go through the monitor I/O thread and a dispatcher
    coroutine of the main loop before they run; HMP's readline monitor runs the command in the
    main loop's read handler and sends no events.  Measured on QEMU 11.1 (2 cores, quiet), from
    the command to the NMI's stop: median 0.32 ms by HMP against 0.41-0.44 ms by QMP, means
    0.33-0.36 against 0.58-0.69 ms.  And why no library: qemu.qmp speaks QMP only; HMP's wire
    format is a prompt, the echoed line and the command's output (below).

    A command is sent without waiting (:meth:`send`); its answer is read, in order, by the next
    :meth:`drain` or :meth:`execute`.  An answer is the echo of the line (readline redraws it
    with escape sequences), ``\\r\\n``, the command's output, then the prompt ``(qemu) ``.
    ``nmi`` prints nothing: any output is its refusal (a GuestError naming it).
    """

    PROMPT = b"(qemu) "

    def __init__(self, path: str | Path, timeout: float = 5.0):
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError as exc:
            raise GuestDied(f"cannot connect to the human monitor at {path}: {exc}", []) from exc
        self._fd = nonblocking(self.sock)  # one NMI a trace: harness/transport/fdio.py says why
        self.buf = bytearray()
        self.unanswered: collections.deque[str] = collections.deque()
        banner = self._segment(block=True)  # "QEMU x.y.z monitor - type 'help' ...\r\n"
        if b"monitor" not in banner:
            raise GuestDied(f"the human monitor at {path} greeted with {bytes(banner)!r}", [])

    def _segment(self, block: bool) -> bytes | None:
        """The bytes up to the next prompt, or None when none is there (and not ``block``)."""
        while self.PROMPT not in self.buf:
            try:
                data = read_now(self._fd)
                if data is None:
                    if not block:
                        return None
                    if not wait_readable(self._fd, self.timeout):
                        raise TimeoutError(f"no answer within {self.timeout:g}s")
                    continue
            except OSError as exc:
                raise GuestDied(f"human monitor connection failed: {exc}", []) from exc
            if not data:
                raise GuestDied("the human monitor closed the connection (QEMU gone?)", [])
            self.buf += data
        seg, _, rest = bytes(self.buf).partition(self.PROMPT)
        self.buf = bytearray(rest)
        return seg

    def send(self, line: str) -> None:
        """Send a command line without waiting for its answer (:meth:`drain` reads it)."""
        try:
            write_all(self._fd, line.encode() + b"\n", self.timeout)
        except OSError as exc:
            raise GuestDied(f"HMP {line} failed: {exc}", []) from exc
        self.unanswered.append(line)

    def _answer(self, block: bool) -> str | None:
        """The oldest unanswered command's output (its echo dropped), or None when its answer
        is not in yet and not ``block``."""
        seg = self._segment(block)
        if seg is None:
            return None
        self.unanswered.popleft()
        _echo, _, out = seg.partition(b"\r\n")
        return out.decode(errors="replace").strip()

    def drain(self, block: bool = False) -> None:
        """Read the answers already there (all of them with ``block``, each within the timeout);
        an ``nmi`` with any output was refused: GuestError."""
        while self.unanswered:
            line = self.unanswered[0]
            out = self._answer(block)
            if out is None:
                return
            if out and line == "nmi":
                raise GuestError(f"HMP nmi: {out}", [])

    def execute(self, line: str) -> str:
        """Send ``line`` once the earlier answers are read, and return its output."""
        self.drain(block=True)
        self.send(line)
        return self._answer(block=True)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Console:
    """Drains QEMU's stdio, the guest's kernel console (ttyS0: the kernel's log only), in a
    thread into a ring of recent lines and a log file.  ``panic`` is the first line in which the
    kernel said it died (:func:`harness.transport.channels.panic_message`: facility-0 records
    only, so nothing a program writes to /dev/kmsg counts)."""

    def __init__(self, child: pexpect.spawn, log_path: Path, cond: threading.Condition, keep: int = 400):
        self.child = child
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.panic: str | None = None
        self.eof = False
        self._cond = cond
        self._log = open(log_path, "w", buffering=1, errors="replace")
        self._partial = ""
        self._thread = threading.Thread(target=self._drain, name="qemu-console", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        # The pty read directly, not with pexpect's read_nonblocking: that calls the child's
        # isalive() (a waitpid) from this thread at EOF and on idle timeouts, while
        # Machine.close() polls isalive() from its own, and ptyprocess's isalive() is not safe
        # across threads: this thread reaped QEMU between close()'s two waitpid calls, which then
        # failed with "There was no child process. Did someone else call waitpid() on our
        # process?" (test_machine_failures, once in eight suite runs).  Only the owner waits.
        fd = self.child.child_fd
        while True:
            try:
                if not wait_readable(fd, 0.5):
                    continue
                chunk = os.read(fd, 65536)
            except (OSError, ValueError):  # EIO: QEMU's side of the pty is closed (it is gone)
                break
            if not chunk:
                break
            text = chunk.decode(errors="replace") if isinstance(chunk, bytes) else chunk
            self._log.write(text)
            data = self._partial + text.replace("\r", "")
            *complete, self._partial = data.split("\n")
            with self._cond:
                for line in complete:
                    self.lines.append(line)
                    if self.panic is None and panic_message(line) is not None:
                        self.panic = line
                self._cond.notify_all()
        with self._cond:
            self.eof = True
            self._cond.notify_all()
        self._log.close()

    def tail(self, n: int = 40) -> list[str]:
        with self._cond:
            return list(self.lines)[-n:]

    def wait_eof(self, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds, until every byte QEMU wrote is read (EOF): a guest
        that panicked and took QEMU with it closes the sockets a moment before its console's
        last lines are read (seen: "QEMU exited with status 0" without the panic's line)."""
        self._thread.join(timeout)
        return self.eof


class _SocketReader:
    """A thread reading one of QEMU's Unix-socket chardevs until EOF; :meth:`_data` gets the bytes."""

    name = "channel"

    def __init__(self, path: Path, cond: threading.Condition):
        self._cond = cond
        self.eof = False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.sock.settimeout(0.5)
        self._send_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"qemu-{self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                try:
                    data = self.sock.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not data:
                    break
                with self._cond:
                    self._data(data)
                    self._cond.notify_all()
        finally:
            with self._cond:
                self.eof = True
                self._finish()
                self._cond.notify_all()

    def _data(self, data: bytes) -> None:  # under the condition's lock
        raise NotImplementedError

    def _finish(self) -> None:  # under the condition's lock, at EOF
        pass

    def send_bytes(self, data: bytes) -> None:
        with self._send_lock:
            try:
                self.sock.sendall(data)
            except OSError as exc:
                raise GuestDied(f"the guest's {self.name} channel is closed: {exc}") from exc

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(timeout=2)
        self.sock.close()


class ControlChannel(_SocketReader):
    """The /init line protocol on its own serial port (a pci-serial device that only /init has
    open: images/init.sh).  Replies start with "@@H "; waits are bounded and end early when the
    kernel console shows a panic or QEMU exits."""

    name = "control"

    def __init__(self, path: Path, cond: threading.Condition, console: Console):
        self.console = console
        self.protocol: collections.deque[str] = collections.deque()
        self.other: collections.deque[str] = collections.deque(maxlen=50)  # lines that are no reply
        self._partial = b""
        super().__init__(path, cond)

    def _data(self, data: bytes) -> None:
        *complete, self._partial = (self._partial + data).split(b"\n")
        for raw in complete:
            line = raw.decode(errors="replace").rstrip("\r")
            if line.startswith(PROTOCOL_PREFIX):
                self.protocol.append(line[len(PROTOCOL_PREFIX):])
            elif line:
                self.other.append(line)

    def wait(self, pattern: str, timeout: float, what: str) -> re.Match:
        """Wait for a reply matching ``pattern`` (consumed); raise on panic, EOF, timeout."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        console = self.console
        with self._cond:
            while True:
                for i, line in enumerate(self.protocol):
                    m = rx.match(line)
                    if m:
                        del self.protocol[i]
                        return m
                if console.panic is not None:
                    # Give the kernel a moment to print the rest of the oops.
                    self._cond.wait(0.5)
                    raise GuestPanic(f"guest kernel failed while waiting for {what}: {console.panic}",
                                     list(console.lines)[-60:])
                if console.eof or self.eof:
                    if not console.eof:
                        # QEMU exits at a panic (panic=-1, -no-reboot): this socket's EOF can come
                        # before the console's thread has read the panic (seen with two workers
                        # on 2 cores: GuestDied for test_machine_failures' sysrq crash).  The
                        # console's own EOF, bounded, then the panic is checked once more.
                        end = time.monotonic() + 2
                        while not console.eof and time.monotonic() < end:
                            self._cond.wait(0.1)
                        if console.panic is not None:
                            continue
                    raise GuestDied(f"QEMU exited while waiting for {what}", list(console.lines)[-60:])
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GuestTimeout(f"no {what} from the guest within {timeout:.0f}s",
                                       list(console.lines)[-60:])
                self._cond.wait(min(left, 0.5))

    def find(self, pattern: str) -> re.Match | None:
        """A reply already received that matches ``pattern`` (not consumed), or None."""
        rx = re.compile(pattern)
        with self._cond:
            return next((m for m in map(rx.match, self.protocol) if m), None)

    def send(self, line: str) -> None:
        if "\n" in line:
            raise ValueError(f"a control line cannot hold a newline: {line!r}")
        self.send_bytes(line.encode() + b"\n")


@dataclass
class OutputSink:
    """Where one program's (or shell command's) output goes on the host."""

    path: Path | None  # None: created under the machine's output directory if anything arrives
    limit: int
    size: int = 0  # bytes written to the file
    dropped: int = 0  # bytes past ``limit``, counted and not written
    done: bool = False  # its end-of-output frame arrived
    fh: object = None


class ProgramOutput(_SocketReader):
    """The program-output port: demultiplexes the frames of every program into one file each."""

    name = "output"

    def __init__(self, path: Path, cond: threading.Condition, directory: Path, limit: int):
        self.directory = directory
        self.limit = limit
        self.sinks: dict[int, OutputSink] = {}
        self.decoder = FrameDecoder()
        super().__init__(path, cond)

    def expect(self, ident: int, path: Path | None, limit: int | None = None) -> OutputSink:
        with self._cond:
            sink = self.sinks[ident] = OutputSink(path, self.limit if limit is None else limit)
            if path is not None:  # the file exists, empty, even for a program that prints nothing
                path.parent.mkdir(parents=True, exist_ok=True)
                sink.fh = open(path, "wb")
            return sink

    def _data(self, data: bytes) -> None:
        touched = set()
        for ident, chunk in self.decoder.feed(data):
            sink = self.sinks.get(ident) or self.expect(ident, None)
            if chunk is END:
                sink.done = True
                if sink.fh is not None:
                    sink.fh.close()
                    sink.fh = None
                continue
            if sink.fh is None and not sink.done:
                if sink.path is None:
                    sink.path = self.directory / f"{ident}.out"
                sink.path.parent.mkdir(parents=True, exist_ok=True)
                sink.fh = open(sink.path, "ab")
            keep = max(0, min(len(chunk), sink.limit - sink.size))
            if keep and sink.fh is not None:
                sink.fh.write(chunk[:keep])
                touched.add(ident)
            sink.size += keep
            sink.dropped += len(chunk) - keep
        for ident in touched:  # what arrived is in the file, for a reader who looks now
            fh = self.sinks[ident].fh
            if fh is not None:
                fh.flush()

    def _finish(self) -> None:
        for sink in self.sinks.values():
            if sink.fh is not None:
                sink.fh.close()
                sink.fh = None

    def wait_done(self, ident: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                sink = self.sinks.get(ident)
                if sink is not None and sink.done:
                    return True
                left = deadline - time.monotonic()
                if self.eof or left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))


WORKDIR_PREFIX = "harness-qemu-"


# A Unix socket's path holds 107 bytes (sun_path, with its NUL); the private directory adds
# "/harness-qemu-XXXXXXXX/" and the longest socket name "ctl.sock" (and the like) to the base.
SOCKET_PATH_MAX = 107
_WORKDIR_TAIL = len("/" + WORKDIR_PREFIX + "XXXXXXXX/" + "ctl.sock")


def workdir_base() -> Path:
    """Where a guest's private directory goes: ``$TMPDIR`` (tempfile's choice), or /tmp where that
    is too long for the sockets under it (a test runner's deep temporary directory made QEMU's
    serial sockets fail with "AF_UNIX path too long")."""
    base = Path(tempfile.gettempdir())
    return base if len(str(base)) + _WORKDIR_TAIL <= SOCKET_PATH_MAX else Path("/tmp")


def sweep_orphan_workdirs(tmp: Path | None = None) -> list[Path]:
    """Remove the private directories of harness processes that died without cleaning up (a
    SIGKILLed harness: its QEMU dies with it, its sockets and console log stay).  A directory is
    an orphan when the pid in its ``owner`` file is no longer a live process; directories of
    live harnesses, and anything without an owner file, are left alone."""
    removed = []
    for d in Path(tmp or workdir_base()).glob(WORKDIR_PREFIX + "*"):
        try:
            owner = int((d / "owner").read_text())
        except (OSError, ValueError):
            continue  # no owner file (yet): not ours to judge
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
        except PermissionError:
            pass  # alive, under another user
    return removed


#: QEMU's line when a signal it handles ends it (system/runstate.c, qemu_kill_report)
_TERMINATED = re.compile(r"qemu-system-\w+: terminating on signal (\d+)( from pid \d+)?")


def _signal_name(sig: int) -> str:
    try:
        return f" ({signal.Signals(sig).name})"
    except ValueError:
        return ""


def _file_name(guest_path: str) -> str:
    """The part of a program's output file name that comes from its guest path: the basename,
    with bytes other than letters, digits and ._+- as "_" (a program may be named anything; the
    host's file of its output need not carry a newline or a quote for it)."""
    return re.sub(r"[^A-Za-z0-9._+-]", "_", guest_path.rsplit("/", 1)[-1])[:64] or "_"


@dataclass(frozen=True)
class GuestProcess:
    id: int
    pid: int
    argv: tuple[str, ...]
    output: Path | None = None  # the host file that receives its stdout and stderr


class Machine:
    """One QEMU guest.  Use as a context manager; :meth:`close` is bounded and idempotent."""

    def __init__(self, config: MachineConfig, keep_workdir: bool = False):
        self.config = config
        sweep_orphan_workdirs()
        self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=workdir_base()))
        os.chmod(self.workdir, 0o700)
        (self.workdir / "owner").write_text(f"{os.getpid()}\n")
        self.keep_workdir = keep_workdir
        self.child: pexpect.spawn | None = None
        self.console: Console | None = None
        self.control: ControlChannel | None = None
        self.output: ProgramOutput | None = None
        self.output_dir = self.workdir / "output"  # outputs nobody asked a place for
        self.qmp = None
        self._nmi: HmpMonitor | None = None
        self.release = ""
        self.cpus = 0
        self._next_id = 0
        self._dump_offset = 0
        self.boot_seconds = 0.0

    @property
    def gdb_socket(self) -> Path:
        return self.workdir / "gdb.sock"

    @property
    def qmp_socket(self) -> Path:
        return self.workdir / "qmp.sock"

    @property
    def pid(self) -> int | None:
        return self.child.pid if self.child else None

    def start(self) -> Machine:
        cmd = self.config.command(self.workdir)
        (self.workdir / "cmdline").write_text(shlex.join(cmd) + "\n")
        start = time.monotonic()
        try:
            self.child = pexpect.spawn(cmd[0], cmd[1:], echo=False, preexec_fn=die_with_parent,
                                       env={**os.environ, "TERM": "dumb"})
        except pexpect.ExceptionPexpect as exc:
            raise QemuStartError(f"cannot start {cmd[0]}: {exc}", []) from exc
        cond = threading.Condition()
        self.console = Console(self.child, self.workdir / "console.log", cond)
        try:
            self._connect_channels(cond)
            m = self.control.wait(r"ready (\S+) cpus=(\d+)", self.config.boot_timeout, "readiness")
            self.release, self.cpus = m.group(1), int(m.group(2))
            self.boot_seconds = time.monotonic() - start
            self._connect_qmp()
        except Exception as exc:
            # QEMU gone (a signal, an exit) is said as such, not as the wait it broke ("QEMU
            # exited while waiting for readiness", or a refused QMP connection); anything else
            # goes on as it was raised.
            if isinstance(exc, QemuStartError) and " during boot" in str(exc):
                raise
            gone = self.ended_during_boot(exc)
            if gone is not None:
                raise QemuStartError(gone, self.console.tail()) from exc
            raise
        return self

    def ended_during_boot(self, exc: BaseException, stage: str = "before the guest was ready",
                          settle: float = 2.0) -> str | None:
        """After ``exc`` in a boot, one line saying that QEMU ended and how ("QEMU was killed by
        signal 9 (SIGKILL) during boot, before the guest was ready"), or None while QEMU runs or
        when the guest kernel panicked (``exc`` says that itself).  The sockets close a moment
        before the process is reaped: up to ``settle`` seconds for the exit to show."""
        if isinstance(exc, GuestPanic) or self.child is None:
            return None
        if not isinstance(exc, GuestTimeout):  # a connection that died, not a silence
            deadline = time.monotonic() + settle
            while self.child.isalive() and time.monotonic() < deadline:
                time.sleep(0.05)
        cause = self.exit_cause()
        if cause is None:
            return None
        said = f"QEMU {cause} during boot, {stage}"
        if cause.startswith("exited with status") and self.child.exitstatus:
            # QEMU refused to run: its error is in the console's tail, its command line says what it got
            return f"{said}: {(self.workdir / 'cmdline').read_text().strip()}"
        return said

    def _connect_channels(self, cond: threading.Condition) -> None:
        """Connect to the control and output sockets as soon as QEMU creates them (before the
        guest can write to them: a socket chardev drops what it gets while unconnected)."""
        deadline = time.monotonic() + 10
        ctl, out = self.workdir / "ctl.sock", self.workdir / "out.sock"
        while not (ctl.exists() and out.exists()):
            if not self.child.isalive():
                raise QemuStartError(f"QEMU {self.exit_cause()} during boot, before its sockets appeared: "
                                     f"{(self.workdir / 'cmdline').read_text().strip()}", self.console.tail())
            if time.monotonic() > deadline:
                raise QemuStartError("QEMU's control and output sockets never appeared", self.console.tail())
            time.sleep(0.01)

        def connect(make):
            # QEMU's socket file appears at its bind(), before its listen(): a connect between the
            # two is refused (seen with three guests booting at once on 2 cores).  Retried.
            while True:
                try:
                    return make()
                except ConnectionRefusedError:
                    if time.monotonic() > deadline or not self.child.isalive():
                        raise
                    time.sleep(0.01)

        try:
            self.control = connect(lambda: ControlChannel(ctl, cond, self.console))
            self.output = connect(lambda: ProgramOutput(out, cond, self.output_dir, OUTPUT_LIMIT))
        except OSError as exc:
            raise QemuStartError(f"cannot connect to QEMU's serial sockets: {exc}", self.console.tail()) from exc

    def _connect_qmp(self) -> None:
        # Lazy for start-up time: qemu.qmp imports asyncio and ssl (~0.1 s of CPU), which only a
        # booted guest needs, not `harness --help`, `harness check` or `harness sframe`.
        from qemu.qmp.legacy import QEMUMonitorProtocol

        deadline = time.monotonic() + 10
        while not self.qmp_socket.exists():
            if time.monotonic() > deadline:
                raise QemuStartError("QMP socket never appeared", self.console.tail())
            time.sleep(0.05)
        self.qmp = QEMUMonitorProtocol(str(self.qmp_socket))
        self.qmp.settimeout(10)
        self.qmp.connect()
        # QEMU sends an event at every stop and resume; qemu.qmp's default listener queues each
        # one and keeps it in a history list for ever (its documented design), and nothing here
        # reads QMP events: the soak measured the harness growing by ~65 KB a request from them.
        # The legacy wrapper has no public handle on that listener, hence _qmp.
        self.qmp._qmp.events.event_filter = lambda event: False

    def __enter__(self) -> Machine:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- QMP --------------------------------------------------------------------------------
    def qmp_command(self, name: str, **args):
        if self.qmp is None:
            raise GuestError("QMP is not connected", self.console.tail() if self.console else [])
        try:
            return self.qmp.cmd(name, **args)
        except Exception as exc:  # qemu.qmp raises several types; name the command
            raise GuestDied(f"QMP {name} failed: {exc}", self.console.tail()) from exc

    def vm_running(self) -> bool:
        """False while the VM is stopped (by the gdb stub at a breakpoint, say): QMP query-status."""
        return bool(self.qmp_command("query-status").get("running"))

    def inject_nmi(self) -> None:
        """An NMI to vCPU 0, through the human monitor (:class:`HmpMonitor`) where it is there,
        without waiting for its answer (which comes no sooner than the NMI: the harness walks
        and checks the last delivery meanwhile)."""
        if self._nmi is None and (self.workdir / "nmi.sock").exists():
            self._nmi = HmpMonitor(self.workdir / "nmi.sock")
        if self._nmi is None:
            self.qmp_command("inject-nmi")
            return
        try:
            # The last NMI's answer (long in by now) is read first; a backlog means QEMU's
            # main loop stopped answering: wait for it, within the socket's timeout.
            self._nmi.drain(block=len(self._nmi.unanswered) >= 4)
            self._nmi.send("nmi")
        except GuestError as exc:
            raise GuestDied(f"NMI injection failed: {exc}", self.console.tail() if self.console else []) from exc

    # -- the /init line protocol ------------------------------------------------------------
    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def run(self, argv: list[str], timeout: float = 30.0, output: Path | None = None) -> GuestProcess:
        """Start ``argv`` in the guest and return once it has a pid (it keeps running).  Its
        stdout and stderr go to ``output`` on the host (created now, empty; by default
        ``OUTPUT_DIR/ID-NAME.out`` in the machine's private directory).  The program gets
        ``argv`` word for word, whatever bytes a word holds (channels.encode_word); a word with
        a NUL byte or a line too long for the guest's tty is a ControlLineError, before
        anything is sent."""
        i = self._id()
        line = control_line("run", i, words=argv)
        path = Path(output) if output is not None else self.output_dir / f"{i}-{_file_name(argv[0])}.out"
        self.output.expect(i, path)
        self.control.send(line)
        m = self.control.wait(rf"pid {i} (\d+)", timeout, f"pid of {argv[0]}")
        return GuestProcess(i, int(m.group(1)), tuple(argv), path)

    def wait_exit(self, proc: GuestProcess, timeout: float = 60.0) -> int:
        m = self.control.wait(rf"exit {proc.id} (\d+)", timeout, f"exit of {proc.argv[0]}")
        return int(m.group(1))

    def exit_status(self, proc: GuestProcess) -> int | None:
        """The exit status /init reported for ``proc``, or None while it runs (never waits)."""
        m = self.control.find(rf"exit {proc.id} (\d+)")
        return int(m.group(1)) if m else None

    def output_done(self, proc: GuestProcess | int, timeout: float = 5.0) -> bool:
        """Wait (bounded) until all of ``proc``'s output is in its file: /init's forwarder saw
        the end of it (the program and every process that inherited its stdout are gone)."""
        ident = proc.id if isinstance(proc, GuestProcess) else proc
        return self.output.wait_done(ident, timeout)

    def output_of(self, proc: GuestProcess | int) -> OutputSink | None:
        """Where ``proc``'s output went and how much of it (bytes kept, dropped past the limit)."""
        ident = proc.id if isinstance(proc, GuestProcess) else proc
        with self.output._cond:
            return self.output.sinks.get(ident)

    def wake(self) -> None:
        """An empty line on the control channel: wakes /init's read loop (a task that returns to
        user space), and /init ignores it."""
        self.control.send("")

    def shell_start(self, command: str) -> int:
        """Send a shell command to /init and return its id at once, without waiting for its
        ``done`` line (for a guest that stops at breakpoints meanwhile: the caller keeps serving
        them).  Its output goes to the output channel as the command's frames."""
        i = self._id()
        line = control_line("sh", i, words=[command])
        self.output.expect(i, None)
        self.control.send(line)
        return i

    def run_later(self, argv: list[str], delay: float, output: Path | None = None) -> GuestProcess:
        """Start ``argv`` after ``delay`` seconds of guest time and return at once, pid unknown
        (0): for a caller that sets breakpoints first and then serves them while the program runs.
        Its exit is reported as :meth:`run`'s (:meth:`exit_status`, :meth:`wait_exit`), its output
        framed as :meth:`run`'s; the pid of the subshell that waits for it is in ``/tmp/.later.ID``."""
        i = self._id()
        line = control_line("later", i, f"{delay:g}", words=argv)
        path = Path(output) if output is not None else self.output_dir / f"{i}-{_file_name(argv[0])}.out"
        self.output.expect(i, path)
        self.control.send(line)
        return GuestProcess(i, 0, tuple(argv), path)

    def shell(self, command: str, timeout: float = 60.0) -> int:
        """Run a shell command in the guest; its output goes to ``OUTPUT_DIR/ID.out`` (only if it
        prints anything).  Returns its exit status."""
        return self._shell(command, timeout)[0]

    def shell_output(self, command: str, timeout: float = 60.0, output_timeout: float = 10.0) -> tuple[int, bytes]:
        """(exit status, stdout and stderr) of a shell command in the guest."""
        status, i = self._shell(command, timeout)
        self.output.wait_done(i, output_timeout)
        sink = self.output_of(i)
        data = sink.path.read_bytes() if sink is not None and sink.path is not None and sink.path.exists() else b""
        return status, data

    def _shell(self, command: str, timeout: float) -> tuple[int, int]:
        i = self._id()
        line = control_line("sh", i, words=[command])
        self.output.expect(i, None)
        self.control.send(line)
        return int(self.control.wait(rf"done {i} (\d+)", timeout, f"shell {command!r}").group(1)), i

    def upload(self, data: bytes, path: str, mode: str = "755", timeout: float = 300.0) -> None:
        """Write ``data`` to ``path`` in the guest: /init's ``recv`` command reads the base64
        text sent on the control channel right after it (76-character lines: the guest's tty
        is canonical, each read() returns one line, so ``head -c`` takes exactly the text)."""
        text = base64.encodebytes(data)
        i = self._id()
        self.control.send(control_line("recv", i, str(len(text)), mode, words=[path]))
        for k in range(0, len(text), 65536):
            self.control.send_bytes(text[k:k + 65536])
        status = int(self.control.wait(rf"done {i} (\d+)", timeout, f"upload of {path}").group(1))
        if status != 0:
            raise GuestError(f"upload of {path} failed in the guest (status {status})", self.console.tail())

    def dump(self, path: str, timeout: float = 120.0, packed: bool = False) -> bytes:
        """Copy a guest file (e.g. /proc/kallsyms) to the host through the second serial port.

        ``timeout`` bounds a stall, not the whole copy: the wait goes on while bytes keep
        arriving (a 16550 emulated by TCG moves ~100 KB/s on a quiet machine, 2.5 times less
        on PREEMPT_RT, where the 8250's handler is a thread, and less again on a loaded host).
        ``packed``: gzip -1 in the guest first (busybox), four times fewer bytes on the port
        for text such as /proc/kallsyms."""
        source = path
        if packed:
            source = f"/tmp/.dump-{self._next_id}.gz"
            status = self.shell(f"gzip -1 -c {shlex.quote(path)} > {source}", timeout=timeout)
            if status != 0:
                raise GuestError(f"gzip of {path} failed in the guest (status {status})", self.console.tail())
        i = self._id()
        self.control.send(control_line("dump", i, words=[source]))
        f = self.workdir / "dump.bin"
        arrived, moved = f.stat().st_size, time.monotonic()
        size = None
        while size is None or arrived < self._dump_offset + size:
            if size is None:
                try:  # the reply, or a panic or QEMU's exit, whichever comes first
                    size = int(self.control.wait(rf"dumped {i} (\d+)", 0.5, f"dump of {path}").group(1))
                except GuestTimeout:
                    pass
            else:
                time.sleep(0.02)
            now = f.stat().st_size
            if now != arrived:
                arrived, moved = now, time.monotonic()
            elif time.monotonic() - moved > timeout:
                raise GuestTimeout(f"dump of {path}: no byte for {timeout:.0f}s after "
                                   f"{arrived - self._dump_offset}{'' if size is None else f'/{size}'} bytes",
                                   self.console.tail())
        with open(f, "rb") as fh:
            fh.seek(self._dump_offset)
            data = fh.read(size)
        self._dump_offset += size
        if packed:
            self.shell(f"rm -f {source}", timeout=timeout)
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as exc:
                raise GuestError(f"the packed dump of {path} came back corrupt: {exc}", self.console.tail()) from exc
        return data

    # -- shutdown ---------------------------------------------------------------------------
    def alive(self) -> bool:
        return bool(self.child and self.child.isalive())

    def exit_cause(self) -> str | None:
        """How QEMU ended, once it has ("was killed by signal 9 (SIGKILL)", "exited with status
        1"), else None (it runs, or never started)."""
        if self.child is None or self.child.isalive():
            return None
        sig = self.child.signalstatus
        if sig:
            return f"was killed by signal {sig}{_signal_name(sig)}"
        # SIGTERM, SIGINT and SIGHUP are QEMU's own to handle: it shuts down and exits 0 after
        # printing "qemu-system-x86_64: terminating on signal 15 from pid N (COMM)" (its stderr
        # is the console's pty: read to its end first, bounded).
        if self.console is not None:
            self.console.wait_eof(1.0)
            for line in reversed(self.console.tail(20)):
                m = _TERMINATED.search(line)
                if m:
                    n = int(m.group(1))
                    return (f"was terminated by signal {n}{_signal_name(n)}{m.group(2) or ''} "
                            f"(QEMU's own handler: exit status {self.child.exitstatus})")
        return f"exited with status {self.child.exitstatus}"

    def process_state(self) -> str | None:
        """QEMU's state as the host's scheduler sees it (/proc/PID/stat: R running, S asleep,
        T stopped by a signal, t stopped by a tracer, Z a zombie), or None when it is gone."""
        if self.child is None or not self.child.isalive():
            return None
        try:
            stat = Path(f"/proc/{self.child.pid}/stat").read_text()
        except OSError:
            return None
        return stat[stat.rindex(")") + 2:].split(" ", 1)[0]  # after "(comm)", which may hold spaces

    def close(self, timeout: float = 5.0) -> None:
        """QMP quit, a bounded wait, then SIGTERM and SIGKILL; always reaps the process."""
        if self._nmi is not None:
            self._nmi.close()
            self._nmi = None
        if self.child is not None:
            quit_sent = False
            # A second Ctrl-C (or a QEMU stopped by SIGSTOP, which answers nothing): no polite
            # quit to wait for; SIGKILL ends even a stopped process.
            hurry = signals.STATE.hurry or self.process_state() in ("T", "t")
            if self.child.isalive() and self.qmp is not None and not hurry:
                try:
                    self.qmp.settimeout(2)
                    self.qmp.cmd("quit")
                    quit_sent = True
                except Exception:
                    pass
            # Without a quit nothing ends QEMU but the signals below (a guest that never became
            # ready: 5 s of test_machine_failures' 13 s were this wait).
            deadline = time.monotonic() + (timeout if quit_sent else 0.0)
            while self.child.isalive() and time.monotonic() < deadline:
                time.sleep(0.05)
            for sig in (signal.SIGKILL,) if hurry else (signal.SIGTERM, signal.SIGKILL):
                if not self.child.isalive():
                    break
                try:
                    os.kill(self.child.pid, sig)
                except ProcessLookupError:
                    break
                end = time.monotonic() + 2
                while self.child.isalive() and time.monotonic() < end:
                    time.sleep(0.05)
            # QEMU is gone (its side of the pty closed): the console thread reaches the end of
            # the stream; it ends before the descriptor it reads is closed (and its number reused)
            if self.console is not None:
                self.console._thread.join(timeout=2)
            try:
                self.child.close(force=True)
            except Exception:
                pass
        if self.qmp is not None:
            try:
                self.qmp.close()
            except Exception:
                pass
            self.qmp = None
        for channel in (self.control, self.output):
            if channel is not None:
                channel.close()
        if self.console is not None:
            self.console._thread.join(timeout=2)
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
