"""perf ring-buffer records and the ``perfcc`` capture file, parsed into typed dataclasses.

Layouts are those of ``include/uapi/linux/perf_event.h`` (linux-libc-dev 7.2.13-1, Debian sid,
the header that has ``defer_callchain``); each is declared once below, next to the comment that
quotes it.  Records are little-endian x86-64, every one starting with
``struct perf_event_header {u32 type; u16 misc; u16 size;}``.  ``size`` is not always a multiple
of 8, whatever the header promises: ``perf_sample_ustack_size()`` cuts the stack dump at
``TASK_SIZE - sp``, and a 32-bit task's sp is only 4-byte aligned (measured on 7.3.4: samples of
1060 bytes, and every record after one in the ring at an unaligned offset).

* ``PERF_RECORD_SAMPLE`` (9): the fields ``attr.sample_type`` selects, in the header's order;
  the callchain is split at its ``PERF_CONTEXT_*`` markers into the kernel part, the user part
  and a deferred cookie (``PERF_CONTEXT_USER_DEFERRED`` + cookie, 6.19+); the user registers
  become :class:`~harness.regs.UserRegs`; the user stack dump keeps its ``dyn_size`` valid bytes.
* ``PERF_RECORD_CALLCHAIN_DEFERRED`` (22), ``PERF_RECORD_LOST`` (2), ``PERF_RECORD_FORK`` (7)
  and ``PERF_RECORD_EXIT`` (4), each with its ``struct sample_id`` trailer (``sample_id_all``).
* Anything else is kept as :class:`Other` (type, misc, size) and skipped by its size.

Truncated or inconsistent input raises :class:`PerfFormatError` naming the byte offset and the
field, never ``IndexError`` or ``struct.error``.

The capture file written by ``guest_programs/perfcc.c``: ``"PERFCC01"``, then sections
``{char name[8]; u64 size; u8 data[size]; pad to 8}``: ``info`` (key=value lines), ``attr`` (the
``struct perf_event_attr`` used), ``maps`` (the child's ``/proc/PID/maps``), ``vdso`` (u64
address + image), one ``ring`` per ring buffer (``s32 cpu; u32 0;`` then records) and ``end``.
"""

from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass, field

from ..errors import EXIT_USAGE, HarnessError
from ..regs import UserRegs

U64 = (1 << 64) - 1


class PerfFormatError(HarnessError, ValueError):
    """Truncated, corrupt or unsupported perf data.

    ``offset`` is the byte offset (in the input given to the parser) of the field at fault,
    ``field`` names it in the header's terms (``"header.size"``, ``"sample.callchain.nr"``, ...).
    """

    exit_code = EXIT_USAGE  # bad input

    def __init__(self, message: str, *, field: str, offset: int) -> None:
        self.field = field
        self.offset = offset
        super().__init__(f"{field} at byte {offset:#x}: {message}")


# -- constants (include/uapi/linux/perf_event.h) ------------------------------------------------
# enum perf_event_type
PERF_RECORD_LOST = 2
PERF_RECORD_COMM = 3
PERF_RECORD_EXIT = 4
PERF_RECORD_THROTTLE = 5
PERF_RECORD_UNTHROTTLE = 6
PERF_RECORD_FORK = 7
PERF_RECORD_SAMPLE = 9
PERF_RECORD_CALLCHAIN_DEFERRED = 22

# enum perf_event_sample_format
PERF_SAMPLE_IP = 1 << 0
PERF_SAMPLE_TID = 1 << 1
PERF_SAMPLE_TIME = 1 << 2
PERF_SAMPLE_ADDR = 1 << 3
PERF_SAMPLE_READ = 1 << 4
PERF_SAMPLE_CALLCHAIN = 1 << 5
PERF_SAMPLE_ID = 1 << 6
PERF_SAMPLE_CPU = 1 << 7
PERF_SAMPLE_PERIOD = 1 << 8
PERF_SAMPLE_STREAM_ID = 1 << 9
PERF_SAMPLE_RAW = 1 << 10
PERF_SAMPLE_BRANCH_STACK = 1 << 11
PERF_SAMPLE_REGS_USER = 1 << 12
PERF_SAMPLE_STACK_USER = 1 << 13
PERF_SAMPLE_IDENTIFIER = 1 << 16
SUPPORTED_SAMPLE_TYPE = (PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR | PERF_SAMPLE_ID
                         | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CALLCHAIN
                         | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER | PERF_SAMPLE_IDENTIFIER)

