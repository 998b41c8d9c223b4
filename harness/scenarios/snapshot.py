"""A delivery stop as data: what the walk and the oracles read, taken while the guest was stopped.

At a delivery stop the engine reads, in as few debugger round trips as it can, everything the
deferred walk and every oracle will look at: the registers once, the user stack in pipelined
page-bounded reads from sp's page to the end of its mapping, the shadow stack, the thread
pointer.  Code, symbols, CFI and SFrame tables come from the mapped ELF files (parsed once per
binary); the vDSO from the kernel's image.  That is a :class:`StopSnapshot`; the guest runs on at
once, and :class:`StackChecker` walks and judges the snapshot while it runs.  The checker is the
one evaluation of a stack: the engine's deliveries, ``harness shell``'s stacks (on the live guest)
and the saved deliveries' replay all go through :meth:`StackChecker.evaluate`.  A read outside the
snapshot after the guest ran on is a :class:`~harness.memory.SnapshotMiss`: listed, and the
stack's record says so (never judged silently on a fault the live guest would not have given).

:func:`save` and :func:`load` keep a snapshot and the ``stack`` record the engine wrote for it,
so unit tests replay real deliveries without a guest (:func:`replay`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from elftools.elf.elffile import ELFFile

from ..errors import EXIT_USAGE, HarnessError
from ..kernel import TaskInfo
from ..kernel.stops import StopPoint
from ..memory import BufferMemory, CapturedMemory, Memory, Overlay
from ..oracles.base import Oracle, OracleFrames, Request, Setup, Stack, build_oracles
from ..regs import UserRegs
from ..rule import FrameRule, ValueRule
from ..toolchain.witness import CrossExaminer
from ..unwind.cfi import cfi_table
from ..unwind.code import CodeFacts
from ..unwind.maps import AddressSpace, FileBackedMemory
from ..unwind.mixed import sframe_tables_for
from ..unwind.symbolize import Symbolizer, symbol_index
from ..unwind.user import StopReason, Trace, UnwindConfig, Unwinder, unwind_user
from ..verdicts.align import judge
from ..verdicts.types import FAILURE

__all__ = ["Evaluation", "StackChecker", "StopSnapshot", "load", "loaded_digest", "replay", "save"]

FORMAT = "unwind-harness-delivery"
VERSION = 1

#: the marks of an unwinder's walk: its first frame is the interrupted IP, the others return addresses
_FIRST = frozenset({0})


class DeliveryFileError(HarnessError, ValueError):
    """A saved delivery snapshot is missing, of another format or inconsistent; names the path."""

    exit_code = EXIT_USAGE  # bad input


class BrokenRA:
    """Test-only rule provider: the right CFA, the return address one word off."""

    def rule_for(self, pc: int) -> FrameRule:
        return FrameRule(ValueRule("fp", 16), ValueRule("cfa", -16, True), ValueRule("cfa", -16, True))


@dataclass(frozen=True)
class StopSnapshot:
    """One delivery: the task, the stop point, the registers the walk starts from, the request it
    answers, the thread pointer and the task's memory as captured at the stop.  ``harness shell``
    makes one of a stack on the live guest: its memory is the guest's, its point None where the
    stack is looked at where it stands."""

    task: TaskInfo
    point: StopPoint | None
    regs: UserRegs
    request: Request
    # How the task belongs to the program whose address space the checker was built on ("main",
    # "thread", "child"), or None: another task, only the request's registers are checked.
    own: str | None
    fs_base: int
    memory: Memory  # the engine's: a CapturedMemory (the stop's capture)
    # verify mode: (trace ips, stop, evaluation record) computed on the live guest at the stop
    expected: tuple | None = field(default=None, compare=False)


@dataclass
class Evaluation:
    """The oracles' frames and verdicts on one walked stack, as the ``stack`` record holds them."""

    frames: dict[str, list]
    stops: dict[str, str]
    verdicts: list  # harness.verdicts.types.Verdict
    problems: list[str]

    def records(self, unwinder: str) -> list[dict]:
        out = [v.as_record() for v in self.verdicts]
        out += [{"unwinder": unwinder, "oracle": "delivery", "verdict": FAILURE, "divergences": [], "reason": p}
                for p in self.problems]
        return out


class _View:
    """The memory of the snapshot being checked, for the code facts that outlive one stop."""

    def __init__(self, memory: Memory):
        self.memory = memory

    def read(self, addr: int, size: int) -> bytes:
        return self.memory.read(addr, size)


