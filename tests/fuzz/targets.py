"""The fuzz targets: one function of bytes per parser, as each command line or caller feeds it.

Each ``TARGETS[name](data)`` runs the parser on ``data`` the way the harness does and returns
normally, or raises an error of the harness's tree (:class:`harness.errors.HarnessError`, the
typed errors the command line turns into exit 2/3).  Anything else escaping is a bug in the
parser: the fuzz driver (``tests/fuzz/fuzz.py``) reports it as a crash, and the unit suite's
replay (``tests/unit/test_fuzz_corpus.py``) fails on it.  Nothing here catches around a parser:
a crash found is fixed in the parser, with a test.

The targets, and what of the harness each one covers:

* ``log_check`` -- ``harness check LOG``: the whole file (UTF-8 text) through
  :func:`harness.deferred.check.check_lines` and :func:`harness.report.check.verdict_lines`;
* ``log_mutations`` -- ``harness check`` never passes a corrupted log: the input's bytes choose a
  real sealed log (tests/support/log_mutations.py ``seeds``) and the mutations made to it (lines
  deleted, duplicated, swapped, reversed, cut; seqs, header fields and field types changed; bytes
  flipped); :func:`~tests.support.log_mutations.judge` raises ``MutationPassed`` (a crash to the
  fuzzer) when the verdict is not one the mutation allows;
* ``perf_check`` -- ``harness perf --check FILE``: the capture file through
  :func:`harness.perfparse.records.parse_capture` and the oracle (:func:`~harness.perf.oracle.check_capture`),
  its maps section, rings and records included;
* ``perf_resolve`` -- the ``FILE.resolve.json`` beside a capture: the text through
  :func:`harness.perfparse.resolve.load_resolve`, then the oracle over a real capture with that table (the
  table's host paths are mapped onto a few fixed local files: a missing one, a directory, a text
  file, a truncated ELF, a real ELF; a fuzzer must not make the harness read /dev/zero);
* ``perf_records`` -- :func:`harness.perfparse.records.parse_records` (and ``Attr.parse``);
* ``sframe`` -- :meth:`harness.sframe.SFrameSection.parse` strict and not, every FRE decoded,
  lookups, frame rules, the objdump-style dump;
* ``btf`` -- :class:`harness.kernel.btf.Btf` and every query on every type;
* ``kallsyms`` -- :meth:`harness.kernel.kallsyms.Kallsyms.parse` (``/proc/kallsyms`` text) and
  ``loads`` (the cache file), then lookups;
* ``rsp`` -- the pure codec of :mod:`harness.transport.rsp`: packet splitting and checksums,
  body decoding, qSupported, stop replies, target descriptions (``qXfer:features``).
"""

from __future__ import annotations

import gzip
import os
import stat
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"

# The modules each target runs, imported by :func:`prepare` (the fuzz driver calls it inside
# atheris.instrument_imports, so exactly these and what they import get coverage instrumentation;
# importing all of them for every target would cost each run seconds of start-up).
MODULES = {
    "log_check": ["harness.deferred.check"],
    "log_mutations": ["harness.deferred.check", "tests.support.log_mutations"],
    "perf_check": ["harness.perfparse.records", "harness.perf.oracle"],
    "perf_resolve": ["harness.perfparse.records", "harness.perf.oracle", "harness.perfparse.resolve"],
    "perf_records": ["harness.perfparse.records"],
    "sframe": ["harness.sframe", "harness.report.sframe"],
    "btf": ["harness.kernel.btf"],
    "kallsyms": ["harness.kernel.kallsyms"],
    "rsp": ["harness.transport.rsp", "harness.transport.errors"],
}


def prepare(name: str) -> None:
    """Import the modules target ``name`` runs (before its first input)."""
    import importlib

    for module in MODULES[name]:
        importlib.import_module(module)


# --------------------------------------------------------------------------------- harness check


def log_check(data: bytes) -> None:
    from harness.deferred.check import check_lines
    from harness.report.check import verdict_lines

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # harness check: "is not UTF-8 text", exit 2 (harness/commands/check.py)
    verdict = check_lines(text.splitlines(keepends=True))
    verdict_lines(verdict, "fuzz.jsonl")
    verdict.messages()