# enum perf_sample_regs_abi
PERF_SAMPLE_REGS_ABI_NONE = 0
PERF_SAMPLE_REGS_ABI_32 = 1
PERF_SAMPLE_REGS_ABI_64 = 2

# header.misc
PERF_RECORD_MISC_CPUMODE_MASK = 7
PERF_RECORD_MISC_KERNEL = 1
PERF_RECORD_MISC_USER = 2

# enum perf_callchain_context: markers in a callchain, as u64
PERF_CONTEXT_HV = -32 & U64
PERF_CONTEXT_KERNEL = -128 & U64
PERF_CONTEXT_USER = -512 & U64
PERF_CONTEXT_USER_DEFERRED = -640 & U64
PERF_CONTEXT_GUEST = -2048 & U64
PERF_CONTEXT_GUEST_KERNEL = -2176 & U64
PERF_CONTEXT_GUEST_USER = -2560 & U64
PERF_CONTEXT_MAX = -4095 & U64  # every marker is >= this
CONTEXT_NAMES = {PERF_CONTEXT_HV: "hv", PERF_CONTEXT_KERNEL: "kernel", PERF_CONTEXT_USER: "user",
                 PERF_CONTEXT_USER_DEFERRED: "user-deferred", PERF_CONTEXT_GUEST: "guest",
                 PERF_CONTEXT_GUEST_KERNEL: "guest-kernel", PERF_CONTEXT_GUEST_USER: "guest-user"}

