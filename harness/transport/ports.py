"""The QEMU process's channels, host side: the serial console, the /init control channel, the
program output channel and the human monitor that injects the sampling loop's NMIs.

:mod:`harness.transport.qemu` starts the process and connects these (its module docstring says
what each serial port carries and what is defended); :mod:`harness.transport.channels` holds
their pure codecs (the output framing, the control line, the panic headers).  Apart from the
process so that the sampling loop's hot channel (the NMI monitor) and the program channels can
be read, and changed, without the process's start-up and shutdown around them.
"""

from __future__ import annotations

import collections
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pexpect

from .channels import END, FrameDecoder, panic_message
from .errors import GuestDied, GuestError, GuestPanic, GuestTimeout
from .fdio import nonblocking, read_now, wait_readable, write_all

__all__ = ["PROTOCOL_PREFIX", "Console", "ControlChannel", "HmpMonitor", "OutputSink", "ProgramOutput"]

#: the prefix of /init's protocol lines on the control channel
PROTOCOL_PREFIX = "@@H "


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
