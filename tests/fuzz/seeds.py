"""Write the seed inputs of every fuzz target from real artifacts.

    PYTHONPATH=. python tests/fuzz/seeds.py OUT_DIR        # OUT_DIR/TARGET/seed-*

Where each target's seeds come from:

* log_check: the event logs of a real run (tests/data/run-small/*.jsonl), whole and cut to
  their first lines (a long log is slow to mutate; the checker's paths are reached in a few lines);
  and the sealed seeds of the mutation fuzz (version 2, with a digest);
* log_mutations: the choices of one mutation of each kind on each sealed seed (the input is the
  choices, tests/fuzz/targets.py ``_BytesRandom``), and a few of two or three mutations;
* perf_check, perf_records: the two real perf captures (tests/data/*.perfcc.gz), whole, without
  their vDSO image, and their rings;
* perf_resolve: resolve tables of the shape ``harness perf --save`` writes;
* sframe: the .sframe sections pinned in tests/support/sframe_pinned.py (V1, V2, V3 of the
  Debian toolchains), those of the guest programs in the image cache, and the aarch64 and s390x
  sections of tests/support/sframe_abi_sections.py (modelled on binutils' gas tests);
* btf: tests/unit/kernel/test_btf.py's sample blob (every kind) and slices of a real kernel's .BTF
  (types closed under their references, re-encoded);
* kallsyms: the head of a real /proc/kallsyms dump from the cache, as text and as a cache file;
* rsp: QEMU-shaped packets, qSupported and stop replies, the target description of
  tests/unit/transport/test_rsp_codec.py.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"
CACHE = Path(os.environ.get("HARNESS_CACHE", Path.home() / ".cache" / "unwind-harness"))


def _captures() -> list[bytes]:
    return [gzip.decompress((DATA / n).read_bytes())
            for n in ("perf-callchain-7.3.4.perfcc.gz", "perf-callchain-defer-7.3.4.perfcc.gz")]


def _sections(data: bytes):
    pos = 8
    while pos + 16 <= len(data):
        name, size = struct.unpack_from("<8sQ", data, pos)
        yield name.rstrip(b"\0").decode(), data[pos + 16:pos + 16 + size]
        if name.rstrip(b"\0") == b"end":
            return
        pos += 16 + size + (-size % 8)


def _rebuild(data: bytes, drop=(), ring_cut: int | None = None) -> bytes:
    out = data[:8]
    for name, body in _sections(data):
        if name in drop:
            continue
        if name == "ring" and ring_cut is not None:
            body = body[:8 + ring_cut]
        out += struct.pack("<8sQ", name.encode(), len(body)) + body + b"\0" * (-len(body) % 8)
    return out


def log_check() -> list[bytes]:
    out = []
    for p in sorted((DATA / "run-small").glob("*.jsonl")):
        lines = p.read_bytes().splitlines(keepends=True)
        out.append(b"".join(lines[:12]))
        out.append(b"".join(lines[:4] + lines[-3:]))
        if len(b"".join(lines)) < 20000:
            out.append(b"".join(lines))
    from tests.support.log_mutations import seeds

    for lines in seeds().values():
        out.append("".join(x + "\n" for x in lines).encode())
    return out


def log_mutations() -> list[bytes]:
    import random

    from tests.support.log_mutations import seeds

    def choices(*values: int) -> bytes:
        return b"".join(v.to_bytes(2, "big") for v in values)

    rng = random.Random(21)
    out = []
    for seed in range(len(seeds())):
        for op in range(10):  # one mutation (count: randrange(4) != 0) of kind op (log_mutations.py _one)
            out.append(choices(seed, 1, op) + rng.randbytes(8))
    out += [choices(seed, 0) + rng.randbytes(24) for seed in range(len(seeds()))]  # two or three
    return out


def perf_check() -> list[bytes]:
    out = []
    for c in _captures():
        out.append(c)
        small = _rebuild(c, drop=("vdso",))
        out.append(small)
        out.append(_rebuild(c, drop=("vdso",), ring_cut=1200))
    return out


def perf_resolve() -> list[bytes]:
    return [b"\x00" + b'{"/progs/host/callchain-fp-sframe-static-64-shadow": "/host/callchain"}',
            b"\x01" + b'{"/progs/host/callchain-fp-sframe-static-64-shadow": null, "[vdso]": "x"}',
            b"\x00{}", b"\x01[]"]


def perf_records() -> list[bytes]:
    out = []
    for i, c in enumerate(_captures()):
        secs = list(_sections(c))
        attr = next(b for n, b in secs if n == "attr")
        for n, body in secs:
            if n == "ring":
                ring = body[8:]
                out.append(bytes([i]) + ring[:1500])
                out.append(bytes([i]) + ring[1500:3000])
        if len(attr) >= 64 and (len(attr) - 64) % 8 == 0 and (len(attr) - 64) // 8 < 32:
            out.append(bytes([0x80 | (len(attr) - 64) // 8]) + attr + out[-1][1:400])
    return out


def sframe() -> list[bytes]:
    from tests.support.sframe_pinned import PINNED

    out = []
    for p in PINNED.values():
        out += [b"\x00" + p.data, b"\x01" + p.data]
    from tests.support.sframe_abi_sections import sections

    out += [b"\x00" + s.data for s in sections().values()]
    from harness.sframe import SFrameError, SFrameTable

    seen = set()
    for prog in sorted((CACHE / "programs").glob("*/*")):
        try:
            t = SFrameTable.from_elf(prog)
        except (SFrameError, OSError):
            continue
        data = t.section.data[:t.section.header.end]
        if len(data) < 6000 and hashlib.sha1(data).digest() not in seen:
            seen.add(hashlib.sha1(data).digest())
            out.append(b"\x00" + data)
    return out


def btf() -> list[bytes]:
    from test_btf import Builder, sample_blob

    out = [sample_blob(), sample_blob(">")]
    kernels = sorted((CACHE / "kernels").glob("*/vmlinux"))
    if kernels:
        from harness.kernel.btf import Btf

        real = Btf.from_elf(kernels[0])
        for name in ("pt_regs", "list_head", "callback_head", "pid_type", "unwind_cache"):
            try:
                out.append(_carve(real, name, Builder))
            except Exception as exc:  # a kernel without that type: the other slices still seed
                print(f"btf slice {name}: {exc}", file=sys.stderr)
    return out


def _carve(real, name: str, Builder) -> bytes:
    """The types reachable from ``name`` in ``real``, re-encoded with their ids renumbered."""
    from harness.kernel.btf import Kind

    kinds = [k for k in ("struct", "enum", "union", "typedef", None)]
    t = None
    for k in kinds:
        try:
            t = real.find(name, k) if k else real.find_all(name)[0]
            break
        except Exception:
            continue
    if t is None:
        raise KeyError(name)
    raw = real.data if hasattr(real, "data") else None
    order, ids, todo = [], {}, [t.id]
    while todo and len(order) < 40:
        i = todo.pop()
        if i == 0 or i in ids:
            continue
        ids[i] = None
        order.append(i)
        ty = real.type(i)
        todo += [r for r in _refs(real, ty, Kind) if r not in ids]
    new = {old: k + 1 for k, old in enumerate(order)}
    b = Builder()
    for old in order:
        ty = real.type(old)
        _emit(b, real, ty, new, Kind)
    _ = raw
    return _blob(b)


def _refs(real, ty, Kind) -> list[int]:
    k = ty.kind
    if k in (Kind.STRUCT, Kind.UNION):
        return [m.type_id for m in real.members(ty.id)]
    if k == Kind.ARRAY:
        elem, index, _ = real.array_info(ty.id)
        return [elem, index]
    if k in (Kind.PTR, Kind.TYPEDEF, Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.TYPE_TAG):
        return [ty.ref]
    return []


def _emit(b, real, ty, new, Kind) -> None:
    k = ty.kind

    def ref(i):
        return new.get(i, 0)

    if k == Kind.INT:
        size = ty.size
        enc, off, bits = real.int_info(ty.id)
        b.int_(ty.name, size, bits, enc, off)
    elif k in (Kind.STRUCT, Kind.UNION):
        ms = [(m.name, ref(m.type_id), m.bit_offset, m.bitfield_size) for m in real.members(ty.id)]
        b.composite(int(k), ty.name, ty.size, ms, kflag=int(any(m[3] for m in ms)))
    elif k == Kind.ARRAY:
        elem, index, n = real.array_info(ty.id)
        b.array(ref(elem), ref(index), n)
    elif k == Kind.ENUM:
        vals = real.enum_values(ty.id)
        b.add(int(k), ty.name, len(vals), 0, ty.size,
              b.pack("Ii", *[(b.s(n), v) for n, v in vals.items()]))
    elif k in (Kind.PTR, Kind.TYPEDEF, Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.TYPE_TAG):
        b.add(int(k), ty.name, 0, 0, ref(ty.ref))
    else:
        b.add(int(Kind.INT), ty.name or "int", 0, 0, 4, b.pack("I", (32,)))


def _blob(b) -> bytes:
    types = b"".join(b.records)
    strs = bytes(b.strs)
    return struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strs)) + types + strs


def kallsyms() -> list[bytes]:
    from harness.kernel.kallsyms import Kallsyms

    out = [b"\x00ffffffff81000000 T _stext\nffffffff81000080 T entry_SYSCALL_64\n"
           b"ffffffffc0000000 t init_module\t[ext4]\n"]
    for p in sorted((CACHE / "kallsyms").glob("*.txt"))[:1]:
        with open(p, "rb") as f:
            head = b"".join(f.readline() for _ in range(120))
        if head.startswith(b"#"):
            text = head.split(b"\n", 1)[1]
        else:
            text = head
        out.append(b"\x00" + text)
        try:
            ks = Kallsyms.parse(text, source="seed")
            out.append(b"\x01" + ks.dumps({"release": "7.3.4"}).encode())
        except Exception as exc:
            print(f"kallsyms seed: {exc}", file=sys.stderr)
    return out


def rsp() -> list[bytes]:
    from harness.transport.rsp import encode_packet

    xml = ('<?xml version="1.0"?><!DOCTYPE target SYSTEM "gdb-target.dtd">'
           '<target><xi:include href="a0.xml"/><xi:include href="a1.xml"/></target>\0'
           '<feature name="core"><reg name="rax" bitsize="64"/><reg name="rip" bitsize="64" type="code_ptr"/>'
           '<reg name="eflags" bitsize="32"/></feature>\0'
           '<feature name="sys"><reg name="cr3" bitsize="64" regnum="40"/></feature>')
    return [
        b"\x00+" + encode_packet(b"T05thread:01;") + b"-" + encode_packet(b"OK") + b"$bad#00",
        b"\x00" + encode_packet(b"0123456789abcdef" * 8) + b"+" + encode_packet(b"0*\x25"),
        b"\x01" + b"ab}\x03cd*\x22e",
        b"\x02PacketSize=1000;qXfer:features:read+;vContSupported+;multiprocess-",
        b"\x03T05thread:01;core:0;06:0000000000000000;",
        b"\x03S02",
        b"\x04" + xml.encode(),
    ]


SEEDS = {
    "log_check": log_check,
    "log_mutations": log_mutations,
    "perf_check": perf_check,
    "perf_resolve": perf_resolve,
    "perf_records": perf_records,
    "sframe": sframe,
    "btf": btf,
    "kallsyms": kallsyms,
    "rsp": rsp,
}


def main() -> None:
    out = Path(sys.argv[1])
    only = sys.argv[2:] or list(SEEDS)
    for name in only:
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        seeds = SEEDS[name]()
        for s in seeds:
            (d / f"seed-{hashlib.sha1(s).hexdigest()[:16]}").write_bytes(s)
        print(f"{name}: {len(seeds)} seeds, {sum(map(len, seeds))} bytes")


if __name__ == "__main__":
    main()
