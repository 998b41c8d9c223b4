"""Crafting perf records and perfcc capture files with struct, for the parser's and oracle's tests.

Layouts as include/uapi/linux/perf_event.h declares them; written here independently of
harness.perfparse.records (which reads them), so a test compares two renderings of the header.
"""

from __future__ import annotations

import struct

U64 = (1 << 64) - 1
CONTEXT_USER = -512 & U64
CONTEXT_KERNEL = -128 & U64
CONTEXT_USER_DEFERRED = -640 & U64

SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_CPU = 1 << 0, 1 << 1, 1 << 2, 1 << 7
SAMPLE_CALLCHAIN, SAMPLE_REGS_USER, SAMPLE_STACK_USER = 1 << 5, 1 << 12, 1 << 13
SAMPLE_TYPE = (SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_CALLCHAIN | SAMPLE_REGS_USER
               | SAMPLE_STACK_USER)
# perf_regs.h: AX..SS (0..11) and R8..R15 (16..23)
REGS_MASK = ((1 << 12) - 1) | (((1 << 8) - 1) << 16)
REG_ORDER = ("ax", "bx", "cx", "dx", "si", "di", "bp", "sp", "ip", "flags", "cs", "ss",
             "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15")
FLAG = {"disabled": 0, "inherit": 1, "freq": 10, "enable_on_exec": 12, "task": 13, "sample_id_all": 18,
        "exclude_callchain_kernel": 21, "defer_callchain": 38, "defer_output": 39}


def attr(sample_type: int = SAMPLE_TYPE, flags: tuple[str, ...] = ("sample_id_all", "freq"),
         regs_mask: int = REGS_MASK, stack_user: int = 16384, size: int = 128) -> bytes:
    """struct perf_event_attr: type, size, config, sample_freq, sample_type, read_format, flags,
    wakeup, bp_type, config1, config2, branch_sample_type, sample_regs_user, sample_stack_user,
    clockid, sample_regs_intr, aux_watermark, sample_max_stack, reserved, ... zero to size."""
    word = 0
    for f in flags:
        word |= 1 << FLAG[f]
    head = struct.pack("<IIQQQQQIIQQQQIiQIHH", 1, size, 0, 200, sample_type, 0, word, 0, 0, 0, 0, 0,
                       regs_mask, stack_user, 0, 0, 0, 0, 0)
    return head + b"\0" * (size - len(head))


def header(type_: int, misc: int, body: bytes) -> bytes:
    return struct.pack("<IHH", type_, misc, 8 + len(body)) + body


def sample(ip: int, pid: int, tid: int, time: int, cpu: int, chain: list[int], regs: dict[str, int] | None,
           stack: bytes = b"", stack_size: int | None = None, misc: int = 2, abi: int = 2) -> bytes:
    body = struct.pack("<QIIQII", ip, pid, tid, time, cpu, 0)
    body += struct.pack(f"<Q{len(chain)}Q", len(chain), *chain)
    if regs is None:
        body += struct.pack("<Q", 0)
    else:
        body += struct.pack("<Q", abi) + struct.pack(f"<{len(REG_ORDER)}Q", *(regs.get(n, 0) for n in REG_ORDER))
    size = len(stack) if stack_size is None else stack_size
    if size:
        body += struct.pack("<Q", size) + stack + b"\0" * (size - len(stack)) + struct.pack("<Q", len(stack))
    else:
        body += struct.pack("<Q", 0)
    return header(9, misc, body)


def sample_id(pid: int, tid: int, time: int, cpu: int) -> bytes:
    return struct.pack("<IIQII", pid, tid, time, cpu, 0)


def deferred(cookie: int, ips: list[int], pid: int, tid: int, time: int, cpu: int = 0) -> bytes:
    body = struct.pack(f"<QQ{len(ips)}Q", cookie, len(ips), *ips) + sample_id(pid, tid, time, cpu)
    return header(22, 2, body)


def lost(n: int, time: int, id_: int = 7) -> bytes:
    return header(2, 0, struct.pack("<QQ", id_, n) + sample_id(0, 0, time, 0))


def task(kind: str, pid: int, tid: int, time: int, ppid: int = 1) -> bytes:
    body = struct.pack("<IIIIQ", pid, ppid, tid, tid, time) + sample_id(pid, tid, time, 0)
    return header(7 if kind == "fork" else 4, 0, body)


def section(name: str, data: bytes) -> bytes:
    return struct.pack("<8sQ", name.encode(), len(data)) + data + b"\0" * (-len(data) % 8)


def capture(rings: dict[int, bytes], attr_bytes: bytes | None = None, info: str = "release=test\ndefer=off\n",
            maps: str = "", vdso: tuple[int, bytes] | None = None) -> bytes:
    out = b"PERFCC01" + section("info", info.encode()) + section("attr", attr_bytes or attr())
    out += section("maps", maps.encode())
    if vdso is not None:
        out += section("vdso", struct.pack("<Q", vdso[0]) + vdso[1])
    for cpu, recs in rings.items():
        out += section("ring", struct.pack("<iI", cpu, 0) + recs)
    return out + section("end", b"")
