"""A direct GDB Remote Serial Protocol client for QEMU's gdb stub, over its Unix socket.

Why our own client: GDB/MI costs 1-6 ms per read where a raw ``m`` packet costs 0.1-0.3 ms
(REFERENCE.md section 6), and an automated run makes thousands of stops.  The packet layer is a
pure codec (:func:`encode_packet`, :class:`PacketReader`) tested without QEMU; this module's
client adds the socket and QEMU's quirks:

* an unsolicited stop reply arrives on connect (7.2; 11.x sends none): stop replies that no
  command waits for are discarded;
* register writes (``P``) answer empty until the target description has been read, so
  ``qXfer:features:read:target.xml`` is read first, and it gives the register layout anyway;
* one ``m`` packet reads at most half the stub's ``PacketSize`` (qSupported): 2048 bytes on 7.2
  (``PacketSize=1000``), a whole page on 11.x (``PacketSize=20020``);
* 11.x answers ``?`` with ``T05core:NN;`` (no ``thread:``), NN being the vCPU's thread id; stop
  replies to ``vCont`` still carry ``thread:NN``;
* neither 7.2 nor 11.x accepts ``QStartNoAckMode`` (both answer it empty): acks stay on, and
  are batched both ways (:meth:`RspTarget._write_packets` says why that is safe);
* ``Qqemu.PhyMemMode:1`` switches ``m`` to physical addresses (page walks under PTI).

Protocol reference: GDB manual, appendix "GDB Remote Serial Protocol".
"""

from __future__ import annotations

import binascii
import collections
import functools
import re
import socket
import struct
import time
import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass
from pathlib import Path

from .errors import TargetDied, TargetError, TargetTimeout
from .fdio import READ_SIZE, nonblocking, read_now, wait_readable, write_all
from .target import SIGTRAP, ReadResult, Stop, Target

#: bytes per ``m`` packet when the stub names no PacketSize (QEMU 7.2's limit)
MAX_M_PACKET = 2048
PAGE_SIZE = 4096
PIPELINE_MAX = 256  # packets written at once before their answers are read