class _BytesRandom:
    """The ``rng`` of :func:`tests.support.log_mutations.mutate`, drawn from the fuzzer's bytes:
    ``randrange(n)`` takes the next two bytes (0 once they run out), so libFuzzer's mutations of
    the input are mutations of the choices."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def randrange(self, n: int) -> int:
        chunk = self.data[self.pos:self.pos + 2]
        self.pos += 2
        return int.from_bytes(chunk, "big") % n if chunk else 0


_mutation_seeds: dict | None = None


def log_mutations(data: bytes) -> None:
    from tests.support.log_mutations import judge, mutate, seeds

    global _mutation_seeds
    if _mutation_seeds is None:
        _mutation_seeds = seeds()
    names = sorted(_mutation_seeds)
    rng = _BytesRandom(data)
    name = names[rng.randrange(len(names))]
    mutated, m = mutate(rng, _mutation_seeds[name])
    judge(_mutation_seeds[name], mutated, m)  # MutationPassed (an AssertionError): a crash


# --------------------------------------------------------------------------------- perf


def _real_captures() -> list[bytes]:
    return [gzip.decompress((DATA / n).read_bytes())
            for n in ("perf-callchain-7.3.4.perfcc.gz", "perf-callchain-defer-7.3.4.perfcc.gz")]


def perf_check(data: bytes) -> None:
    from harness.perf.oracle import check_capture
    from harness.perfparse.records import parse_capture
    from harness.report.perf import perf_table

    cap = parse_capture(data)
    report = check_capture(cap, None)
    perf_table(report)


class _Files:
    """The local files a fuzzed resolve table's host paths are mapped onto (made once)."""

    def __init__(self) -> None:
        # one directory per user, rewritten by every run (libFuzzer's exit skips clean-up)
        self.dir = os.path.join(tempfile.gettempdir(), f"harness-fuzz-resolve-{os.getuid()}")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        st = os.lstat(self.dir)  # a fixed name: refuse one that someone else made (or a symlink)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise SystemExit(f"{self.dir} is not a private directory of this user: remove it")
        text = os.path.join(self.dir, "text")
        Path(text).write_text("not an ELF\n")
        elf = "/bin/true"
        short = os.path.join(self.dir, "short.elf")
        Path(short).write_bytes(Path(elf).read_bytes()[:200])
        empty = os.path.join(self.dir, "empty")
        Path(empty).write_bytes(b"")
        self.choices = [os.path.join(self.dir, "missing"), self.dir, text, short, empty, elf]

    def pick(self, value: str) -> str:
        return self.choices[sum(value.encode("utf-8", "surrogatepass")) % len(self.choices)]


_files: _Files | None = None
_captures: list | None = None


def _first_records(cap, n: int):
    """The capture with each ring cut after its first ``n`` records (the oracle's cost grows with
    the records; what the resolve table changes shows in the first few samples)."""
    from dataclasses import replace

    from harness.perfparse.records import Ring, parse_record

    rings = []
    for ring in cap.rings:
        pos = 0
        for _ in range(n):
            if pos >= len(ring.data):
                break
            _, pos = parse_record(ring.data, pos, cap.attr, ring.offset)
        rings.append(Ring(ring.cpu, ring.data[:pos], ring.offset))
    return replace(cap, rings=rings)


def perf_resolve(data: bytes) -> None:
    from harness.perf.oracle import check_capture
    from harness.perfparse.records import parse_capture
    from harness.perfparse.resolve import load_resolve
    from harness.report.perf import perf_table

    global _files, _captures
    if _files is None:
        _files = _Files()
        _captures = [_first_records(parse_capture(c), 8) for c in _real_captures()]
    text = data[1:].decode("utf-8", "replace")
    table = load_resolve(text, "fuzz.resolve.json")
    mapped = {k: (_files.pick(v) if v is not None else None) for k, v in table.items()}
    # the capture's own guest paths get a fuzzed file too, so the oracle opens them
    for guest in ("/progs/host/callchain-fp-sframe-static-64-shadow",):
        if table:
            mapped.setdefault(guest, _files.pick(next(iter(table))))
    cap = _captures[data[0] % len(_captures)] if data else _captures[0]
    perf_table(check_capture(cap, mapped.get))


_ATTRS: list | None = None


def perf_records(data: bytes) -> None:
    """Byte 0 < 0x80: the attr of a real capture, the records after it.  Else an attr of
    64 + 8 * (byte0 & 0x1f) bytes follows byte 0, then the records."""
    from harness.perfparse.records import Attr, parse_capture, parse_records

    global _ATTRS
    if _ATTRS is None:
        _ATTRS = [parse_capture(c).attr for c in _real_captures()]
    if not data:
        return
    if data[0] < 0x80:
        attr = _ATTRS[data[0] % len(_ATTRS)]
        body = data[1:]
    else:
        n = 64 + 8 * (data[0] & 0x1F)
        attr = Attr.parse(data[1:1 + n], 0)
        body = data[1 + n:]
    for rec in parse_records(body, attr, 0):
        getattr(rec, "time", None)