class StackChecker:
    """The deferred walk and the oracles' verdicts on snapshots of one program's tasks.

    Everything here is built once per program run and cached per binary (symbols, CFI, SFrame,
    facts about code); nothing here talks to the guest."""

    def __init__(self, space: AddressSpace, oracles: list[Oracle], unwinder: str, max_entries: int, ws: int,
                 break_ra: bool = False, examiner: CrossExaminer | None = None):
        self.space = space
        # cross-examination (harness run --cross-examine): each proven cause's claims about
        # binaries asked again of the toolchain's own tools; a contradicted one fails its pair
        self.examiner = examiner
        self.oracles = oracles
        self.unwinder = Unwinder(unwinder)  # the engine's walk (the one its tracers receive)
        self.max_entries = max_entries
        self.ws = ws
        self.break_ra = break_ra
        self.view = _View(space.memory)
        self.symbolizer = Symbolizer(space)
        self.code = CodeFacts(space, self.view, ws)
        self.sframe_tables = sframe_tables_for(space)
        self.backing = FileBackedMemory(space)
        self._names: dict[tuple[int, bool], list] = {}

    def warm(self) -> None:
        """Parse every mapped ELF's symbols, CFI and SFrame now (a static glibc's .eh_frame takes
        about 0.3 s), not at the first stop."""
        self.space.vdso_image()
        for e in self.space.elves():
            symbol_index(e.image)
            try:
                cfi_table(e.image)
            except HarnessError:
                pass  # an ELF whose CFI does not parse: the oracle says so where it walks
            if self.unwinder is Unwinder.SFRAME:
                self.sframe_tables(e.mapping.start)

    def walk(self, snap: StopSnapshot, memory: Memory | None = None, unwinder: str | None = None) -> Trace:
        """``unwind_user()`` on the snapshot (or on ``memory``: the live guest, in verify mode)
        with the checker's unwinder (or ``unwinder``)."""
        cfg = UnwindConfig(max_entries=self.max_entries)
        if self.break_ra:
            cfg = replace(cfg, tables_for=lambda ip: BrokenRA())
        elif Unwinder(unwinder or self.unwinder) is Unwinder.SFRAME:
            cfg = replace(cfg, tables_for=self.sframe_tables)
        return unwind_user(memory if memory is not None else snap.memory, snap.regs, cfg)

    def evaluate(self, snap: StopSnapshot, traces: Mapping[str, Trace], memory: Memory | None = None,
                 code: CodeFacts | None = None, registers: bool = True) -> Evaluation:
        """Every oracle's frames (each oracle's once) and the verdict of each (unwinder, oracle)
        pair, for each unwinder's walk in ``traces`` (the engine's: its one unwinder's).
        ``registers=False``: a stack looked at where it stands, with no request whose registers
        the registers oracles could compare."""
        mem = memory if memory is not None else snap.memory
        self.view.memory = mem
        fs_base = snap.fs_base
        problems = []
        if snap.own is None:
            # Another task: the program's address space and its oracles say nothing about it; only
            # the request's registers are checked (the model's rules apply to every task).
            oracles = [o for o in self.oracles if o.registers]
        else:
            oracles = self.oracles
            for u, trace in traces.items():
                if trace.stop.reason is StopReason.LIMIT and len(trace) != self.max_entries:
                    problems.append(f"pid {snap.task.pid}: {u} trace truncated at {len(trace)} entries, "
                                    f"not UNWIND_MAX_ENTRIES = {self.max_entries}")
        if not registers:
            oracles = [o for o in oracles if not o.registers]
        frames, stops, verdicts = {}, {}, []
        judged: dict[str, object] = {}  # an oracle's frames do not depend on the unwinder's walk
        for u, trace in traces.items():
            # Keyed by the unwinder's name as a plain str (an Unwinder is a StrEnum, equal to it):
            # the log's fast encoder takes str keys only, and sent the whole record to the json
            # module's for an enum key (30 us a trace in bench deferred).
            frames[str(u)] = self.frame_records(trace.ips, _FIRST)
            stops[str(u)] = str(trace.stop)
            stack = Stack(snap.regs, trace, u, self.max_entries, mem, self.space, code or self.code,
                          self.sframe_tables, snap.request, lambda: fs_base)
            for o in oracles:
                if o.name not in judged:
                    judged[o.name] = o.frames(stack)
                v = judge(stack, o, judged[o.name])
                verdicts.append(self.examiner.review(stack, v) if self.examiner is not None else v)
        for name, of in judged.items():
            if isinstance(of, OracleFrames):
                frames[name] = self.frame_records(of.ips, of.marks)
                stops[name] = of.stop
        return Evaluation(frames, stops, verdicts, problems)

    def frame_records(self, ips, marks) -> list[list]:
        """[address, module, symbol+offset] per frame; return addresses looked up at ra - 1."""
        out = []
        for k, ip in enumerate(ips):
            key = (ip, k not in marks)
            if key not in self._names:
                self._names[key] = self.symbolizer.frame_record(ip, key[1])
            out.append(self._names[key])
        return out


# -- saved deliveries, for unit tests ----------------------------------------------------------