def checksum(data: bytes) -> int:
    """The packet checksum: the sum of the bytes, mod 256.  Long bodies (a memory read's hex,
    8 KiB for a page) by zlib's adler32 over pieces: its low half is 1 + the piece's byte sum
    exactly while that sum stays below its modulus 65521, and C does the adding, 4x faster than
    ``sum()`` on a page (27 -> 7 us; both ways twice a stop).  A piece is 256 bytes (256 * 255
    stays below 65521), or 512 where every byte is ASCII (512 * 127 does), as the hex of every
    memory read and register answer is: half the calls, and one for an ASCII body of 16 to 512
    bytes (a 168-byte read's 336 hex digits: 3.5 -> 0.5 us).  The answers of a trace in bench
    deferred (29 packets, 28 KB): 33-41 -> 26-28 us of checksums (docs/benchmarks.md)."""
    n = len(data)
    if n < 16:
        return sum(data) & 0xFF
    adler = zlib.adler32
    step = 512 if data.isascii() else 256
    if n <= step:
        return ((adler(data) & 0xFFFF) - 1) & 0xFF
    view = memoryview(data)
    total = 0
    for i in range(0, n, step):
        total += adler(view[i:i + step]) & 0xFFFF
    return (total - (n + step - 1) // step) & 0xFF


_SPECIAL = re.compile(rb"[$#}*]")


def escape(data: bytes) -> bytes:
    """Escape ``$ # } *`` as ``}`` followed by the byte XOR 0x20."""
    if not _SPECIAL.search(data):
        return data  # every packet the harness sends: a byte loop cost ~3 us a packet
    out = bytearray()
    for b in data:
        if b in b"$#}*":
            out += bytes((0x7D, b ^ 0x20))
        else:
            out.append(b)
    return bytes(out)


@functools.lru_cache(maxsize=4096)
def encode_packet(data: bytes) -> bytes:
    """``$data#cs``, escaped.  Cached: a stop's packets are mostly those of the stops before
    it (the same guessed reads, breakpoints and continue), 35 a trace."""
    body = escape(data)
    return b"$" + body + b"#" + b"%02x" % checksum(body)


def unhex(reply: bytes, what: str) -> bytes:
    """The bytes of a hex answer.  binascii's, not ``bytes.fromhex(reply.decode())``: no str made
    first (a trace's 28 KB of answers, 18-19 -> 11 us), and nothing but hex digits taken (fromhex
    passes over spaces between bytes).  An answer that is not hex is a TargetError naming it."""
    try:
        return binascii.unhexlify(reply)
    except binascii.Error:
        raise TargetError(f"{what} answered {reply[:40]!r}: not hex") from None


@functools.lru_cache(maxsize=4096)
def packet_kind(data: bytes) -> str:
    """The command of a packet, for counting round trips: ``m``, ``g``, ``Z``, ``vCont;c``..."""
    if data.startswith(b"vCont;"):
        return data[:7].decode(errors="replace")
    if data.startswith(b"q"):
        return data.split(b":", 1)[0].decode(errors="replace")
    return data[:1].decode(errors="replace")


def decode_body(body: bytes) -> bytes:
    """Undo escaping and run-length encoding (``X*n``: repeat X ``ord(n) - 29`` more times)."""
    if b"}" not in body and b"*" not in body:
        return body  # the common case, and the hot path of every memory read
    out = bytearray()
    i = 0
    while i < len(body):
        b = body[i]
        if b == 0x7D and i + 1 < len(body):
            out.append(body[i + 1] ^ 0x20)
            i += 2
        elif b == 0x2A and out and i + 1 < len(body):
            out += bytes((out[-1],)) * (body[i + 1] - 29)
            i += 2
        else:
            out.append(b)
            i += 1
    return bytes(out)


class PacketReader:
    """Splits a byte stream into packets (and naks); verifies checksums; counts acks.

    The bytes taken stay in the buffer, behind :attr:`pos`, until the next :meth:`feed`: a
    stop's 20-odd answers arrive in a few reads, and cutting each off the front of the buffer
    moved the rest of it every time."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.pos = 0  # the first byte not taken yet
        self.acks = 0  # "+" passed over

    def feed(self, data: bytes) -> None:
        if self.pos:
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += data

    def next(self) -> tuple[str, bytes] | None:
        """Return ("nak"|"packet"|"bad", payload) or None when more bytes are needed.  The acks
        of our packets (one each, nothing waits for them: RspTarget._write_packets) are passed
        over and counted in :attr:`acks`, half of a stop's items."""
        buf, i = self.buf, self.pos
        n = len(buf)
        while i < n:
            c = buf[i]
            if c == 0x24:  # '$'
                break
            i += 1
            if c == 0x2B:  # '+'
                self.acks += 1
            elif c == 0x2D:  # '-'
                self.pos = i
                return ("nak", b"")
            # anything else: noise between packets (e.g. a stray interrupt echo)
        self.pos = i
        if i == n:
            return None
        end = buf.find(b"#", i)
        if end < 0 or n < end + 3:
            return None
        body = bytes(buf[i + 1:end])
        want = bytes(buf[end + 1:end + 3])
        self.pos = end + 3
        try:
            ok = int(want, 16) == checksum(body)
        except ValueError:
            ok = False
        return ("packet", decode_body(body)) if ok else ("bad", body)


@dataclass(frozen=True)
class RegDesc:
    name: str
    regnum: int
    bits: int
    offset: int  # byte offset in the 'g' reply


def parse_target_xml(fetch, annex: str = "target.xml") -> list[RegDesc]:
    """Registers in target-description order, following ``xi:include`` (fetch(annex) -> str).

    A description that is not well-formed XML, a ``reg`` without a numeric ``bitsize`` (or with a
    non-numeric ``regnum``), an include without ``href`` or one that includes itself again raise
    :class:`TargetError` naming the annex."""
    regs: list[RegDesc] = []
    state = {"num": 0, "off": 0}
    active: list[str] = []

    def number(el, attr: str, name: str, default: int | None = None) -> int:
        raw = el.get(attr)
        if raw is None and default is not None:
            return default
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise TargetError(f"target description {name}: reg {el.get('name')!r} has {attr}={raw!r}, "
                              f"not a decimal number") from None
        if value < 0 or (attr == "bitsize" and value == 0):
            raise TargetError(f"target description {name}: reg {el.get('name')!r} has {attr}={value}")
        return value

    def walk(name: str) -> None:
        if name in active or len(active) >= 16:
            raise TargetError(f"target description {name}: xi:include loop ({' -> '.join(active + [name])})")
        active.append(name)
        # QEMU's description uses the xi: prefix without declaring its namespace.
        text = re.sub(r"<(/?)xi:", r"<\1", fetch(name))
        text = re.sub(r"<!DOCTYPE[^>]*>", "", text)
        try:
            root = ET.fromstring(text)
        except ET.ParseError as exc:
            raise TargetError(f"target description {name} is not well-formed XML: {exc}") from None
        for el in root.iter():
            tag = el.tag.split("}")[-1] if isinstance(el.tag, str) else ""
            if tag == "include":
                href = el.get("href")
                if not href:
                    raise TargetError(f"target description {name}: xi:include without href")
                walk(href)
            elif tag == "reg":
                num = number(el, "regnum", name, state["num"])
                bits = number(el, "bitsize", name)
                regs.append(RegDesc(el.get("name") or f"reg{num}", num, bits, state["off"]))
                state["num"] = num + 1
                state["off"] += bits // 8
        active.pop()

    walk(annex)
    return regs


_STOP_RE = re.compile(rb"^[TS]([0-9a-fA-F]{2})(.*)$", re.S)


def parse_qsupported(reply: bytes) -> dict[str, str | bool]:
    """``PacketSize=1000;qXfer:features:read+;foo-`` -> {"PacketSize": "1000", "qXfer:...": True, "foo": False}."""
    out: dict[str, str | bool] = {}
    for item in reply.decode(errors="replace").split(";"):
        if "=" in item:
            k, v = item.split("=", 1)
            out[k] = v
        elif item.endswith(("+", "-")):
            out[item[:-1]] = item.endswith("+")
        elif item:
            out[item] = True
    return out


def max_read(features: dict[str, str | bool]) -> int:
    """Bytes one ``m`` packet may ask for: QEMU answers E22 past half its PacketSize (the reply
    is hex); the harness never reads more than a page at a time."""
    try:
        size = int(str(features.get("PacketSize", "")), 16)
    except ValueError:
        return MAX_M_PACKET
    return max(1, min(PAGE_SIZE, size // 2))


def parse_stop_reply(reply: bytes) -> tuple[int, str | None] | None:
    """(signal, thread id or None) of a ``T``/``S`` stop reply, or None when it is none.  The
    thread is ``thread:`` or, where only that is given (QEMU 11.x's answer to ``?``), ``core:``:
    QEMU numbers both the same way (vCPU index + 1, in hex)."""
    m = _STOP_RE.match(reply)
    if not m:
        return None
    fields = {}
    for part in m.group(2).split(b";"):
        if b":" in part:
            k, v = part.split(b":", 1)
            fields[k.decode(errors="replace")] = v.decode(errors="replace")
    return int(m.group(1), 16), fields.get("thread", fields.get("core"))


class RspTarget(Target):
    def __init__(self, socket_path: str | Path, timeout: float = 5.0):
        super().__init__()
        self.timeout = timeout
        self.path = str(socket_path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(self.path)
        except OSError as exc:
            raise TargetDied(f"cannot connect to the gdb stub at {self.path}: {exc}") from exc
        # The hot path reads and writes the descriptor itself (harness/transport/fdio.py says why)
        self._fd = nonblocking(self.sock)
        self.reader = PacketReader()
        self.ack_mode = True
        self.phys_mode = False
        self.running = False
        self._regs_cache: dict[str, int] | None = None
        self._thread_ids: list[str] = []
        self._cpu_thread: dict[int, str] = {}
        self.packets = 0
        #: packets sent by kind ("m", "g", "vCont;c", "Z", ...): round trips, for benchmarks
        self.sent: collections.Counter[str] = collections.Counter()
        #: exchanges that wait for the stub: a command and its answer, a pipelined batch of
        #: reads, a continue or step and its stop (what a stop's cost is counted in)
        self.round_trips = 0
        self.features: dict[str, str | bool] = {}
        self.max_read = MAX_M_PACKET
        #: commands answered only OK (Z, z, P, Hg, Qqemu.PhyMemMode) not written yet: they go
        #: out ahead of the next packet written (see :meth:`_ok`)
        self._lazy: list[bytes] = []
        #: lazy commands written whose OK has not been read yet, oldest first
        self._awaiting: collections.deque[bytes] = collections.deque()
        #: a packet :meth:`stop_arrived` read off the socket before anyone asked for it
        self._stashed: collections.deque[bytes] = collections.deque()
        #: packets received and not acked yet (ack mode): acked with our next write
        self._acks = 0
        #: the first lazy command the stub refused, raised once its batch's answers are read
        self._refused: TargetError | None = None
        #: (pc, breakpoints to arm) for the next stop: :meth:`plan_continue`
        self._plan: tuple[int, list[int]] | None = None
        #: length of a 'g' answer -> (struct, register names) (:meth:`_parse_g`)
        self._g_layout: dict[int, tuple[struct.Struct, list[str]]] = {}
        #: time.monotonic() of the last bytes from the stub (a timeout says how long it has been silent)
        self.last_heard = time.monotonic()
        self._handshake()

    # -- packet I/O ----------------------------------------------------------------------------
    def _recv_some(self, deadline: float) -> None:
        """Wait (until ``deadline``) for bytes from the stub and take them."""
        if not wait_readable(self._fd, deadline - time.monotonic()):
            raise TargetTimeout(f"no reply from the gdb stub (nothing from it for "
                                f"{time.monotonic() - self.last_heard:.0f}s)")
        self._read_now()

    def _read_now(self) -> int:
        """Take what the stub has sent, without waiting: the bytes taken, 0 when nothing was there."""
        try:
            data = read_now(self._fd)
        except OSError as exc:
            raise TargetDied(f"gdb stub connection failed: {exc}") from exc
        if data is None:
            return 0
        if not data:
            raise TargetDied("the gdb stub closed the connection (QEMU gone?)")
        self.last_heard = time.monotonic()
        self.reader.feed(data)
        return len(data)

    def _take(self) -> bytes | None:
        """The next answer already received, or None when more bytes are needed.  The OKs of
        lazy commands (:meth:`_ok`) are checked and consumed on the way; acks owed to the stub
        are counted, to go out with our next write (:meth:`_write_packets`)."""
        while True:
            if self._stashed:
                return self._stashed.popleft()
            item = self.reader.next()
            if item is None:
                return None
            kind, payload = item
            if kind == "nak":
                # Only a corrupted write is naked; on a local socket that is a bug, and
                # resending blind could reorder a pipelined batch: say it instead.
                raise TargetError("the gdb stub rejected a packet we wrote (nak)")
            if kind == "bad":
                if self.ack_mode and not self.running:
                    self._write(b"-")  # QEMU sends that answer again
                continue
            if kind != "packet":
                continue  # the acks of what we wrote: nothing waits for them (_write_packets)
            if self.ack_mode:
                self._acks += 1
            if self._awaiting:
                sent = self._awaiting.popleft()
                if payload != b"OK" and self._refused is None:
                    self._refused = TargetError(
                        f"{sent.decode(errors='replace')!r}: the gdb stub answered {payload!r}")
                continue
            return payload

    def _raise_refused(self) -> None:
        """Raise the refusal of a lazy command, once the answers written with it are read (the
        connection stays in step for the next exchange)."""
        if self._refused is not None:
            exc, self._refused = self._refused, None
            raise exc

    def _read_packet(self, deadline: float) -> bytes:
        while True:
            payload = self._take()
            if payload is not None:
                return payload
            self._recv_some(deadline)

    def _write(self, raw: bytes) -> None:
        """Every write to the stub: a connection that went away (QEMU died, the guest panicked
        and QEMU exited) is TargetDied, never a bare BrokenPipeError."""
        try:
            write_all(self._fd, raw, self.timeout)
        except TimeoutError:
            raise TargetTimeout("the gdb stub takes no more bytes (QEMU hung?)") from None
        except OSError as exc:
            raise TargetDied(f"gdb stub connection failed: {exc}") from exc

    def _write_packets(self, cmds: list[bytes], kind: str | None = None) -> None:
        """Write the acks we owe, the lazy commands, then ``cmds``, in one write.

        Acks both ways are batched.  QEMU's system-mode stub answers each packet in order and
        never waits for our ack (gdbstub's put_packet), so ours go out with our next write,
        always while the guest is stopped: a stray ``+`` that reaches a *running* guest's stub
        once its last answer is acked stops the VM like any other byte (gdb_read_byte).  And
        nothing here waits for the stub's acks: waiting for the ack of a continue cost a
        wake-up of QEMU's main loop before the harness could go on; a nak (a corrupted write)
        is raised by :meth:`_take` instead of resent."""
        lazy, self._lazy = self._lazy, []
        for c in lazy:
            self.sent[packet_kind(c)] += 1
        self._awaiting.extend(lazy)
        for c in cmds:
            self.sent[kind or packet_kind(c)] += 1
        self.packets += len(lazy) + len(cmds)
        acks, self._acks = b"+" * self._acks, 0
        self._write(acks + b"".join(encode_packet(c) for c in (*lazy, *cmds)))

    def command(self, data: str | bytes, timeout: float | None = None) -> bytes:
        """Send one packet and return its reply, dropping stop replies nobody asked for."""
        if self.running:
            raise TargetError("the guest is running: interrupt it before issuing commands")
        raw = data.encode() if isinstance(data, str) else data
        deadline = time.monotonic() + (timeout or self.timeout)
        self.round_trips += 1
        self._write_packets([raw])
        while True:
            reply = self._read_packet(deadline)
            if _STOP_RE.match(reply) and not raw.startswith((b"?", b"vCont", b"c", b"s")):
                continue
            self._raise_refused()
            return reply

    def _ok(self, data: str) -> None:
        """A command whose only answer is OK, written with the next packet (a read, a batch, a
        continue): QEMU takes packets in order, so what follows sees its effect, and its OK
        is checked when the answers are read (a refusal is a TargetError naming it, then).
        At a breakpoint stop that makes the breakpoint changes and the RIP write over an
        endbr64 cost no round trip of their own."""
        if self.running:
            raise TargetError("the guest is running: interrupt it before issuing commands")
        self._lazy.append(data.encode())

    def flush(self) -> None:
        """Write the lazy commands now and read their OKs (one round trip if there are any)."""
        if self._lazy:
            self.round_trips += 1
            self._write_packets([])
        deadline = time.monotonic() + self.timeout
        while self._awaiting:
            payload = self._take()
            if payload is not None:
                self._stashed.append(payload)  # an answer past theirs: kept for its reader
            elif self._awaiting:
                self._recv_some(deadline)
        self._raise_refused()

    # -- set-up -------------------------------------------------------------------------------
    def _handshake(self) -> None:
        self.features = parse_qsupported(self.command("qSupported:xmlRegisters=i386;vContSupported+"))
        self.max_read = max_read(self.features)
        if self.command("QStartNoAckMode") == b"OK":
            self.ack_mode = False
        self.regs = parse_target_xml(self._xfer)
        self.regmap = {r.name: r for r in self.regs}
        missing = [n for n in self.CORE_REGS if n not in self.regmap]
        if missing:
            raise TargetError(f"target description lacks registers {missing}")
        self._refresh_threads()
        self.command("?")  # learn (and discard) the current stop state

    def _xfer(self, annex: str) -> str:
        out = b""
        while True:
            reply = self.command(f"qXfer:features:read:{annex}:{len(out):x},{0xFFB:x}")
            if not reply or reply[:1] not in b"lm":
                raise TargetError(f"qXfer of {annex} failed: {reply!r}")
            out += reply[1:]
            if reply[:1] == b"l":
                try:
                    return out.decode()
                except UnicodeDecodeError as exc:
                    raise TargetError(f"qXfer of {annex}: the description is not UTF-8 ({exc})") from None

    def _refresh_threads(self) -> None:
        ids: list[str] = []
        reply = self.command("qfThreadInfo")
        while reply.startswith(b"m"):
            ids += reply[1:].decode().split(",")
            reply = self.command("qsThreadInfo")
        self._thread_ids = ids
        self._cpu_thread = {i: t for i, t in enumerate(ids)}

    # -- Target primitives ----------------------------------------------------------------------
    def cpus(self) -> list[int]:
        return list(self._cpu_thread)

    def select_cpu(self, cpu: int) -> None:
        if cpu not in self._cpu_thread:
            raise TargetError(f"no vCPU {cpu} (have {self.cpus()})")
        if cpu != self.cpu or self._regs_cache is None:
            self._ok(f"Hg{self._cpu_thread[cpu]}")
            self.cpu = cpu
            self._regs_cache = None

    def read_registers(self) -> dict[str, int]:
        if self._regs_cache is None:
            self._regs_cache = self._parse_g(self.command("g"))
        return dict(self._regs_cache)

    def _parse_g(self, hexdata: bytes) -> dict[str, int]:
        if hexdata.startswith(b"E") and len(hexdata) == 3:
            raise TargetError(f"'g' failed: {hexdata!r}")
        raw = unhex(hexdata, "'g'")
        layout = self._g_layout.get(len(raw))
        if layout is None:
            # The registers of at most 64 bits that this answer's length holds, as one struct
            # (twice a stop: a loop over the ~70 registers of x86-64 was 20-30 us of each).
            fmt, names, at = ["<"], [], 0
            for r in sorted(self.regs, key=lambda r: r.offset):
                size = r.bits // 8
                if r.bits > 64 or r.bits % 8 or size not in (1, 2, 4, 8) or r.offset < at or r.offset + size > len(raw):
                    continue
                fmt.append(f"{r.offset - at}x" if r.offset > at else "")
                fmt.append({1: "B", 2: "H", 4: "I", 8: "Q"}[size])
                names.append(r.name)
                at = r.offset + size
            layout = self._g_layout[len(raw)] = (struct.Struct("".join(fmt)), names)
        st, names = layout
        return dict(zip(names, st.unpack_from(raw), strict=True))

    def _write_register_packet(self, name: str, value: int) -> str:
        r = self.regmap.get(name)
        if r is None:
            raise TargetError(f"no register {name!r}")
        return f"P{r.regnum:x}=" + value.to_bytes(r.bits // 8, "little").hex()

    def write_register(self, name: str, value: int) -> None:
        self._ok(self._write_register_packet(name, value))
        self._regs_cache = None

    @staticmethod
    def _breakpoint_packet(addr: int, insert: bool) -> str:
        return f"{'Z' if insert else 'z'}0,{addr:x},1"

    def _insert(self, addr: int) -> None:
        self._ok(self._breakpoint_packet(addr, True))

    def _remove(self, addr: int) -> None:
        self._ok(self._breakpoint_packet(addr, False))

    def _set_phys(self, on: bool) -> None:
        if on != self.phys_mode:
            self._ok(f"Qqemu.PhyMemMode:{int(on)}")
            self.phys_mode = on

    def _read_chunk(self, addr: int, size: int, physical: bool) -> bytes | None:
        self._set_phys(physical)
        out = bytearray()
        while size > 0:
            n = min(size, self.max_read)
            reply = self.command(f"m{addr:x},{n:x}")
            if reply.startswith(b"E") and len(reply) == 3 or len(reply) != 2 * n:
                return None
            out += unhex(reply, f"m{addr:x},{n:x}")
            addr += n
            size -= n
        return bytes(out)

    def _pipeline(self, cmds: list[bytes], kind: str | None, tail: list[bytes] = ()) -> list[bytes]:
        """Write every packet at once, then read the answers in order: QEMU's system-mode stub
        answers each packet as it completes and never waits for our ack (gdbstub's
        put_packet), so N commands cost about one round trip, not N.  ``tail``: commands
        answered only OK, written after ``cmds`` in the same write (their OKs are read later,
        as a lazy command's), the last of them maybe a continue (no answer until a stop)."""
        if self.running:
            raise TargetError("the guest is running: interrupt it before issuing commands")
        deadline = time.monotonic() + self.timeout
        # kind None: each packet counted by its own kind (a tail's always)
        self._write_packets([*cmds, *tail], None if tail else kind)
        self.round_trips += 1
        replies: list[bytes] = []
        while len(replies) < len(cmds):
            payload = self._read_packet(deadline)
            if _STOP_RE.match(payload):
                continue  # an unsolicited stop reply
            replies.append(payload)
        # QEMU answers in order: the tail's OKs come after the replies just read.
        self._awaiting.extend(c for c in tail if not c.startswith(b"vCont"))
        self._raise_refused()
        return replies

    def read_many(self, ranges: list[tuple[int, int]]) -> list[ReadResult]:
        """Every read's ``m`` packets (each within one page and one packet's limit) in one
        pipelined batch (:meth:`_pipeline`).  Each range stops at its first unreadable page, as
        :meth:`read_partial` says it."""
        return self._read_many(ranges)

    def _read_many(self, ranges: list[tuple[int, int]], first: bytes | None = None, tail: list[bytes] = ()):
        """:meth:`read_many`; with ``first``, that packet goes ahead of the reads in the first
        batch and its answer is returned too: ``(answer, results)``.  ``tail`` goes after the
        reads in the last batch (:meth:`_pipeline`)."""
        self._set_phys(False)
        pieces: list[tuple[int, int, int]] = []  # (range index, addr, size)
        whole = self.whole_reads
        for i, (addr, size) in enumerate(ranges):
            cur, end = addr, addr + size
            # A range in memory without holes (Target.whole_reads: a task_struct in the kernel's
            # direct map, which crossed a page at every stop) in one packet, not one a page.
            one = whole is not None and whole(addr, size)
            while cur < end:
                n = min(end - cur, self.max_read) if one else min(end - cur, PAGE_SIZE - cur % PAGE_SIZE, self.max_read)
                pieces.append((i, cur, n))
                cur += n
        # Pieces that overlap or touch within one page, one after the other, share one packet:
        # the per-CPU current task and top of stack, 8 bytes apart, are read with every stop's
        # registers (2 packets a trace fewer for the stub to answer and for us to take apart).
        # Within a page a read faults whole, so the shared packet says for each piece what its
        # own would have.
        spans: list[list[int]] = []  # [lo, hi) of each packet
        where: list[int] = []  # the packet of each piece
        for _, a, n in pieces:
            if spans:
                lo, hi = spans[-1]
                if (a - a % PAGE_SIZE == lo - lo % PAGE_SIZE and a <= hi and lo <= a + n
                        and max(hi, a + n) - min(lo, a) <= self.max_read):
                    spans[-1] = [min(lo, a), max(hi, a + n)]
                    where.append(len(spans) - 1)
                    continue
            spans.append([a, a + n])
            where.append(len(spans) - 1)
        cmds = [f"m{lo:x},{hi - lo:x}".encode() for lo, hi in spans]
        # Batches small enough that our requests always fit in the socket's buffer while the
        # stub's answers wait in ours (neither side can then block the other).
        batches = [[first] if first is not None else []]
        for c in cmds:
            if len(batches[-1]) == PIPELINE_MAX:
                batches.append([])
            batches[-1].append(c)
        replies = []
        for k, batch in enumerate(batches):
            if batch or (k == len(batches) - 1 and tail):
                replies += self._pipeline(batch, None if first is not None and k == 0 else "m",
                                          tail if k == len(batches) - 1 else [])
        head = replies.pop(0) if first is not None else None
        if len(spans) < len(pieces):
            replies = self._split(pieces, spans, where, replies)
        results = self._assemble(ranges, pieces, replies)
        return results if first is None else (head, results)

    @staticmethod
    def _split(pieces, spans, where, replies) -> list[bytes]:
        """Each piece's answer from that of the packet it shared (:meth:`_read_many`): its part
        of the hex, or, where the packet failed, an answer :meth:`_assemble` takes for a fault."""
        out = []
        for (_, a, n), k in zip(pieces, where, strict=True):
            (lo, hi), reply = spans[k], replies[k]
            if a == lo and a + n == hi:
                out.append(reply)
            elif reply.startswith(b"E") and len(reply) == 3 or len(reply) != 2 * (hi - lo):
                out.append(b"")  # never 2 * n hex digits: a fault
            else:
                out.append(reply[2 * (a - lo):2 * (a - lo + n)])
        return out

    @staticmethod
    def _assemble(ranges, pieces, replies) -> list[ReadResult]:
        out = [bytearray() for _ in ranges]
        fault: list[int | None] = [None] * len(ranges)
        for (i, a, n), reply in zip(pieces, replies, strict=True):
            if fault[i] is not None:
                continue
            if reply.startswith(b"E") and len(reply) == 3 or len(reply) != 2 * n:
                # As read_partial says it: readable up to the faulting page's start.
                start = ranges[i][0]
                fault[i] = max(start, a - a % PAGE_SIZE)
                del out[i][fault[i] - start:]
                continue
            out[i] += unhex(reply, f"m{a:x},{n:x}")
        return [ReadResult(bytes(o), f) for o, f in zip(out, fault, strict=True)]

    def _parse_stop(self, reply: bytes) -> Stop:
        parsed = parse_stop_reply(reply)
        if parsed is None:
            if reply.startswith((b"W", b"X")):
                raise TargetDied(f"the guest exited: {reply!r}")
            raise TargetError(f"unexpected stop reply {reply!r}")
        sig, thread = parsed
        cpu = self.cpu
        if thread is not None:
            if thread not in self._thread_ids:
                self._refresh_threads()
            cpu = self._thread_ids.index(thread) if thread in self._thread_ids else self.cpu
        self._regs_cache = None
        self.generation += 1  # a new stop: nothing read at the last one is this one's
        # QEMU's stub makes the stopping vCPU its current one for g/m/P (gdb_set_stop_cpu sets
        # both c_cpu and g_cpu), so no Hg packet is needed here: one round trip less per stop.
        self.cpu = cpu
        self.stop_cpu = cpu
        plan, self._plan = self._plan, None
        ranges = self.stop_reads(cpu) if self.stop_reads is not None else []
        self.stop_prefetch = None
        if plan is not None and sig == SIGTRAP:
            return self._leave_as_planned(cpu, sig, ranges, *plan)
        if ranges:
            # The registers and the caller's guesses in one round trip (see Target.stop_reads).
            answer, results = self._read_many(ranges, first=b"g")
            self._regs_cache = self._parse_g(answer)
            self.stop_prefetch = (self.generation, list(zip(ranges, results, strict=True)))
        return Stop(cpu, self.read_registers()["rip"], sig)

    def plan_continue(self, pc: int, arm: list[int]) -> bool:
        if self.running:
            raise TargetError("plan_continue: the guest is running")
        if self.breakpoints != {pc} or not self._at_endbr(pc):
            return False
        self._plan = (pc, list(arm))
        return True

    def _leave_as_planned(self, cpu: int, sig: int, ranges, pc: int, arm: list[int]) -> Stop:
        """:meth:`plan_continue`'s stop: the registers, the stop reads, RIP past the endbr64,
        the breakpoints to arm and the continue, in one write; the guest runs on before the
        caller sees the stop.  Only the registers and the reads' answers are waited for."""
        arm = [a for a in dict.fromkeys(arm) if a not in self.breakpoints]
        tail = [self._write_register_packet("rip", pc + 4).encode(),
                *(self._breakpoint_packet(a, True).encode() for a in arm), b"vCont;c"]
        answer, results = self._read_many(ranges, first=b"g", tail=tail)
        self.running = True
        self.breakpoints.update(arm)
        self._regs_cache = self._parse_g(answer)
        self.stop_prefetch = (self.generation, list(zip(ranges, results, strict=True)))
        got = self._regs_cache["rip"]
        if got != pc:
            # Only the breakpoint at pc was in (plan_continue): a SIGTRAP elsewhere is a step or
            # a breakpoint nobody here inserted.  The guest runs on from it all the same.
            raise TargetError(f"planned to leave the stop at {pc:#x} at once, but the guest stopped at "
                              f"{got:#x} (it runs on from there)")
        return Stop(cpu, pc, sig, continued=True)

    def _resume(self, step: bool, timeout: float) -> Stop:
        self._regs_cache = None
        thread = self._cpu_thread[self.cpu]
        self.round_trips += 1
        self._write_packets([f"vCont;s:{thread}".encode() if step else b"vCont;c"])
        self.running = True
        return self.wait_stop(timeout)

    def _continue_nowait(self) -> None:
        self._regs_cache = None
        self.round_trips += 1
        self._write_packets([b"vCont;c"])
        self.running = True

    def _next_stop(self, deadline: float) -> Stop:
        reply = self._read_packet(deadline)
        self.running = False
        self._raise_refused()
        return self._parse_stop(reply)

    def stop_arrived(self) -> bool:
        """Whether the running guest has stopped already (its stop reply is waiting on the
        socket): what QMP's query-status says, without a QMP round trip."""
        if not self.running:
            return True
        # What has arrived, without a wait: one syscall, unless it filled the read (a read that
        # took less took all there was; reading on until EAGAIN was a syscall more, 2 a trace).
        while self._read_now() == READ_SIZE:
            pass
        payload = self._take()  # past the OKs of the lazy commands written with the continue
        if payload is None:
            return False
        self._stashed.appendleft(payload)
        return True

    def interrupt_raw(self, timeout: float = 5.0) -> Stop:
        self._write(b"\x03")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_packet(deadline)
            if _STOP_RE.match(reply):
                self.running = False
                return self._parse_stop(reply)

    def interrupt(self, timeout: float = 5.0) -> Stop:
        """Stop a running guest; on a guest that is already stopped (QEMU ignores ^C then)
        return where the selected vCPU is."""
        if not self.running:
            return Stop(self.cpu, self.read_registers()["rip"])
        return self.interrupt_raw(timeout)

    def close(self, detach: bool = True) -> None:
        """Detach (the guest runs on) or, with ``detach=False``, just drop the connection and
        leave the guest stopped for the next client."""
        try:
            if not self.running and (detach or self._lazy):
                # the lazy commands too: a breakpoint removal must reach QEMU before we go
                self._write_packets([b"D"] if detach else [])
        except Exception:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
