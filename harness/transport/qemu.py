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

The host side of each channel (the console's reader, the control and output channels, the NMI
monitor) is in :mod:`harness.transport.ports`; this module starts the process, connects them
and shuts it down.

Every socket is a Unix socket in a private temporary directory (no TCP listener).  QEMU runs
with ``PR_SET_PDEATHSIG(SIGKILL)`` so it dies with the harness even when the harness is killed.
Waits are bounded and end early on a kernel panic or when QEMU exits.
"""

from __future__ import annotations

import base64
import ctypes
import gzip
import os
import re
import shlex
import shutil
import signal
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
from .channels import PANIC_RE, control_line  # noqa: F401 (PANIC_RE: re-exported)
from .errors import GuestDied, GuestError, GuestPanic, GuestTimeout, QemuStartError
from .fdio import wait_readable
from .ports import PROTOCOL_PREFIX, Console, ControlChannel, HmpMonitor, OutputSink, ProgramOutput  # noqa: F401 (re-exported)

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