# --------------------------------------------------------------------------------- SFrame


def sframe(data: bytes) -> None:
    """Byte 0: bit 0 strict or not; the section follows."""
    from harness.report.sframe import fre_columns
    from harness.sframe import SFrameSection

    if not data:
        return
    strict = not data[0] & 1
    sec = SFrameSection.parse(data[1:], 0x400000, strict=strict)
    sec.decode_all()
    rules = 0
    for fde in sec.fdes[:64]:
        for fre in sec.fres(fde):
            fre_columns(sec, fde, fre)
        for pc in (fde.func_start, fde.func_start + fde.func_size // 2, fde.func_end - 1, fde.func_end):
            sec.find_fre(pc)
            if sec.header.abi_arch == 3 and rules < 64:
                sec.rule_for(pc)
                rules += 1
    repr(sec)


# --------------------------------------------------------------------------------- BTF


def btf(data: bytes) -> None:
    from harness.kernel.btf import Btf, BtfError, BtfLookupError

    b = Btf(data)  # a bad header or type index raises here; a bad type, only when queried
    n = len(b)
    for i in range(min(n, 12)):  # every query on the first types (a bound: ~1 ms an input)
        for call in (b.type, b.sizeof, b.resolve, b.members, b.enum_values, b.params, b.array_info,
                     b.int_info, b.var_linkage, b.decl_tag_component):
            try:
                call(i)
            except (BtfError, BtfLookupError):  # typed: go on with the next query
                pass
    for call in (
        lambda: b.member_offset("pt_regs", "cs"),
        lambda: b.member_offset("task_struct", "thread.sp"),
        lambda: b.enum_value("pid_type", "PIDTYPE_TGID"),
        lambda: b.enum_value(None, "PIDTYPE_PID"),
        lambda: b.var_datasec_offset("current_task"),
        lambda: b.find("pt_regs"),
        lambda: b.pointer_size(),
    ):
        try:
            call()
        except (BtfError, BtfLookupError):
            pass


# --------------------------------------------------------------------------------- kallsyms


def kallsyms(data: bytes) -> None:
    """Byte 0 even: /proc/kallsyms text (bytes, as read); odd: the cache file's text."""
    from harness.kernel.kallsyms import Kallsyms

    if not data:
        return
    if data[0] & 1:
        ks = Kallsyms.loads(data[1:].decode("utf-8", "replace"), source="fuzz cache")
    else:
        ks = Kallsyms.parse(data[1:], source="fuzz")
    for sym in list(ks)[:32]:
        ks.nearest(sym.address)
        ks.symbolize(sym.address + 1, text=True)
        ks.get(sym.name)
        ks.lookup_all(sym.name)
    ks.nearest(0xffffffff81000000)
    ks.dumps()
    ks.unique()


# --------------------------------------------------------------------------------- RSP


def rsp_codec(data: bytes) -> None:
    """Byte 0 selects: 0 a stream into PacketReader; 1 decode_body; 2 qSupported; 3 a stop
    reply; 4 a target description whose annexes are the NUL-separated parts of the rest."""
    from harness.transport import rsp
    from harness.transport.errors import TargetError

    if not data:
        return
    what, body = data[0] % 5, data[1:]
    if what == 0:
        reader = rsp.PacketReader()
        for chunk in (body[: len(body) // 2], body[len(body) // 2:]):
            reader.feed(chunk)
            while reader.next() is not None:
                pass
    elif what == 1:
        rsp.decode_body(body)
        rsp.decode_body(rsp.escape(body))
    elif what == 2:
        rsp.max_read(rsp.parse_qsupported(body))
    elif what == 3:
        rsp.parse_stop_reply(body)
    else:
        parts = body.decode("utf-8", "replace").split("\0")
        annexes = {"target.xml": parts[0]}
        for i, p in enumerate(parts[1:]):
            annexes[f"a{i}.xml"] = p

        def fetch(annex: str) -> str:  # as RspTarget._xfer: a missing annex is an error reply
            if annex not in annexes:
                raise TargetError(f"qXfer of {annex} failed: b'E00'")
            return annexes[annex]

        rsp.parse_target_xml(fetch)


TARGETS = {
    "log_check": log_check,
    "log_mutations": log_mutations,
    "perf_check": perf_check,
    "perf_resolve": perf_resolve,
    "perf_records": perf_records,
    "sframe": sframe,
    "btf": btf,
    "kallsyms": kallsyms,
    "rsp": rsp_codec,
}

__all__ = ["TARGETS"]