def save(directory: str | os.PathLike, snap: StopSnapshot, record: dict, maps: str, program: dict,
         vdso: tuple[int, bytes] | None = None) -> Path:
    """Write ``snap`` (its captured bytes, compressed and base64), the ``stack`` record the engine wrote for it,
    the task's maps, ``program`` (source, toolchain, variant fields, guest path, sha256) and the
    kernel's vDSO image (address, bytes) the engine served the vDSO from."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    mem = snap.memory
    doc = {
        "format": FORMAT, "version": VERSION,
        "task": snap.task.__dict__, "point": snap.point.__dict__, "regs": snap.regs.as_dict(),
        "request": {"want": snap.request.want.as_dict() if snap.request.want else None,
                    "window": snap.request.window, "where": snap.request.where,
                    "syscall": snap.request.syscall, "own": snap.request.own},
        "own": snap.own, "fs_base": snap.fs_base,
        "regions": [[base, _pack(data)] for base, data in sorted(mem.regions.items())],
        "faults": sorted(mem.faults), "maps": maps, "program": program, "record": record,
        "vdso": [vdso[0], _pack(vdso[1])] if vdso else None,
    }
    path = d / "delivery.json"
    path.write_text(json.dumps(doc, indent=0, sort_keys=True))
    return path


def loaded_digest(path: str | os.PathLike) -> str:
    """sha256 of what a program maps (its PT_LOAD bytes: code, data, .eh_frame, .sframe) and its
    symbols, so a saved delivery knows its binary again after a rebuild that changed only debug
    info (-g line numbers, the build directory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        elf = ELFFile(f)
        # Two things in the first PT_LOAD follow the debug info, not the code: the ELF header
        # (e_shoff: where the section headers start, after .debug_*) and the build-id note (a
        # hash of the whole file).  The build directory is a fresh mkdtemp (DW_AT_comp_dir), so
        # two builds of one program differ in those bytes alone: they are zeroed here (seen:
        # every recorded delivery failed to know its binary on an empty cache).
        blank = [(0, elf["e_ehsize"])]
        for sec in elf.iter_sections():
            if sec["sh_type"] == "SHT_NOTE" and sec.name == ".note.gnu.build-id":
                blank.append((sec["sh_offset"], sec["sh_size"]))
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD":
                data = bytearray(seg.data())
                for off, size in blank:
                    lo, hi = max(off, seg["p_offset"]), min(off + size, seg["p_offset"] + len(data))
                    if lo < hi:
                        data[lo - seg["p_offset"]:hi - seg["p_offset"]] = bytes(hi - lo)
                h.update(seg["p_vaddr"].to_bytes(8, "little"))
                h.update(data)
        for name in (".symtab", ".strtab"):
            sec = elf.get_section_by_name(name)
            if sec is not None:
                h.update(sec.data())
    return h.hexdigest()


def _pack(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 9)).decode()


def _unpack(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


def load(path: str | os.PathLike) -> tuple[StopSnapshot, dict, str, dict]:
    """(snapshot with sealed memory, the engine's record, maps text, program) from :func:`save`;
    the memory's backing is the saved vDSO image (:func:`replay` adds the program's files)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise DeliveryFileError(f"{p}: not a readable delivery snapshot ({exc})") from exc
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise DeliveryFileError(f"{p}: format {doc.get('format')!r} v{doc.get('version')}, "
                                f"expected {FORMAT} v{VERSION}")
    try:
        req = doc["request"]
        request = Request(UserRegs(**req["want"]) if req["want"] else None, req["window"], req["where"],
                          req["syscall"], req["own"])
        vdso = doc.get("vdso")
        backing = BufferMemory({vdso[0]: _unpack(vdso[1])}) if vdso else None
        mem = CapturedMemory({base: _unpack(data) for base, data in doc["regions"]}, set(doc["faults"]), backing)
        snap = StopSnapshot(TaskInfo(**doc["task"]), StopPoint(**doc["point"]), UserRegs(**doc["regs"]), request,
                            doc["own"], doc["fs_base"], mem)
    except (KeyError, TypeError, ValueError, zlib.error) as exc:
        raise DeliveryFileError(f"{p}: malformed delivery snapshot ({exc})") from exc
    return snap, doc["record"], doc["maps"], doc["program"]


def replay(snap: StopSnapshot, record: dict, maps: str, resolve, program_path: str, shadow: bool,
           max_entries: int) -> tuple[dict, dict]:
    """Walk and judge a saved delivery without a guest: (what the engine recorded, what the
    snapshot gives now), both as the record's ``frames``, ``stops`` and ``verdicts``."""
    space = AddressSpace.from_maps(maps, resolve, snap.memory)
    unwinder = record["unwinder"]
    ws = 4 if snap.regs.compat else 8
    oracles = build_oracles(Setup(space, snap.memory, program_path, shadow))
    checker = StackChecker(space, oracles, unwinder, max_entries, ws)
    # The backing the engine gives an own task's snapshot: the vDSO, then its read-only file mappings.
    if snap.own is not None:
        vdso = snap.memory.backing
        snap.memory.backing = checker.backing if vdso is None else Overlay(vdso, checker.backing)
    trace = checker.walk(snap)
    ev = checker.evaluate(snap, {unwinder: trace})
    want = {k: record[k] for k in ("frames", "stops", "verdicts")}
    got = {"frames": ev.frames, "stops": ev.stops, "verdicts": ev.records(unwinder)}
    return want, json.loads(json.dumps(got))