# arch/x86/include/uapi/asm/perf_regs.h: enum perf_event_x86_regs, index -> pt_regs name
PERF_REG_X86 = ("ax", "bx", "cx", "dx", "si", "di", "bp", "sp", "ip", "flags", "cs", "ss",
                "ds", "es", "fs", "gs", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15")

# struct perf_event_attr flag bits (the u64 after read_format), by bit number.
ATTR_FLAG_BITS = {
    "disabled": 0, "inherit": 1, "pinned": 2, "exclusive": 3, "exclude_user": 4, "exclude_kernel": 5,
    "exclude_hv": 6, "exclude_idle": 7, "mmap": 8, "comm": 9, "freq": 10, "inherit_stat": 11,
    "enable_on_exec": 12, "task": 13, "watermark": 14, "mmap_data": 17, "sample_id_all": 18,
    "exclude_host": 19, "exclude_guest": 20, "exclude_callchain_kernel": 21, "exclude_callchain_user": 22,
    "mmap2": 23, "comm_exec": 24, "use_clockid": 25, "context_switch": 26, "write_backward": 27,
    "namespaces": 28, "ksymbol": 29, "bpf_event": 30, "aux_output": 31, "cgroup": 32, "text_poke": 33,
    "build_id": 34, "inherit_thread": 35, "remove_on_exec": 36, "sigtrap": 37,
    "defer_callchain": 38, "defer_output": 39,
}

# -- layouts --------------------------------------------------------------------------------------
# struct perf_event_header { __u32 type; __u16 misc; __u16 size; };
HEADER = struct.Struct("<IHH")
# struct perf_event_attr, up to sample_stack_user (PERF_ATTR_SIZE_VER3 = 96):
#   u32 type; u32 size; u64 config; u64 sample_period|sample_freq; u64 sample_type;
#   u64 read_format; u64 flags (bit fields); u32 wakeup_events|wakeup_watermark; u32 bp_type;
#   u64 config1; u64 config2; u64 branch_sample_type; u64 sample_regs_user;
#   u32 sample_stack_user; s32 clockid;
ATTR_V3 = struct.Struct("<IIQQQQQIIQQQQIi")
# ... u64 sample_regs_intr; u32 aux_watermark; u16 sample_max_stack; u16 __reserved_2;
#     (PERF_ATTR_SIZE_VER5 = 112)
ATTR_V5_TAIL = struct.Struct("<QIHH")
# PERF_RECORD_LOST: { struct perf_event_header header; u64 id; u64 lost; struct sample_id sample_id; };
LOST_BODY = struct.Struct("<QQ")
# PERF_RECORD_FORK / PERF_RECORD_EXIT: { header; u32 pid, ppid; u32 tid, ptid; u64 time; sample_id; };
TASK_BODY = struct.Struct("<IIIIQ")
# PERF_RECORD_CALLCHAIN_DEFERRED: { header; u64 cookie; u64 nr; u64 ips[nr]; struct sample_id sample_id; };
DEFERRED_BODY = struct.Struct("<QQ")
# The capture file: magic, then sections { char name[8]; u64 size; data; pad to 8 }.
CAPTURE_MAGIC = b"PERFCC01"
SECTION = struct.Struct("<8sQ")
# A "ring" section starts with { s32 cpu; u32 zero; }.
RING_HEADER = struct.Struct("<iI")


@dataclass(frozen=True)
class Attr:
    """The parts of ``struct perf_event_attr`` that decide how records are laid out."""

    type: int
    size: int
    config: int
    sample_period: int
    sample_type: int
    flags: int
    sample_regs_user: int
    sample_stack_user: int
    sample_max_stack: int = 0

    def flag(self, name: str) -> bool:
        return bool(self.flags >> ATTR_FLAG_BITS[name] & 1)

    @property
    def regs_user(self) -> tuple[str, ...]:
        """Names of the sampled user registers, in the order samples carry them (by bit)."""
        return tuple(PERF_REG_X86[i] if i < len(PERF_REG_X86) else f"reg{i}"
                     for i in range(64) if self.sample_regs_user >> i & 1)

    @classmethod
    def parse(cls, data: bytes, offset: int = 0) -> Attr:
        if len(data) < ATTR_V3.size:
            raise PerfFormatError(f"{len(data)} bytes, need at least {ATTR_V3.size} (PERF_ATTR_SIZE_VER3)",
                                  field="attr", offset=offset)
        (type_, size, config, period, sample_type, _read_format, flags, _wakeup, _bp_type, _c1, _c2, _branch,
         regs_user, stack_user, _clockid) = ATTR_V3.unpack_from(data, 0)
        if size != len(data):
            raise PerfFormatError(f"attr.size {size} but {len(data)} bytes stored", field="attr.size",
                                  offset=offset + 4)
        max_stack = 0
        if size >= ATTR_V3.size + ATTR_V5_TAIL.size:
            _intr, _aux_wm, max_stack, _res = ATTR_V5_TAIL.unpack_from(data, ATTR_V3.size)
        unsupported = sample_type & ~SUPPORTED_SAMPLE_TYPE
        if unsupported:
            raise PerfFormatError(f"sample_type bits {unsupported:#x} are not supported by this parser",
                                  field="attr.sample_type", offset=offset + 24)
        return cls(type_, size, config, period, sample_type, flags, regs_user, stack_user, max_stack)


@dataclass(frozen=True)
class SampleId:
    """``struct sample_id`` (``sample_id_all``): the fields sample_type selects."""

    pid: int | None = None
    tid: int | None = None
    time: int | None = None
    id: int | None = None
    cpu: int | None = None


@dataclass(frozen=True)
class Sample:
    offset: int
    misc: int
    ip: int | None
    pid: int | None
    tid: int | None
    time: int | None
    cpu: int | None
    period: int | None
    callchain: tuple[int, ...]  # as recorded, markers included
    kernel: tuple[int, ...]  # the PERF_CONTEXT_KERNEL part
    user: tuple[int, ...] | None  # the PERF_CONTEXT_USER part (None: there is none)
    cookie: int | None  # after PERF_CONTEXT_USER_DEFERRED (the user part comes later)
    regs_abi: int
    regs: UserRegs | None  # None for PERF_SAMPLE_REGS_ABI_NONE
    stack_size: int  # the dump's static size
    stack: bytes  # the dyn_size bytes actually copied from the user sp up

    @property
    def cpumode(self) -> int:
        return self.misc & PERF_RECORD_MISC_CPUMODE_MASK

    @property
    def user_mode(self) -> bool:
        return self.cpumode == PERF_RECORD_MISC_USER

    @property
    def deferred(self) -> bool:
        return self.cookie is not None


@dataclass(frozen=True)
class CallchainDeferred:
    offset: int
    misc: int
    cookie: int
    ips: tuple[int, ...]
    sample_id: SampleId

    @property
    def pid(self) -> int | None:
        return self.sample_id.pid

    @property
    def tid(self) -> int | None:
        return self.sample_id.tid

    @property
    def time(self) -> int | None:
        return self.sample_id.time


@dataclass(frozen=True)
class Lost:
    offset: int
    id: int
    lost: int
    sample_id: SampleId

    @property
    def time(self) -> int | None:
        return self.sample_id.time


@dataclass(frozen=True)
class TaskEvent:
    """``PERF_RECORD_FORK`` (``kind`` "fork") or ``PERF_RECORD_EXIT`` ("exit")."""

    offset: int
    kind: str
    pid: int
    ppid: int
    tid: int
    ptid: int
    time: int
    sample_id: SampleId


@dataclass(frozen=True)
class Other:
    offset: int
    type: int
    misc: int
    size: int
    sample_id: SampleId

    @property
    def time(self) -> int | None:
        return self.sample_id.time


Record = Sample | CallchainDeferred | Lost | TaskEvent | Other


class _Reader:
    """Bounded little-endian reads from ``data[start:end]``; offsets reported as ``base + pos``."""

    def __init__(self, data: bytes, start: int, end: int, base: int, what: str):
        self.data = data
        self.pos = start
        self.end = end
        self.base = base
        self.what = what

    def _need(self, n: int, name: str) -> None:
        if self.pos + n > self.end:
            raise PerfFormatError(f"needs {n} bytes, {self.end - self.pos} left in the record",
                                  field=f"{self.what}.{name}", offset=self.base + self.pos)

    def u64(self, name: str) -> int:
        self._need(8, name)
        v = int.from_bytes(self.data[self.pos:self.pos + 8], "little")
        self.pos += 8
        return v

    def u32x2(self, name: str) -> tuple[int, int]:
        self._need(8, name)
        a, b = struct.unpack_from("<II", self.data, self.pos)
        self.pos += 8
        return a, b

    def u64s(self, n: int, name: str) -> tuple[int, ...]:
        self._need(8 * n, name)
        v = struct.unpack_from(f"<{n}Q", self.data, self.pos)
        self.pos += 8 * n
        return v

    def raw(self, n: int, name: str) -> bytes:
        self._need(n, name)
        v = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return v

    def offset(self) -> int:
        return self.base + self.pos

    def done(self) -> None:
        if self.pos != self.end:
            raise PerfFormatError(f"{self.end - self.pos} bytes left over after the last field",
                                  field=f"{self.what}.size", offset=self.base + self.pos)


def _sample_id(r: _Reader, attr: Attr) -> SampleId:
    """``struct sample_id``: { u32 pid, tid; } { u64 time; } { u64 id; } { u64 stream_id; }
    { u32 cpu, res; } { u64 id; } -- each where sample_type has TID, TIME, ID, STREAM_ID, CPU,
    IDENTIFIER."""
    if not attr.flag("sample_id_all"):
        return SampleId()
    st = attr.sample_type
    pid = tid = time = ident = cpu = None
    if st & PERF_SAMPLE_TID:
        pid, tid = r.u32x2("sample_id.pid")
    if st & PERF_SAMPLE_TIME:
        time = r.u64("sample_id.time")
    if st & PERF_SAMPLE_ID:
        ident = r.u64("sample_id.id")
    if st & PERF_SAMPLE_STREAM_ID:
        r.u64("sample_id.stream_id")
    if st & PERF_SAMPLE_CPU:
        cpu, _ = r.u32x2("sample_id.cpu")
    if st & PERF_SAMPLE_IDENTIFIER:
        ident = r.u64("sample_id.identifier")
    return SampleId(pid, tid, time, ident, cpu)


def sample_id_size(attr: Attr) -> int:
    if not attr.flag("sample_id_all"):
        return 0
    bits = (PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_ID, PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_CPU,
            PERF_SAMPLE_IDENTIFIER)
    return 8 * sum(bool(attr.sample_type & b) for b in bits)


def split_callchain(chain: tuple[int, ...], offset: int) -> tuple[tuple[int, ...], tuple[int, ...] | None, int | None]:
    """(kernel part, user part or None, deferred cookie or None) of a sampled callchain.

    Every entry belongs to the context of the last ``PERF_CONTEXT_*`` marker before it
    (``perf_callchain_store_context()`` writes one before each part);
    ``PERF_CONTEXT_USER_DEFERRED`` is followed by exactly one cookie and ends the chain.
    ``offset`` is the byte offset of ``chain[0]``, for errors."""
    kernel: list[int] = []
    user: list[int] | None = None
    cookie = None
    ctx = None
    i = 0
    while i < len(chain):
        v = chain[i]
        if v >= PERF_CONTEXT_MAX:
            if v not in CONTEXT_NAMES:
                raise PerfFormatError(f"unknown PERF_CONTEXT marker {v:#x}", field=f"sample.callchain[{i}]",
                                      offset=offset + 8 * i)
            if v == PERF_CONTEXT_USER_DEFERRED:
                if i + 2 != len(chain):
                    raise PerfFormatError(
                        f"PERF_CONTEXT_USER_DEFERRED must be followed by exactly one cookie "
                        f"({len(chain) - i - 1} entries follow)", field=f"sample.callchain[{i}]",
                        offset=offset + 8 * i)
                cookie = chain[i + 1]
                break
            ctx = v
            if v == PERF_CONTEXT_USER and user is None:
                user = []
        elif ctx == PERF_CONTEXT_KERNEL:
            kernel.append(v)
        elif ctx == PERF_CONTEXT_USER:
            user.append(v)
        elif ctx is None:
            raise PerfFormatError(f"entry {v:#x} before any PERF_CONTEXT marker", field=f"sample.callchain[{i}]",
                                  offset=offset + 8 * i)
        # entries of hv and guest contexts are not ours to check: left in .callchain only
        i += 1
    return tuple(kernel), (tuple(user) if user is not None else None), cookie


def _regs(names: tuple[str, ...], values: tuple[int, ...]) -> UserRegs:
    fields = UserRegs.__dataclass_fields__
    return UserRegs(**{n: v for n, v in zip(names, values, strict=False) if n in fields})


def _sample(r: _Reader, attr: Attr, offset: int, misc: int) -> Sample:
    """PERF_RECORD_SAMPLE: { u64 id; } && IDENTIFIER, { u64 ip; } && IP, { u32 pid, tid; } && TID,
    { u64 time; } && TIME, { u64 addr; } && ADDR, { u64 id; } && ID, { u64 stream_id; } && STREAM_ID,
    { u32 cpu, res; } && CPU, { u64 period; } && PERIOD, { u64 nr; u64 ips[nr]; } && CALLCHAIN,
    { u64 abi; u64 regs[weight(mask)]; } && REGS_USER, { u64 size; char data[size]; u64 dyn_size; }
    && STACK_USER (no data and no dyn_size when size is 0)."""
    st = attr.sample_type
    ip = pid = tid = time = cpu = period = None
    if st & PERF_SAMPLE_IDENTIFIER:
        r.u64("identifier")
    if st & PERF_SAMPLE_IP:
        ip = r.u64("ip")
    if st & PERF_SAMPLE_TID:
        pid, tid = r.u32x2("pid")
    if st & PERF_SAMPLE_TIME:
        time = r.u64("time")
    if st & PERF_SAMPLE_ADDR:
        r.u64("addr")
    if st & PERF_SAMPLE_ID:
        r.u64("id")
    if st & PERF_SAMPLE_STREAM_ID:
        r.u64("stream_id")
    if st & PERF_SAMPLE_CPU:
        cpu, _ = r.u32x2("cpu")
    if st & PERF_SAMPLE_PERIOD:
        period = r.u64("period")
    chain: tuple[int, ...] = ()
    kernel: tuple[int, ...] = ()
    user = cookie = None
    if st & PERF_SAMPLE_CALLCHAIN:
        nr = r.u64("callchain.nr")
        at = r.offset()
        chain = r.u64s(nr, "callchain.ips")
        kernel, user, cookie = split_callchain(chain, at)
    abi, regs = PERF_SAMPLE_REGS_ABI_NONE, None
    if st & PERF_SAMPLE_REGS_USER:
        at = r.offset()
        abi = r.u64("regs_user.abi")
        if abi not in (PERF_SAMPLE_REGS_ABI_NONE, PERF_SAMPLE_REGS_ABI_32, PERF_SAMPLE_REGS_ABI_64):
            raise PerfFormatError(f"unknown regs ABI {abi}", field="sample.regs_user.abi", offset=at)
        if abi != PERF_SAMPLE_REGS_ABI_NONE:
            names = attr.regs_user
            regs = _regs(names, r.u64s(len(names), "regs_user.regs"))
    stack_size, stack = 0, b""
    if st & PERF_SAMPLE_STACK_USER:
        stack_size = r.u64("stack_user.size")
        if stack_size:
            data = r.raw(stack_size, "stack_user.data")
            at = r.offset()
            dyn = r.u64("stack_user.dyn_size")
            if dyn > stack_size:
                raise PerfFormatError(f"dyn_size {dyn} > size {stack_size}", field="sample.stack_user.dyn_size",
                                      offset=at)
            stack = data[:dyn]
    r.done()
    return Sample(offset, misc, ip, pid, tid, time, cpu, period, chain, kernel, user, cookie, abi, regs,
                  stack_size, stack)


def parse_record(data: bytes, pos: int, attr: Attr, base: int = 0) -> tuple[Record, int]:
    """The record at ``data[pos:]`` and the position after it."""
    if pos + HEADER.size > len(data):
        raise PerfFormatError(f"{len(data) - pos} bytes left, a header needs {HEADER.size}", field="header",
                              offset=base + pos)
    type_, misc, size = HEADER.unpack_from(data, pos)
    if size < HEADER.size:
        raise PerfFormatError(f"record size {size} (type {type_}) is smaller than its header",
                              field="header.size", offset=base + pos + 6)
    end = pos + size
    if end > len(data):
        raise PerfFormatError(f"record of {size} bytes (type {type_}) runs past the end ({len(data) - pos} left)",
                              field="header.size", offset=base + pos + 6)
    offset = base + pos
    body = pos + HEADER.size
    if type_ == PERF_RECORD_SAMPLE:
        rec: Record = _sample(_Reader(data, body, end, base, "sample"), attr, offset, misc)
    elif type_ == PERF_RECORD_CALLCHAIN_DEFERRED:
        r = _Reader(data, body, end, base, "callchain_deferred")
        cookie = r.u64("cookie")
        nr = r.u64("nr")
        ips = r.u64s(nr, "ips")
        sid = _sample_id(r, attr)
        r.done()
        rec = CallchainDeferred(offset, misc, cookie, ips, sid)
    elif type_ == PERF_RECORD_LOST:
        r = _Reader(data, body, end, base, "lost")
        ident = r.u64("id")
        lost = r.u64("lost")
        sid = _sample_id(r, attr)
        r.done()
        rec = Lost(offset, ident, lost, sid)
    elif type_ in (PERF_RECORD_FORK, PERF_RECORD_EXIT):
        what = "fork" if type_ == PERF_RECORD_FORK else "exit"
        r = _Reader(data, body, end, base, what)
        pid, ppid = r.u32x2("pid")
        tid, ptid = r.u32x2("tid")
        time = r.u64("time")
        sid = _sample_id(r, attr)
        r.done()
        rec = TaskEvent(offset, what, pid, ppid, tid, ptid, time, sid)
    else:
        # Other records end with the sample_id trailer too (sample_id_all): read it from the end.
        n = sample_id_size(attr)
        sid = SampleId()
        if n and size - HEADER.size >= n:
            sid = _sample_id(_Reader(data, end - n, end, base, "record"), attr)
        rec = Other(offset, type_, misc, size, sid)
    return rec, end


def parse_records(data: bytes, attr: Attr, base: int = 0) -> list[Record]:
    """Every record of one ring's stream, in order.  ``base`` is added to reported offsets."""
    out: list[Record] = []
    pos = 0
    while pos < len(data):
        rec, pos = parse_record(data, pos, attr, base)
        out.append(rec)
    return out


# -- the capture file ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Ring:
    cpu: int  # -1: the one cpu = -1 event
    data: bytes
    offset: int  # of data[0] in the capture file


@dataclass
class Capture:
    info: dict[str, str]
    attr: Attr
    maps: str
    vdso: tuple[int, bytes] | None
    rings: list[Ring] = field(default_factory=list)

    def info_int(self, key: str, default: int = 0) -> int:
        try:
            return int(self.info.get(key, default))
        except ValueError:
            return default

    @property
    def defer(self) -> bool:
        return self.attr.flag("defer_callchain")

    def records(self) -> list[Record]:
        """Records of every ring, merged by time; each ring's own order is kept."""
        streams = [parse_records(r.data, self.attr, r.offset) for r in self.rings]
        if len(streams) == 1:
            return streams[0]
        if not self.attr.sample_type & PERF_SAMPLE_TIME or not self.attr.flag("sample_id_all"):
            raise PerfFormatError("several rings but records carry no time to merge them by",
                                  field="attr.sample_type", offset=0)
        keyed = [[(rec.time or 0, i, k, rec) for k, rec in enumerate(s)] for i, s in enumerate(streams)]
        return [t[3] for t in heapq.merge(*keyed, key=lambda t: t[:3])]


def parse_capture(data: bytes) -> Capture:
    if data[:8] != CAPTURE_MAGIC:
        raise PerfFormatError(f"magic {bytes(data[:8])!r}, not {CAPTURE_MAGIC!r}", field="magic", offset=0)
    pos = 8
    sections: list[tuple[str, int, bytes]] = []
    while True:
        if pos + SECTION.size > len(data):
            raise PerfFormatError("file ends before the 'end' section", field="section", offset=pos)
        raw_name, size = SECTION.unpack_from(data, pos)
        name = raw_name.rstrip(b"\0").decode("ascii", "replace")
        start = pos + SECTION.size
        if size > len(data) - start:
            raise PerfFormatError(f"section {name!r} of {size} bytes runs past the end", field="section.size",
                                  offset=pos + 8)
        if name == "end":
            break
        sections.append((name, start, bytes(data[start:start + size])))
        pos = start + size + (-size % 8)
    by = {}
    rings = []
    for name, start, body in sections:
        if name == "ring":
            if len(body) < RING_HEADER.size:
                raise PerfFormatError("ring section shorter than its header", field="ring.cpu", offset=start)
            cpu, _ = RING_HEADER.unpack_from(body, 0)
            rings.append(Ring(cpu, body[RING_HEADER.size:], start + RING_HEADER.size))
        else:
            by[name] = (start, body)
    for need in ("info", "attr"):
        if need not in by:
            raise PerfFormatError(f"no {need!r} section", field="section", offset=8)
    info = {}
    for line in by["info"][1].decode("utf-8", "replace").splitlines():
        k, sep, v = line.partition("=")
        if sep:
            info[k.strip()] = v.strip()
    attr = Attr.parse(by["attr"][1], by["attr"][0])
    maps = by.get("maps", (0, b""))[1].decode("utf-8", "replace")
    vdso = None
    if "vdso" in by:
        start, body = by["vdso"]
        if len(body) < 8:
            raise PerfFormatError("vdso section shorter than its address", field="vdso.address", offset=start)
        vdso = (int.from_bytes(body[:8], "little"), body[8:])
    return Capture(info, attr, maps, vdso, rings)
