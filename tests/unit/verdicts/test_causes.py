"""Every divergence cause of :data:`harness.verdicts.causes.CAUSES`, on real binaries.

Each cause has cases both ways, on snapshots captured under gdb from programs built by the
project's toolchains (tests/support/cause_snapshots.py, and the session fixtures below):

* :data:`ACCEPT`: a real divergence the cause must prove.  ``judge()`` aligns the unwinder's walk
  with the oracle's frames; the verdict must be "explained", the divergence at the expected place
  must carry that cause, and the evidence must name what the predicate looked at (the function,
  the FDE range, the decoded code, ...).
* :data:`REFUSE`: a divergence the cause must not prove, handed to its predicate directly: it must
  return None.  Each is a real divergence another cause proves (or none does), or one built by
  hand over a real snapshot where no real one exists; the table says which.

``test_every_cause_has_cases`` makes a new cause without cases fail, and a predicate made to
accept everything fails its refusals (and, for most, an acceptance elsewhere, where it steals
another cause's divergence).

The stops, beyond those of tests/support/cause_snapshots.py:

* callchain.c, host, frame pointers: at ``push %rbp`` of c, right after it, at c's ``ret`` (after
  ``pop %rbp``), at the getppid syscall; and with ``libc`` inside glibc's ``syscall()``;
* callchain.c without frame pointers, static and dynamic, host/trixie/sid, at getppid in c;
* signal.c (fp, raw): on_alarm's entry, h2's clock_gettime syscall, the rt_sigreturn syscall;
* callchain.c and vdso.c built with the shadow stack (-finstrument-functions): inside
  ``__cyg_profile_func_enter``, at c's call of it, at getppid in c, at mprotect in glibc's
  start-up (before main); in ``__vdso_clock_gettime``;
* tests/data/nofde.c (host gcc, no unwind tables): at getppid in spin, and, run with ``exec``,
  at its execve of itself and at the new image's ``_start``;
* tests/data/gospin.go (Debian's golang-go): in runtime.nanotime1 on m0's g0, before it moves rsp
  and at its call of the vDSO, and inside __vdso_clock_gettime called from there;
* programs of tests/data built by the host gcc for one rule each: own_restorer.c (a signal
  restorer whose FDE starts at its first byte, at that byte), nocfi_epilogue.c (a function with a
  frame pointer and no CFI, at its ret; with SFrame, linked by gold, without), nosframe_tail.S
  with nosframe_tail_main.c and sframe_only_next.S (calls in tail position around objects without
  SFrame data, in die), shadow_tail.c (an uninstrumented function's tail call before an
  instrumented one), untracked_sp.c (-static-pie: rsp realigned with no CFI row), drap.c (a DRAP
  realignment gas writes no SFrame FDE for, called from main directly and through shim); stripped copies
  by the host's strip where a case needs no symbols;
* the perf causes: the two real perf captures of tests/data (tests/unit/perf/test_oracle_fixture.py), checked as
  ``harness perf`` does (PerfOracle); where the captures hold no such case (a chain cut at
  perf_event_max_stack, a dump too short, an entry left unanswered at exit, a sample after its
  entry's record) the case changes one fact of a real sample by hand, and says so.

The capture records only the stack and the vDSO; the shadow stack lives in the program's .data,
so the shadow builds are captured with the program's writable mappings too (:func:`data_regions`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from elftools.dwarf.callframe import FDE
from elftools.elf.elffile import ELFFile

from harness.images.errors import ImageError
from harness.images.programs import Variant, build_program
from harness.memory import Memory
from harness.oracles.base import Oracle, OracleFrames, Request, Stack
from harness.oracles.cfi import CFIOracle, is_signal_trampoline, signal_frame_regs
from harness.oracles.regs import RegsOracle
from harness.oracles.shadow import HOOK_ENTER, ShadowOracle, shadow_symbol
from harness.perf.oracle import UNWINDER as PERF_UNWINDER
from harness.perf.oracle import PerfOracle
from harness.perfparse.records import Sample, TaskEvent, parse_capture
from harness.regs import UserRegs
from harness.toolchain.witness import CrossExaminer
from harness.tools import capture_gdb
from harness.tools.capture_gdb import CaptureError, StopPoint, capture, capture_program
from harness.unwind.cfi import cfi_table
from harness.unwind.code import CodeFacts
from harness.unwind.maps import AddressSpace
from harness.unwind.snapshot import Region, Snapshot
from harness.unwind.symbolize import Symbolizer
from harness.unwind.user import (
    StopReason,
    UnwinderType,
    unwind_user,
)
from harness.verdicts.align import judge
from harness.verdicts.causes import CAUSES, _step, explain
from harness.verdicts.claims import CONFIRMED, UNVERIFIABLE
from harness.verdicts.cross import NO_CLAIMS
from harness.verdicts.types import (
    DIFFERS,
    ENDS,
    EXPLAINED,
    EXTRA,
    FAILURE,
    LOST,
    PAST_END,
    REGS,
    Divergence,
    PairVerdict,
)
from tests.support.cause_snapshots import TOOLCHAINS, CauseCapture, corrupt, function_symbols, got
from tests.support.cause_stacks import cfi_of, stack_of
from tests.support.gating import require
from tests.support.paths import TEST_DATA

ITER = "1000000"
DATA = TEST_DATA
SYS_GETPPID, SYS_RT_SIGRETURN, SYS_EXECVE = 39, 15, 59
ENTRY_WINDOW = "entry_SYSCALL_64_after_hwframe"  # an entry/exit asm symbol, as the engine records one


# --- captures -----------------------------------------------------------------------------------

# The capture script dumps [stack] and [vdso]; with this branch it also dumps the program's own
# writable mappings (.data, where the shadow stack of a non-TLS build lives).
_VDSO_BRANCH = '        elif path == "[vdso]":\n            what = "vdso"\n'
_DATA_BRANCH = ('        elif "w" in parts[1] and os.path.realpath(path) == CFG["binary"]:\n'
                '            what = "data"\n')


@contextlib.contextmanager
def data_regions():
    """capture_gdb's script, for the duration, dumping the program's writable mappings too."""
    script = capture_gdb.GDB_SCRIPT
    assert _VDSO_BRANCH in script, \
        "capture_gdb.GDB_SCRIPT changed: update data_regions() in tests/unit/verdicts/test_causes.py"
    capture_gdb.GDB_SCRIPT = script.replace(_VDSO_BRANCH, _VDSO_BRANCH + _DATA_BRANCH)
    try:
        yield
    finally:
        capture_gdb.GDB_SCRIPT = script


def _capture(root: Path, name: str, tc: str, variant: Variant, runs, funcs=(), data: bool = False,
             **kw) -> CauseCapture:
    """Build ``name`` with toolchain ``tc`` and capture ``runs``: [(args, stops), ...], one gdb run
    each, into one CauseCapture."""
    from harness.images.toolchain import get_toolchain

    prog = build_program(name, get_toolchain(tc), variant)
    snaps: dict[str, Snapshot] = {}
    for k, (args, stops) in enumerate(runs):
        d = root / f"{name}-{tc}-{variant.tag}-{k}"
        with data_regions() if data else contextlib.nullcontext():
            paths = capture_program(prog, args, stops, d, **kw)
        snaps.update({n: Snapshot.load(p) for n, p in paths.items()})
    return CauseCapture(name, tc, variant, str(prog.path), snaps, function_symbols(prog.path, funcs))


def _one(tmp_path_factory, what: str, *a, **kw) -> CauseCapture:
    require(shutil.which("gdb") is not None, "gdb is not installed")
    try:
        return _capture(tmp_path_factory.mktemp(what), *a, **kw)
    except (ImageError, CaptureError) as exc:
        require(False, f"{what}: {exc}")
        raise  # not reached: require skips or fails


@pytest.fixture(scope="session")
def fp_stops(tmp_path_factory) -> CauseCapture:
    """callchain.c, host, -O1, frame pointers, SFrame, static (fp_snaps' build): c-push-rbp,
    c-after-push, c-ret (c's ``ret``, after ``pop %rbp``), c-raw (getppid) in one run; c-libc
    (getppid inside glibc's syscall()) in another."""
    return _one(tmp_path_factory, "fp-stops", "callchain", "host", Variant(), [
        ([ITER, "raw"], [StopPoint("c-push-rbp", "insn", "c", "push   %rbp"),
                         StopPoint("c-after-push", "insn", "c", "push   %rbp", after=1),
                         StopPoint("c-ret", "insn", "c", "ret"),
                         StopPoint("c-raw", "syscall", syscall="getppid")]),
        ([ITER, "libc"], [StopPoint("c-libc", "syscall", syscall="getppid")]),
    ], ("c", "b", "a", "main"))


@pytest.fixture(scope="session")
def nosframe_stops(tmp_path_factory) -> CauseCapture:
    """callchain.c, host, -O1, frame pointers, static, *without* SFrame (no .sframe, no
    PT_GNU_SFRAME): c-entry (c's first instruction: the host's gcc shrink-wraps c, so its
    ``push %rbp`` comes later), c-push-rbp (c's ``push %rbp``) and c-ret (c's ``ret``, after
    ``pop %rbp``).  The SFrame walk finds no table and falls back to frame pointers at every frame, so the
    fallback's step from an interrupted IP in a prologue or at an epilogue is a real one here."""
    return _one(tmp_path_factory, "nosframe-stops", "callchain", "host", Variant(sframe=False), [
        ([ITER, "raw"], [StopPoint("c-entry", "break", "c"),
                         StopPoint("c-push-rbp", "insn", "c", "push   %rbp"),
                         StopPoint("c-ret", "insn", "c", "ret")]),
    ], ("c", "b", "a", "main"))


@pytest.fixture(scope="session")
def nofp_snaps(tmp_path_factory) -> dict[tuple[str, bool], CauseCapture | str]:
    """``{(toolchain, static): capture}``: callchain.c -O1 without frame pointers, SFrame, at the
    getppid in c (c-raw); a string says why one is missing."""
    if shutil.which("gdb") is None:
        return {(t, s): "gdb is not installed" for t in TOOLCHAINS for s in (True, False)}
    root = tmp_path_factory.mktemp("nofp")
    out: dict[tuple[str, bool], CauseCapture | str] = {}
    for tc in TOOLCHAINS:
        for static in (True, False):
            v = Variant(frame_pointers=False, static=static)
            try:
                out[(tc, static)] = _capture(root, "callchain", tc, v,
                                             [([ITER, "raw"], [StopPoint("c-raw", "syscall", syscall="getppid")])])
            except (ImageError, CaptureError) as exc:
                out[(tc, static)] = f"callchain [{v.tag}] with {tc}: {exc}"
    return out


@pytest.fixture(scope="session")
def gold_snaps(tmp_path_factory) -> CauseCapture:
    """callchain.c -O1 without frame pointers, SFrame, static, linked by the host's gold (which
    keeps .sframe as a plain section and writes no PT_GNU_SFRAME), at the getppid in c."""
    from harness.images.programs import SOURCES, Program, cflags
    from harness.images.toolchain import get_toolchain

    require(shutil.which("gdb") is not None, "gdb is not installed")
    require(shutil.which("ld.gold") is not None, "ld.gold is not installed (binutils)")
    root = tmp_path_factory.mktemp("gold")
    v = Variant(frame_pointers=False)
    try:
        tc = get_toolchain("host")
        tc.run(["gcc", *cflags(tc, v), "-fuse-ld=gold", "-o", str(root / "callchain"), str(SOURCES / "callchain.c")],
               cwd=str(root))
        prog = Program("callchain", "host", v, root / "callchain", ())
        paths = capture_program(prog, [ITER, "raw"], [StopPoint("c-raw", "syscall", syscall="getppid")], root / "cap")
    except (ImageError, CaptureError) as exc:
        require(False, f"gold-linked callchain: {exc}")
        raise
    return CauseCapture("callchain", "host", v, str(prog.path), {n: Snapshot.load(p) for n, p in paths.items()},
                        function_symbols(prog.path, ()))


@pytest.fixture(scope="session")
def signal_snaps(tmp_path_factory) -> CauseCapture:
    """signal.c raw (host, fp, static): on_alarm's first instruction (sp at the signal frame's
    pretcode), h2's first syscall instruction in a handler run whose SIGALRM interrupted c, and
    the rt_sigreturn syscall entry (IP in __restore_rt).  gdb passes SIGALRM silently (its default).

    h2-syscall's case (signal-frame: FP from __restore_rt follows the interrupted rbp and loses
    one frame, the interrupted IP) holds only where the signal interrupted c's own frame-pointer
    code.  c reads the clock through glibc's __clock_gettime (no frame pointer) and the vDSO, and
    the first SIGALRM caught one of them in 18 of 40 handler runs (on a loaded host, 2026-12-07):
    in __clock_gettime, FP lost two frames (c too) and the case failed ("differs" at #4: 2 of 18
    unit runs under load, 1 of 60 loops).  So gdb takes that stop only in a handler run whose
    interrupted frame (the one above the signal frame, capture_gdb's $_interrupted_is) is c."""
    return _one(tmp_path_factory, "signal", "signal", "host", Variant(), [
        (["raw"], [StopPoint("on-alarm", "break", "on_alarm"),
                   StopPoint("h2-syscall", "insn", "h2", "syscall", condition='$_interrupted_is("c")'),
                   StopPoint("sigreturn", "syscall", syscall="rt_sigreturn")]),
    ])


@pytest.fixture(scope="session")
def shadow_snaps(tmp_path_factory) -> CauseCapture:
    """callchain.c with the shadow stack (host, fp, static): inside the enter hook (its first
    instruction), at c's ``call __cyg_profile_func_enter``, and at getppid in c; with .data."""
    return _one(tmp_path_factory, "shadow", "callchain", "host", Variant(shadow=True), [
        ([ITER, "raw"], [StopPoint("in-enter", "break", HOOK_ENTER),
                         StopPoint("c-hook-call", "insn", "c", HOOK_ENTER),
                         StopPoint("c-raw", "syscall", syscall="getppid")]),
    ], data=True)


@pytest.fixture(scope="session")
def shadow_startup(tmp_path_factory) -> CauseCapture:
    """The same build stopped in glibc's start-up, before main (shadow depth 0): at the mprotect
    syscall (RELRO), where rbp still holds what __libc_start_main left in it.  The stop is set at
    the first brk."""
    return _one(tmp_path_factory, "shadow-startup", "callchain", "host", Variant(shadow=True), [
        ([ITER, "raw"], [StopPoint("mprotect", "syscall", syscall="mprotect")]),
    ], data=True, loaded_syscall="brk")


@pytest.fixture(scope="session")
def vdso_snaps(tmp_path_factory) -> CauseCapture:
    """vdso.c with the shadow stack (host, fp, static), stopped inside the vDSO's
    __vdso_clock_gettime right after its frame setup.  Two runs: one to learn where the vDSO is
    (gdb runs the program without ASLR, so it is there again), one with a breakpoint there, given
    as an offset from read_clock (capture_gdb stops only at the program's own functions)."""
    require(shutil.which("gdb") is not None, "gdb is not installed")
    root = tmp_path_factory.mktemp("vdso")
    v = Variant(shadow=True)
    try:
        first = _capture(root / "1", "vdso", "host", v, [([], [StopPoint("b", "break", "b")])], ("read_clock",),
                         data=True, loaded_syscall="brk")
        snap = first.snaps["b"]
        space = snap.address_space()
        code = CodeFacts(space, snap.memory())
        entry = Symbolizer(space).address_of("__vdso_clock_gettime", "[vdso]")
        require(entry is not None, "no __vdso_clock_gettime in the captured vDSO")
        setup = code.frame_setup(code.function_at(entry))
        require(setup is not None, "this kernel's __vdso_clock_gettime sets up no frame pointer")
        stop = StopPoint("in-vdso", "offset", "read_clock", offset=setup.done - first.start("read_clock"))
        cap = _capture(root / "2", "vdso", "host", v, [([], [stop])], ("read_clock",), data=True, loaded_syscall="brk")
    except (ImageError, CaptureError) as exc:
        require(False, f"vdso [{v.tag}] with host: {exc}")
        raise
    mapping = cap.snaps["in-vdso"].address_space().mapping_at(cap.snaps["in-vdso"].regs.ip)
    require(mapping is not None and mapping.path == "[vdso]", "the vDSO moved between the two runs")
    return cap


@pytest.fixture(scope="session")
def perf_captures():
    """The two real perf captures of tests/data (tests/unit/perf/test_oracle_fixture.py says where they come
    from), parsed: ``{"plain": ..., "deferred": ...}``."""
    return {k: parse_capture(gzip.decompress((DATA / f).read_bytes()))
            for k, f in (("plain", "perf-callchain-7.3.4.perfcc.gz"),
                         ("deferred", "perf-callchain-defer-7.3.4.perfcc.gz"))}


NOFDE_FLAGS = ["-O1", "-fno-omit-frame-pointer", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables",
               "-static"]


def _data_build_dir(tmp_path_factory, binary: str, *sources: str) -> tuple[Path, str]:
    """For a fixture that builds tests/data's ``sources`` into ``binary`` and captures its stops
    under gdb (required): a fresh directory with the sources copied in, and the binary's path there."""
    require(shutil.which("gdb") is not None, "gdb is not installed")
    root = tmp_path_factory.mktemp(binary.replace("_", "-"))
    for f in sources:
        shutil.copy(DATA / f, root / f)
    return root, str(root / binary)


@pytest.fixture(scope="session")
def nofde_snaps(tmp_path_factory) -> CauseCapture:
    """tests/data/nofde.c built by the host gcc without unwind tables (and without -g: no
    .debug_frame either): spin-raw (getppid in spin); run with ``exec``: in-execve (its execve
    syscall entry) and new-image (the first instruction of the image execve started)."""
    from harness.images.toolchain import get_toolchain

    root, binary = _data_build_dir(tmp_path_factory, "nofde", "nofde.c")
    try:
        get_toolchain("host").run(["gcc", *NOFDE_FLAGS, "-o", binary, "nofde.c"], cwd=str(root))
        snaps = {}
        for args, stops in (([], [StopPoint("spin-raw", "syscall", syscall="getppid")]),
                            (["exec"], [StopPoint("in-execve", "syscall", syscall="execve"),
                                        StopPoint("new-image", "break", "_start")])):
            d = root / f"snaps-{len(snaps)}"
            snaps.update({n: Snapshot.load(p) for n, p in capture([binary, *args], stops, d, binary=binary).items()})
    except (ImageError, CaptureError) as exc:
        require(False, f"nofde.c with the host gcc: {exc}")
        raise
    return CauseCapture("nofde", "host", Variant(sframe=False), binary, snaps,
                        function_symbols(binary, ("spin", "main", "_start")))


OWN_RESTORER_FLAGS = ["-O1", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-static"]


@pytest.fixture(scope="session")
def own_restorer_snaps(tmp_path_factory) -> CauseCapture:
    """tests/data/own_restorer.c built by the host gcc (static, frame pointers): SIGALRM's restorer
    is the program's own own_restore_rt, whose 'S' FDE starts at its first byte (glibc's starts a
    byte before).  One stop: restorer (own_restore_rt's first instruction: the handler has returned
    into it, the sigreturn is still to come), interrupting spin's body after its kill syscall."""
    from harness.images.toolchain import get_toolchain

    root, binary = _data_build_dir(tmp_path_factory, "own_restorer", "own_restorer.c")
    try:
        get_toolchain("host").run(["gcc", *OWN_RESTORER_FLAGS, "-o", binary, "own_restorer.c"], cwd=str(root))
        paths = capture([binary], [StopPoint("restorer", "break", "own_restore_rt")], root / "snaps", binary=binary)
    except (ImageError, CaptureError) as exc:
        require(False, f"own_restorer.c with the host gcc: {exc}")
        raise
    return CauseCapture("own_restorer", "host", Variant(sframe=False), binary,
                        {n: Snapshot.load(p) for n, p in paths.items()},
                        function_symbols(binary, ("own_restore_rt", "spin", "main")))


def stripped(snap: Snapshot, binary: str, out: Path) -> Snapshot:
    """``snap`` with ``binary`` replaced by a copy stripped by the host's strip (no .symtab: the
    functions are known by their FDEs only; the loaded bytes are the same)."""
    from harness.images.toolchain import get_toolchain

    get_toolchain("host").run(["strip", "-o", str(out), binary])
    with open(out, "rb") as f:
        assert ELFFile(f).get_section_by_name(".symtab") is None
    return dataclasses.replace(snap, files={**snap.files, binary: str(out)})


NOCFI_LINKS = {"sframe": ["-Wa,--gsframe"], "gold": ["-Wa,--gsframe", "-fuse-ld=gold"], "none": []}


@pytest.fixture(scope="session")
def nocfi_snaps(tmp_path_factory) -> dict[str, CauseCapture | str]:
    """tests/data/nocfi_epilogue.c built by the host gcc (static, frame pointers) three ways:
    "sframe" (-Wa,--gsframe: .sframe and PT_GNU_SFRAME, no SFrame FDE for bare), "gold" (the same
    linked by gold: a .sframe section, no PT_GNU_SFRAME) and "none" (no SFrame data at all); each
    stopped at bare's ret (bare-ret, after pop %rbp).  bare has no CFI: no FDE in .eh_frame either.
    A string says why one is missing."""
    from harness.images.toolchain import get_toolchain

    if shutil.which("gdb") is None:
        return dict.fromkeys(NOCFI_LINKS, "gdb is not installed")
    root = tmp_path_factory.mktemp("nocfi")
    shutil.copy(DATA / "nocfi_epilogue.c", root / "nocfi_epilogue.c")
    out: dict[str, CauseCapture | str] = {}
    for kind, flags in NOCFI_LINKS.items():
        if kind == "gold" and shutil.which("ld.gold") is None:
            out[kind] = "ld.gold is not installed (binutils)"
            continue
        binary = str(root / f"nocfi-{kind}")
        try:
            get_toolchain("host").run(["gcc", *OWN_RESTORER_FLAGS, *flags, "-o", binary, "nocfi_epilogue.c"],
                                      cwd=str(root))
            paths = capture([binary], [StopPoint("bare-ret", "insn", "bare", "ret")], root / f"snaps-{kind}",
                            binary=binary)
        except (ImageError, CaptureError) as exc:
            out[kind] = f"nocfi_epilogue.c ({kind}) with the host gcc: {exc}"
            continue
        out[kind] = CauseCapture("nocfi_epilogue", "host", Variant(sframe=kind != "none"), binary,
                                 {n: Snapshot.load(p) for n, p in paths.items()},
                                 function_symbols(binary, ("bare", "caller", "main")))
    return out


@pytest.fixture(scope="session")
def nosframe_tail_snaps(tmp_path_factory) -> CauseCapture:
    """tests/data/nosframe_tail_main.c (-Wa,--gsframe) linked after tests/data/nosframe_tail.S
    (assembled without it) by the host gcc, static, no frame pointers: main -> tail_exit -> die;
    tail_exit's last instruction is its call of die, its object carries no .sframe.  Stops:
    die-raw (getppid in die), and run with "next" die-next (the same, called from tail_exit_next,
    which ends where die starts), with "trap" die-trap (called from tail_trap, whose symbol ends
    after a ud2 past its FDE's end), with "fde" die-fde (called from tail_trap_fde, the same with
    its ud2 in an FDE of its own), with "sonly" die-sonly (called from tail_sframe_only, which ends
    where tests/data/sframe_only_next.S's function starts: linked last, its CFI in .sframe only)."""
    from harness.images.toolchain import get_toolchain

    root, binary = _data_build_dir(tmp_path_factory, "nosframe_tail", "nosframe_tail_main.c", "nosframe_tail.S",
                                   "sframe_only_next.S")
    try:
        tc = get_toolchain("host")
        tc.run(["gcc", "-c", "-o", "nosframe_tail.o", "nosframe_tail.S"], cwd=str(root))
        tc.run(["gcc", "-c", "-o", "sframe_only_next.o", "sframe_only_next.S"], cwd=str(root))
        tc.run(["gcc", "-O1", "-fomit-frame-pointer", "-fno-toplevel-reorder", "-static", "-Wa,--gsframe", "-o",
                binary, "nosframe_tail.o", "nosframe_tail_main.c", "sframe_only_next.o"], cwd=str(root))
        paths = capture([binary], [StopPoint("die-raw", "syscall", syscall="getppid")], root / "snaps", binary=binary)
        for arg in ("next", "trap", "fde", "sonly"):
            paths.update(capture([binary, arg], [StopPoint(f"die-{arg}", "syscall", syscall="getppid")],
                                 root / f"snaps-{arg}", binary=binary))
    except (ImageError, CaptureError) as exc:
        require(False, f"nosframe_tail with the host gcc: {exc}")
        raise
    return CauseCapture("nosframe_tail", "host", Variant(frame_pointers=False), binary,
                        {n: Snapshot.load(p) for n, p in paths.items()},
                        function_symbols(binary, ("tail_exit", "tail_exit_next", "tail_trap", "tail_trap_fde", "tail_sframe_only",
                                                 "next_sframe_only", "die", "main")))


@pytest.fixture(scope="session")
def shadow_tail_snaps(tmp_path_factory) -> CauseCapture:
    """tests/data/shadow_tail.c built by the host gcc with the shadow stack (-O2, frame pointers,
    static): main -> loud -> quiet -> spin, quiet uninstrumented and ending in its call of spin,
    loud starting at its end.  One stop: spin-raw (getppid in spin); with .data."""
    from harness.images.programs import SOURCES
    from harness.images.toolchain import get_toolchain

    root, binary = _data_build_dir(tmp_path_factory, "shadow_tail", "shadow_tail.c")
    try:
        get_toolchain("host").run(["gcc", "-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-static",
                                   "-finstrument-functions", "-DHARNESS_SHADOW", f"-I{SOURCES}", "-o", binary,
                                   "shadow_tail.c"], cwd=str(root))
        with data_regions():
            paths = capture([binary], [StopPoint("spin-raw", "syscall", syscall="getppid")], root / "snaps",
                            binary=binary)
    except (ImageError, CaptureError) as exc:
        require(False, f"shadow_tail.c with the host gcc: {exc}")
        raise
    return CauseCapture("shadow_tail", "host", Variant(shadow=True, opt="-O2"), binary,
                        {n: Snapshot.load(p) for n, p in paths.items()},
                        function_symbols(binary, ("spin", "quiet", "loud", "main")))


@pytest.fixture(scope="session")
def untracked_sp_snaps(tmp_path_factory) -> CauseCapture:
    """tests/data/untracked_sp.c built by the host gcc, -static-pie (loaded away from its link
    addresses), frame pointers: main -> realign (assembly that realigns rsp with no CFI row, and
    starts a row at its call's return address) -> target.  One stop: target-raw (getppid in
    target).  ``symbols`` are link addresses."""
    from harness.images.toolchain import get_toolchain

    root, binary = _data_build_dir(tmp_path_factory, "untracked_sp", "untracked_sp.c")
    try:
        get_toolchain("host").run(["gcc", "-O1", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer",
                                   "-static-pie", "-o", binary, "untracked_sp.c"], cwd=str(root))
        paths = capture([binary], [StopPoint("target-raw", "syscall", syscall="getppid")], root / "snaps",
                        binary=binary)
    except (ImageError, CaptureError) as exc:
        require(False, f"untracked_sp.c with the host gcc (-static-pie): {exc}")
        raise
    return CauseCapture("untracked_sp", "host", Variant(sframe=False), binary,
                        {n: Snapshot.load(p) for n, p in paths.items()},
                        function_symbols(binary, ("realign", "target", "main")))


@pytest.fixture(scope="session")
def drap_snaps(tmp_path_factory) -> CauseCapture:
    """tests/data/drap.c built by the host gcc -O1 -fomit-frame-pointer -Wa,--gsframe -static:
    main -> [shim ->] realigned (a DRAP realignment: gas 2.40 writes it no SFrame FDE) -> target;
    stopped at getppid in target, once called directly (direct) and once through shim (shim): the
    realignment's padding is 0 on one path and 16 on the other."""
    from harness.images.toolchain import get_toolchain

    root, binary = _data_build_dir(tmp_path_factory, "drap", "drap.c")
    snaps = {}
    try:
        get_toolchain("host").run(["gcc", "-O1", "-fomit-frame-pointer", "-Wa,--gsframe", "-static", "-o", binary,
                                   "drap.c"], cwd=str(root))
        for path in ("0", "1"):
            stop = StopPoint("target-raw", "syscall", syscall="getppid")
            got_ = capture([binary, ITER, path], [stop], root / f"snaps-{path}", binary=binary)
            snaps["shim" if path == "1" else "direct"] = Snapshot.load(got_["target-raw"])
    except (ImageError, CaptureError) as exc:
        require(False, f"drap.c with the host gcc: {exc}")
        raise
    return CauseCapture("drap", "host", Variant(frame_pointers=False), binary, snaps,
                        function_symbols(binary, ("realigned", "target", "main", "shim")))


@pytest.fixture(scope="session")
def go_nanotime_snaps(tmp_path_factory) -> CauseCapture:
    """tests/data/gospin.go built by Debian's golang-go (static, frame pointers, .debug_frame),
    stopped in its first runtime.nanotime1 after osinit's sched_getaffinity (schedinit's, on m0's
    g0: no stack switch): nt-cmp (at its cmp of m.curg, before it moves rsp) and nt-call (at its
    call of the vDSO, after `sub rsp, 0x10; and rsp, -16`); in another run nt-vdso, six
    instructions on from that call: in __vdso_clock_gettime, its frame set up."""
    go = shutil.which("go") or ("/usr/bin/go" if os.path.exists("/usr/bin/go") else None)
    require(go is not None, "golang-go is not installed (./dev installs it)")
    require(shutil.which("gdb") is not None, "gdb is not installed")
    root = tmp_path_factory.mktemp("go-nanotime")
    env = {**os.environ, "GOCACHE": str(root / "cache"), "GOPATH": str(root / "gopath"), "GO111MODULE": "off",
           "CGO_ENABLED": "0"}
    shutil.copy(DATA / "gospin.go", root / "main.go")
    binary = str(root / "gospin")
    subprocess.run([go, "build", "-o", binary, "main.go"], cwd=root, env=env, check=True, capture_output=True,
                   timeout=300)
    nanotime1 = "runtime.nanotime1.abi0"
    snaps = {}
    try:
        for k, stops in enumerate(([StopPoint("nt-cmp", "insn", nanotime1, "cmp"),
                                    StopPoint("nt-call", "insn", nanotime1, "call"),
                                    StopPoint("nt-ret", "insn", nanotime1, "call", after=1)],
                                   [StopPoint("nt-vdso", "insn", nanotime1, "call", steps=6)])):
            paths = capture([binary, "3"], stops, root / f"snaps-{k}", loaded_syscall="sched_getaffinity")
            snaps.update({n: Snapshot.load(p) for n, p in paths.items()})
    except CaptureError as exc:
        require(False, f"gdb could not stop gospin in {nanotime1}: {exc}")
    return CauseCapture("gospin", "go", Variant(), binary, snaps, function_symbols(binary, (nanotime1,)))


# --- stacks, oracles, divergences -----------------------------------------------------------------

def shadow_of(stack: Stack, binary: str) -> tuple[ShadowOracle, OracleFrames]:
    oracle = ShadowOracle(shadow_symbol(binary))
    frames = oracle.frames(stack)
    assert isinstance(frames, OracleFrames), frames
    return oracle, frames


def regs_of(stack: Stack) -> tuple[RegsOracle, OracleFrames]:
    oracle = RegsOracle()
    return oracle, oracle.frames(stack)


def div(stack: Stack, oracle: Oracle, frames: OracleFrames, kind: str, i: int, j: int, **kw) -> Divergence:
    """A divergence over the real lists, built as align.judge builds its candidates."""
    if kind == REGS:
        r, w = stack.regs, frames.regs
        return Divergence(stack.unwinder, oracle.name, REGS, 0, 0, (r.ip, r.sp, r.bp), (w.ip, w.sp, w.bp))
    return Divergence(stack.unwinder, oracle.name, kind, i, j, tuple(stack.trace.ips), frames.ips,
                      kw.get("marks", frames.marks), kw.get("outermost", frames.outermost))


def rest(stack: Stack, frames: OracleFrames, i: int, j: int) -> str:
    """The kind of a divergence of the whole rest from (i, j), as align names it."""
    return ENDS if i == len(stack.trace) else PAST_END if j == len(frames.ips) else DIFFERS


def word(mem: Memory, addr: int) -> int:
    return int.from_bytes(mem.read(addr, 8), "little")


def describe(v: PairVerdict) -> str:
    return f"{v.unwinder} vs {v.oracle}: {v.verdict}\n" + "\n".join(
        f"  {d.kind} i={d.got_index} j={d.want_index} [{d.cause}] {d.text}" for d in v.divergences)


def with_syscall(regs: UserRegs, nr: int) -> UserRegs:
    """The registers at a syscall entry as pt_regs holds them (the capture records no orig_ax)."""
    return dataclasses.replace(regs, orig_ax=nr)


# --- the cases ------------------------------------------------------------------------------------

@dataclass
class Accepted:
    """A judged pair: the divergence at (got_index, want_index) must be proven by the case's cause,
    with ``evidence`` (field -> the value, or a check of it)."""

    stack: Stack
    oracle: Oracle
    frames: OracleFrames
    at: tuple[int, int]
    evidence: dict[str, Any] = field(default_factory=dict)
    kinds: tuple[str, ...] | None = None
    # Set where the harness proves a divergence it built itself with explain(), not judge() (the
    # deferred perf records: a regs divergence of an entry's samples, an entry left unanswered).
    divergence: Divergence | None = None


@dataclass
class Refused:
    stack: Stack
    divergence: Divergence


@dataclass(frozen=True)
class Case:
    cause: str
    what: str  # the binary, the stop and the divergence, for the test id
    build: Callable[..., Accepted | Refused]
    args: tuple = ()

    def param(self):
        return pytest.param(self, id=f"{self.cause}:{self.what}")


def _fixture(request, name: str):
    return request.getfixturevalue(name)


def cfi_stop(request, fixture: str, stop: str, unwinder: str, *, key=None, **kw):
    """The capture ``fixture`` holds (with ``key``, the one of several it holds: :func:`got`, a
    missing one skipped, or failed in CI), its stop ``stop`` walked by ``unwinder`` (``kw``:
    :func:`stack_of`'s options), and the CFI oracle's frames there: (capture, stack, oracle, frames)."""
    cap = _fixture(request, fixture)
    if key is not None:
        cap = got(cap, key)
    st = stack_of(cap.snaps[stop], unwinder, **kw)
    oracle, frames = cfi_of(st)
    return cap, st, oracle, frames


# sframe-tail-call / sframe-tail-call-next-fde ----------------------------------------------------

def tail_die_entry(request, tc: str):
    """tailcall -O2 nofp at die's entry: the SFrame walk reaches middle's end, where no FDE covers
    the return address; the FP fallback goes wrong there (garbage, or fp < sp with sid)."""
    return cfi_stop(request, "tailcall_snaps", "die-entry", "sframe", key=tc)


def accept_tail_call(request, tc):
    cap, st, oracle, frames = tail_die_entry(request, tc)
    m0, m1 = cap.symbols["middle"]
    assert st.trace.ips[1] == frames.ips[1] == m1
    return Accepted(st, oracle, frames, (2, 2), {
        "function": "middle", "start": m0, "end": m1, "return_address": m1, "fde": [m0, m1],
        "call": lambda s: s.endswith(f"call {cap.start('die'):#x}"),
        "fp_fallback": lambda s: s.startswith("middle sets up no frame pointer"), "module": cap.binary,
        "prologue": lambda p: p and not any("push rbp" in i for i in p[:2]),
    }, (ENDS, DIFFERS))


def refuse_tail_die_entry(request, tc):
    """die-entry's divergence (sframe-tail-call's case)."""
    _cap, st, oracle, frames = tail_die_entry(request, tc)
    return Refused(st, div(st, oracle, frames, rest(st, frames, 2, 2), 2, 2))


def tail_spin_call(request, tc: str):
    return cfi_stop(request, "tailcall_snaps", "spin-call", "sframe", key=tc)


def accept_tail_call_next_fde(request, tc):
    """tailcall -O2 nofp at spin's call of leaf: die's return address is its end = middle's start;
    the lookup finds middle's FDE and takes its entry row."""
    cap, st, oracle, frames = tail_spin_call(request, tc)
    m0, m1 = cap.symbols["middle"]
    d0, d1 = cap.symbols["die"]
    assert d1 == m0 == st.trace.ips[1]
    return Accepted(st, oracle, frames, (2, 2), {
        "function": "die", "return_address": d1, "next_function": "middle", "fde": [m0, m1],
        "own_fde": [d0, d1], "call": lambda s: s.endswith(f"call {cap.start('spin'):#x}"),
    }, (DIFFERS,))


def accept_tail_call_next_fde_ends(request):
    """Built by hand over tailcall -O2 nofp (host) at spin's call of leaf: the captured stack cut
    right below die's frame (where the lookup at die's return address, middle's start, applies
    middle's entry row and reads the return address at sp), so the SFrame step from there faults
    and ends the walk; CFI, over the whole capture, goes on.  The cause's outcome is the walk's end."""
    cap, _st, _oracle, _frames = tail_spin_call(request, "host")
    snap = cap.snaps["spin-call"]
    clean = stack_of(snap, "sframe")
    sp1 = clean.trace.frames[1].sp
    regions = [Region(r.addr, r.data[:sp1 - r.addr], r.what) if r.addr <= sp1 < r.addr + len(r.data) else r
               for r in snap.regions]
    st = stack_of(dataclasses.replace(snap, regions=regions), "sframe")
    oracle, frames = cfi_of(st, snap)
    assert st.trace.ips == clean.trace.ips[:2] and st.trace.stop.reason is StopReason.FAULT
    assert st.trace.stopped_in is UnwinderType.SFRAME and st.trace.stop.addr == sp1
    return Accepted(st, oracle, frames, (2, 2), {
        "function": "die", "next_function": "middle",
        "text": lambda t: t.endswith(f"the step ended the walk ({st.trace.stop})"),
    }, (ENDS,))


def refuse_tail_spin_call(request, tc):
    """spin-call's divergence (sframe-tail-call-next-fde's case: the step was SFrame's)."""
    _cap, st, oracle, frames = tail_spin_call(request, tc)
    return Refused(st, div(st, oracle, frames, DIFFERS, 2, 2))


# sframe-function-without-fde / sframe-module-without-sframe --------------------------------------

def nofp_c_raw(request, tc: str, static: bool):
    return cfi_stop(request, "nofp_snaps", "c-raw", "sframe", key=(tc, static))


def drap_path(request, path: str = "direct", unwinder: str = "sframe"):
    """A drap stop walked by ``unwinder``, with the CFI oracle's frames, and the index of
    realigned's caller's frame."""
    return cfi_stop(request, "drap_snaps", path, unwinder), 2  # target, realigned, its caller


def _cfi_sp(st, k: int) -> int:
    from harness.unwind.cfi import cfi_tables_for, unwind_cfi

    return unwind_cfi(st.memory, st.regs, cfi_tables_for(st.space), max_entries=k + 1).frames[k].sp


def accept_after_drap(request, path):
    """drap.c at getppid in target: SFrame takes target and realigned; realigned has no SFrame FDE,
    and the FP fallback gives its caller sp = rbp + 16, the realigned copy of the return address:
    below the CFA by the realignment's padding plus 8 (``and $-32`` on an entry rsp of 8 mod 16:
    16 or 32 bytes: main or shim, one 16-byte frame deeper); the caller's SFrame step reads the
    wrong words."""
    (cap, st, oracle, frames), k = drap_path(request, path)
    r0, r1 = cap.symbols["realigned"]
    assert st.trace.ips[:k + 1] == list(frames.ips[:k + 1]) and st.trace.ips[k + 1:k + 2] != list(frames.ips[k + 1:k + 2])
    return Accepted(st, oracle, frames, (k + 1, k + 1), {
        "function": "realigned", "start": r0, "end": r1,
        "drap": lambda insns: "lea r10, [rsp + 8]" in insns[0] and "and rsp" in insns[1],
        "given_sp": lambda sp: _cfi_sp(st, k) - sp in (16, 32), "cfa": _cfi_sp(st, k),
    }, (DIFFERS, ENDS))


def _refused_from(a: Accepted) -> Refused:
    """Another cause's accepted divergence, as judge() builds it, handed to this cause."""
    v = judge(a.stack, a.oracle, a.frames)
    d = next(x for x in v.divergences if (x.got_index, x.want_index) == a.at)
    return Refused(a.stack, dataclasses.replace(d, cause=None, evidence=None))


def refuse_after_drap_before_the_caller(request):
    """The padded walk's divergence moved one frame up, to the step from realigned itself (an FP
    step, not the caller's SFrame step from the wrong sp)."""
    (_cap, st, oracle, frames), k = drap_path(request)
    return Refused(st, div(st, oracle, frames, DIFFERS, k, k))


def accept_function_without_fde(request, tc):
    """callchain nofp static at getppid in c: SFrame takes c, b, a, main; static glibc's
    __libc_start_call_main has no FDE in the binary's .sframe, the FP fallback cannot step."""
    cap, st, oracle, frames = nofp_c_raw(request, tc, True)
    sym = Symbolizer(st.space)
    assert sym.functions(st.trace.ips) == ["c", "b", "a", "main", "__libc_start_call_main"]
    assert len(frames.ips) > 5
    return Accepted(st, oracle, frames, (5, 5), {
        "function": "__libc_start_call_main", "module": cap.binary, "address": frames.ips[4],
        "fdes": len(st.sframe_for(frames.ips[4]).fdes),
        "prologue": lambda p: p and not any("push rbp" in i for i in p[:2]),
        "fp_fallback": lambda s: s.startswith("__libc_start_call_main sets up no frame pointer"),
    }, (ENDS, DIFFERS))


def fp_libc(request):
    cap = _fixture(request, "fp_stops")
    return cap, cap.snaps["c-libc"]


def accept_function_without_fde_syscall(request):
    """callchain fp static (host) inside glibc's syscall(): no FDE of the binary's .sframe covers
    it, the FP fallback from it skips c."""
    cap, snap = fp_libc(request)
    st = stack_of(snap, "sframe")
    oracle, frames = cfi_of(st)
    return Accepted(st, oracle, frames, (1, 1), {
        "function": "syscall", "address": snap.regs.ip, "module": cap.binary,
        "text": lambda t: t.startswith(f"{cap.binary} has .sframe (") and f"none covers syscall at the IP {snap.regs.ip:#x} (" in t,
    }, (LOST,))


def refuse_module_without_sframe_case(request, tc):
    """The dynamic build's divergence (sframe-module-without-sframe's case: libc.so.6 has no
    table at all)."""
    _cap, st, oracle, frames = nofp_c_raw(request, tc, False)
    return Refused(st, div(st, oracle, frames, rest(st, frames, 5, 5), 5, 5))


def refuse_function_without_fde_case(request, tc):
    """The static build's divergence at __libc_start_call_main (sframe-function-without-fde's
    case: not a return address at its function's end; and the binary has .sframe)."""
    _cap, st, oracle, frames = nofp_c_raw(request, tc, True)
    return Refused(st, div(st, oracle, frames, rest(st, frames, 5, 5), 5, 5))


def has_sframe(path: str) -> bool:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        return elf.get_section_by_name(".sframe") is not None or any(
            s["p_type"] == "PT_GNU_SFRAME" for s in elf.iter_segments())


def accept_module_without_sframe(request, tc):
    """callchain nofp dynamic at getppid in c: SFrame takes c, b, a, main; libc.so.6 (the
    toolchain root's) has no .sframe, the FP fallback at __libc_start_call_main cannot step."""
    cap, st, oracle, frames = nofp_c_raw(request, tc, False)
    ra = frames.ips[4]
    libc = st.space.elf_at(ra)
    assert libc.path.endswith("/libc.so.6")
    assert not has_sframe(cap.snaps["c-raw"].files.get(libc.path, libc.path)), \
        f"{tc}'s libc.so.6 has SFrame data now: this case needs a module without it"
    return Accepted(st, oracle, frames, (5, 5), {
        "module": libc.path, "address": ra, "function": st.code.function_at(ra, True).name,
        "fp_fallback": lambda s: "sets up no frame pointer" in s,
        "prologue": lambda p: p and not any("push rbp" in i for i in p[:2]),
    }, (ENDS, DIFFERS))


def nosframe_stop(request, name: str):
    """callchain fp static without SFrame (host) at ``name``: the SFrame walk, every step FP's."""
    cap = _fixture(request, "nosframe_stops")
    assert not has_sframe(cap.binary)
    st = stack_of(cap.snaps[name], "sframe")
    oracle, frames = cfi_of(st)
    assert st.trace.frames[1].how is UnwinderType.FP  # the fallback took the step that lost b
    return cap, st, oracle, frames


def accept_module_without_sframe_fallback_at(request, name: str):
    """callchain fp static without SFrame at c's first instruction (c-entry: its prologue's first
    byte), at its ``push %rbp`` (c-push-rbp) or at its ``ret`` after ``pop %rbp`` (c-ret): c sets up
    its frame, but not at this IP; the FP fallback from the interrupted IP takes b's rbp and loses b."""
    cap, st, oracle, frames = nosframe_stop(request, name)
    if name == "c-entry":
        assert st.regs.ip == cap.start("c") < st.code.frame_setup(st.code.function_at(st.regs.ip)).push
    why = "the IP is the ret after pop %rbp/leave" if name == "c-ret" else "the IP is in c's prologue"
    return Accepted(st, oracle, frames, (1, 1), {
        "module": cap.binary, "address": st.regs.ip, "function": "c", "prologue": [],
        "fp_fallback": lambda s: s.startswith(why),
        "text": lambda t: f"falls back to frame pointers at the IP {st.regs.ip:#x}: {why}" in t,
    }, (LOST,))


NOCFI_CAUSES = {"sframe": "sframe-function-without-fde", "gold": "sframe-module-without-pt-gnu-sframe",
                "none": "sframe-module-without-sframe"}


def accept_fallback_at_a_bare_epilogue(request, kind: str, strip: bool):
    """nocfi_epilogue.c at bare's ret (after pop %rbp), walked with SFrame: no SFrame FDE covers
    bare (the module has no SFrame FDE for it, its SFrame is a section the kernel does not see, or
    it has none), so the FP fallback steps from the IP with the caller's rbp and loses caller.
    bare has no FDE, so the CFI oracle cannot walk from it: the oracle's frames are built by hand,
    the truth at a ret being the word at sp (caller's return address) followed by the unwinder's
    own frames past it.  The FP fallback's reason is the epilogue's, which decodes no prologue;
    ``strip``: the binary stripped by the real strip, bare is in no function (no symbol, no FDE)
    and the evidence names none."""
    cap = got(_fixture(request, "nocfi_snaps"), kind)
    snap = cap.snaps["bare-ret"]
    if strip:
        snap = stripped(snap, cap.binary, _fixture(request, "tmp_path_factory").mktemp("stripped") / "nocfi")
    st = stack_of(snap, "sframe")
    b0, _b1 = cap.symbols["bare"]
    c0, c1 = cap.symbols["caller"]
    ip = st.regs.ip
    assert st.memory.read(ip - 1, 2) == b"\x5d\xc3" and st.trace.frames[1].how is UnwinderType.FP
    ra = word(st.memory, st.regs.sp)
    assert c0 < ra < c1 and st.trace.ips[1] != ra
    assert (st.code.function_at(ip) is None) == strip
    want = (ip, ra, *st.trace.ips[1:])
    frames = OracleFrames(want, frozenset({0}), "built by hand", True)
    d = Divergence(st.unwinder, "cfi", LOST, 1, 1, tuple(st.trace.ips), want, frames.marks, True)
    where = f"{ip:#x}" if strip else "bare"
    evidence = {"module": cap.binary, "prologue": [], "address": ip,
                "fp_fallback": lambda s: s.startswith("the IP is the ret after pop %rbp/leave"),
                "function": "" if strip else "bare"}
    if kind == "sframe":
        evidence["text"] = lambda t: f"none covers {where} at the IP {ip:#x} (" in t
        if strip:
            evidence["function"] = lambda f: f is None  # no function's fields at all
    else:
        evidence["text"] = lambda t: f"falls back to frame pointers at the IP {ip:#x}: the IP is the ret after" in t
    return Accepted(st, CFIOracle(st.space), frames, (1, 1), evidence, (LOST,), divergence=d)


def nosframe_tail_stop(request):
    """nosframe_tail at getppid in die, walked with SFrame: die's FRE steps to tail_exit's return
    address, its end (its last instruction is the call of die); no SFrame FDE covers it nor the
    call (its object carried no .sframe), the FP fallback from tail_exit (no frame pointer) ends."""
    cap, st, oracle, frames = cfi_stop(request, "nosframe_tail_snaps", "die-raw", "sframe")
    t0, t1 = cap.symbols["tail_exit"]
    table = st.sframe_for(t1)
    assert st.trace.ips[1] == frames.ips[1] == t1 and len(st.trace) == 2 and len(frames.ips) > 3
    assert table is not None and table.find_fde(t1) is None and table.find_fde(t1 - 1) is None
    return cap, st, oracle, frames


def refuse_tail_call_without_its_fde(request):
    """nosframe_tail's end at tail_exit: a call in tail position, but the call has no SFrame FDE
    of its own (sframe-tail-call proves the kernel's lookup at ra missing the FDE ra - 1 has)."""
    _cap, st, oracle, frames = nosframe_tail_stop(request)
    return Refused(st, div(st, oracle, frames, ENDS, 2, 2))


def nosframe_tail_next_stop(request):
    """nosframe_tail next at getppid in die, walked with SFrame: die's FRE steps to
    tail_exit_next's return address, its end and die's start; the lookup there finds die's FDE and
    applies its function-entry row to tail_exit_next's frame (which has no SFrame FDE of its own)."""
    cap, st, oracle, frames = cfi_stop(request, "nosframe_tail_snaps", "die-next", "sframe")
    n0, n1 = cap.symbols["tail_exit_next"]
    table = st.sframe_for(n1)
    assert st.trace.ips[1] == frames.ips[1] == n1 == cap.start("die") and st.trace.frames[2].how is UnwinderType.SFRAME
    assert table.find_fde(n1).func_start == n1 and table.find_fde(n1 - 1) is None
    return cap, st, oracle, frames


class _FdeInsideTheCall:
    """An SFrame table with one FDE moved: it starts ``back`` bytes before the return address,
    inside the call's own bytes (as a toolchain's wrong address or a corrupt section may put it).
    Every other lookup is the real table's."""

    def __init__(self, table, fde, back: int):
        self._table = table
        self.fde = dataclasses.replace(fde, func_start=fde.func_start - back, func_size=fde.func_size + back)

    def find_fde(self, pc: int):
        return self.fde if self.fde.func_start <= pc < self.fde.func_end else self._table.find_fde(pc)

    def __getattr__(self, name: str):
        return getattr(self._table, name)


def refuse_tail_call_next_fde_inside_the_call(request):
    """Built by hand over nosframe_tail next (:func:`nosframe_tail_next_stop`): die's SFrame FDE
    moved to start two bytes before tail_exit_next's return address, inside its call of die (no
    toolchain here emits that).  The lookup at ra finds an FDE, but not one that starts at ra: no
    next function's entry row is applied at a function boundary, so this is not the cause's case,
    whether the call has an FDE of its own (here it has none) or not."""
    _cap, st, oracle, frames = nosframe_tail_next_stop(request)
    ra = st.trace.ips[1]
    table = st.sframe_for(ra)
    moved = _FdeInsideTheCall(table, table.find_fde(ra), 2)
    real = st.sframe_for
    st = dataclasses.replace(st, sframe_for=lambda addr: moved if real(addr) is table else real(addr))
    call = st.code.call_before(ra)
    assert moved.find_fde(ra).func_start == ra - 2 > call.addr and moved.find_fde(call.addr) is None
    return Refused(st, div(st, oracle, frames, DIFFERS, 2, 2))


def refuse_tail_call_before_a_trap(request):
    """nosframe_tail trap at getppid in die: tail_trap's return address is its FDE's end (its SFrame
    FDE's too) but not its symbol's, which goes on over the ud2 after the call: the symbol says the
    call is not in tail position, and sframe-tail-call takes the function's bounds from it."""
    cap, st, oracle, frames = cfi_stop(request, "nosframe_tail_snaps", "die-trap", "sframe")
    t0, t1 = cap.symbols["tail_trap"]
    ra = frames.ips[1]
    table = st.sframe_for(ra)
    assert st.trace.ips[1] == ra == t1 - 2 and st.memory.read(ra, 2) == b"\x0f\x0b"  # ud2
    assert table.find_fde(ra) is None and table.find_fde(ra - 1).func_end == ra
    return Refused(st, div(st, oracle, frames, rest(st, frames, 2, 2), 2, 2))


def refuse_tail_call_next_before_a_trap(request):
    """nosframe_tail fde at getppid in die: tail_trap_fde's return address is the start of the FDE
    of its ud2 (SFrame steps there with that FDE's entry row) and the end of its call's FDE, but
    not its symbol's end: the symbol says the call is not in tail position."""
    cap, st, oracle, frames = cfi_stop(request, "nosframe_tail_snaps", "die-fde", "sframe")
    t0, t1 = cap.symbols["tail_trap_fde"]
    ra = frames.ips[1]
    table = st.sframe_for(ra)
    assert st.trace.ips[1] == ra == t1 - 2 and st.trace.frames[2].how is UnwinderType.SFRAME
    assert table.find_fde(ra).func_start == ra and table.find_fde(ra - 1).func_end == ra
    return Refused(st, div(st, oracle, frames, rest(st, frames, 2, 2), 2, 2))


def accept_tail_call_next_fde_unnamed(request):
    """nosframe_tail sonly at getppid in die, its binary stripped by the real strip: die's return
    address is tail_sframe_only's end, where the SFrame lookup finds the FDE of the function that
    follows (sframe_only_next.S's), which has no symbol left and no .eh_frame FDE: nothing names
    it, so the evidence gives its address.  tail_sframe_only is named by its .eh_frame FDE."""
    cap = _fixture(request, "nosframe_tail_snaps")
    snap = stripped(cap.snaps["die-sonly"], cap.binary,
                    _fixture(request, "tmp_path_factory").mktemp("stripped") / "nosframe_tail")
    st = stack_of(snap, "sframe")
    oracle, frames = cfi_of(st)
    t0, t1 = cap.symbols["tail_sframe_only"]
    assert st.trace.ips[1] == frames.ips[1] == t1 == cap.start("next_sframe_only")
    assert st.code.function_at(t1) is None and st.sframe_for(t1).find_fde(t1).func_start == t1
    return Accepted(st, oracle, frames, (2, 2), {
        "function": f"nosframe_tail+{t0:#x}", "return_address": t1, "next_function": f"{t1:#x}",
        "fde": lambda f: f[0] == t1, "own_fde": [t0, t1],
        "text": lambda t: f"and the start of {t1:#x};" in t,
    }, (LOST, ENDS, DIFFERS))


def _after_no_call(request, stop: str, func: str, kind: str):
    """A nosframe_tail stop with the unwinder's and the oracle's second frame made a "return
    address" at ``func``'s end (``func`` one of the capture's functions, or any of the static
    binary's), which must follow no call: (stack, oracle, frames, the divergence there)."""
    cap, st, oracle, frames = cfi_stop(request, "nosframe_tail_snaps", stop, "sframe")
    end = (cap.symbols.get(func) or function_symbols(cap.binary, [func])[func])[1]
    assert st.code.function_at(end, True).end == end and st.code.call_before(end) is None
    ips = list(st.trace.ips)
    ips[1] = end
    want = (frames.ips[0], end, *frames.ips[2:])
    return st, oracle, frames, Divergence(st.unwinder, oracle.name, kind, 2, 2, tuple(ips), want, frames.marks,
                                          frames.outermost)


def after_no_call(request, stop: str, func: str, kind: str):
    """Built by hand over a nosframe_tail stop (:func:`_after_no_call`): a "return address" at
    ``func``'s end, which follows no call (die ends in the jmp of its loop, main in its ret): no
    call in tail position, whatever the lookup there finds (main's FDE at die's end, for the SFrame
    step of die-next's walk; none at main's end, for the FP fallback that ended die-raw's)."""
    st, _oracle, _frames, d = _after_no_call(request, stop, func, kind)
    return Refused(st, d)


def accept_function_without_fde_after_no_call(request):
    """Built by hand over nosframe_tail's die-raw stop (:func:`_after_no_call`): a "return address"
    at _exit's end, which follows no call (_exit ends in the jmp of its loop) and which no SFrame
    FDE covers (static glibc's objects carry no .sframe).  Nothing is in tail position, so no call
    before it is looked up: the walk's end there is this cause's, as at any other address of _exit."""
    st, oracle, frames, d = _after_no_call(request, "die-raw", "_exit", ENDS)
    end = d.got[1]
    return Accepted(st, oracle, frames, (2, 2), {
        "function": "_exit", "address": end, "end": end,
        "text": lambda t: f"none covers _exit at the return address {end:#x}" in t,
    }, (ENDS,), divergence=d)


def gold_c_raw(request):
    return cfi_stop(request, "gold_snaps", "c-raw", "sframe")


def accept_module_without_pt_gnu_sframe(request):
    """callchain nofp static linked by gold at getppid in c: the binary has .sframe but no
    PT_GNU_SFRAME, so the kernel's lookup sees none and the FP fallback at c (no frame pointer)
    ends the walk at once."""
    cap, st, oracle, frames = gold_c_raw(request)
    with open(cap.binary, "rb") as f:
        elf = ELFFile(f)
        sec = elf.get_section_by_name(".sframe")
        assert sec is not None and not any(s["p_type"] == "PT_GNU_SFRAME" for s in elf.iter_segments())
    assert len(st.trace.ips) == 1 and len(frames.ips) > 4
    return Accepted(st, oracle, frames, (1, 1), {
        "module": cap.binary, "address": st.trace.ips[0], "function": "c",
        "sframe_section": [sec["sh_addr"], sec["sh_size"]],
        "fp_fallback": lambda s: "sets up no frame pointer" in s,
        "prologue": lambda p: p and not any("push rbp" in i for i in p[:2]),
        "text": lambda t: f"has a .sframe section ({sec['sh_size']} bytes at {sec['sh_addr']:#x}) but no " in t
        and f"falls back to frame pointers at the IP {st.trace.ips[0]:#x}: " in t,
    }, (ENDS,))


def refuse_gold_case(request):
    """The gold-linked binary's divergence (it has a .sframe section: not 'without sframe')."""
    _cap, st, oracle, frames = gold_c_raw(request)
    return Refused(st, div(st, oracle, frames, ENDS, 1, 1))


def vdso_corrupt(request):
    """vdso.c in __vdso_clock_gettime (which keeps rbp as its frame pointer, and whose module has
    no SFrame here), its frame record's return address overwritten: the SFrame walk's FP step
    from the vDSO goes wrong where FP can step.  No cause may prove it."""
    cap = _fixture(request, "vdso_snaps")
    snap = cap.snaps["in-vdso"]
    mem = corrupt(snap, snap.regs.bp + 8, (0xDEADBEEF).to_bytes(8, "little"))
    st = stack_of(snap, "sframe", memory=mem)
    oracle, frames = cfi_of(st, snap)
    assert st.trace.ips[1] == 0xDEADBEEF
    return st, oracle, frames


def refuse_vdso_corrupt(request):
    st, oracle, frames = vdso_corrupt(request)
    return Refused(st, div(st, oracle, frames, LOST, 1, 1))


# fp-frameless-function / fp-prologue-ip / fp-epilogue-ip ------------------------------------------

def fp_stop(request, name: str):
    return cfi_stop(request, "fp_stops", name, "fp")


def accept_frameless_lscm(request):
    """callchain fp static (host) at getppid in c: FP ends at __libc_start_call_main."""
    cap, st, oracle, frames = fp_stop(request, "c-raw")
    return Accepted(st, oracle, frames, (5, 5), {
        "function": "__libc_start_call_main", "module": cap.binary,
        "prologue": lambda p: len(p) >= 4 and not any("push rbp" in i for i in p[:2]),
    }, (ENDS,))


def accept_frameless_syscall(request):
    """callchain fp static (host) inside glibc's syscall(), a leaf without a frame: FP loses c."""
    _cap, st, oracle, frames = fp_stop(request, "c-libc")
    f = st.code.function_at(st.regs.ip)
    return Accepted(st, oracle, frames, (1, 1), {
        "function": "syscall", "start": f.start, "end": f.end,
        "why_fp": lambda s: s.startswith("syscall sets up no frame pointer"),
    }, (LOST,))


def accept_prologue(request, name: str):
    """callchain fp static (host) at c's push %rbp, or right after it: FP loses b."""
    _cap, st, oracle, frames = fp_stop(request, name)
    setup = st.code.frame_setup(st.code.function_at(st.regs.ip))
    assert st.regs.ip == setup.push + (name == "c-after-push") < setup.done
    return Accepted(st, oracle, frames, (1, 1), {
        "function": "c", "ip": st.regs.ip, "setup_done": setup.done,
        "code": lambda c: any(i.endswith("push rbp") for i in c) and c[-1].endswith("mov rbp, rsp"),
    }, (LOST,))


def accept_prologue_frameless_caller(request):
    """callchain fp static (host) at c's push %rbp with rbp set to what a caller that keeps no
    frame pointer leaves there (a data address, as __libc_start_call_main's 0x4a16f0 was at a
    sample at main+0 of a freshly exec'd task): the FP step from the prologue IP ends the walk."""
    cap = _fixture(request, "fp_stops")
    snap = cap.snaps["c-push-rbp"]
    regs = dataclasses.replace(snap.regs, bp=0x4A16F0)
    st = stack_of(snap, "fp", regs=regs)
    oracle, frames = cfi_of(st)
    # FP ends after the IP (fp < sp); CFI steps from c's entry row to b (and no further: b's own
    # rule is rbp-based, and this rbp is no frame)
    assert len(st.trace) == 1 and st.trace.stop.reason is StopReason.FP_BELOW_SP and len(frames.ips) >= 2
    return Accepted(st, oracle, frames, (1, 1), {
        "function": "c", "ip": st.regs.ip,
        "why_fp": lambda w: "rbp still holds the caller's value" in w,
    }, (ENDS,))


def accept_epilogue(request):
    """callchain fp static (host) at c's ret, after pop %rbp: FP loses b."""
    _cap, st, oracle, frames = fp_stop(request, "c-ret")
    assert st.memory.read(st.regs.ip - 1, 2) in (b"\x5d\xc3", b"\xc9\xc3")  # pop %rbp or leave; ret
    return Accepted(st, oracle, frames, (1, 1), {
        "function": "c", "ip": st.regs.ip,
        "code": lambda c: c[-1].endswith("ret") and c[0].endswith(("pop rbp", "leave")),
    }, (LOST,))


def refuse_fp_stop_lost(request, name: str):
    """The LOST of b at a callchain fp stop (fp-prologue-ip's or fp-epilogue-ip's case)."""
    _cap, st, oracle, frames = fp_stop(request, name)
    return Refused(st, div(st, oracle, frames, LOST, 1, 1))


def lose_a(request):
    """fp_snaps at getppid in c with b's saved rbp (in c's frame record) pointing at a's record:
    FP takes b's caller from a's record and loses a, a function that sets up its frame."""
    cap: CauseCapture = _fixture(request, "fp_snaps")
    snap = cap.snaps["c-raw"]
    clean = unwind_user(snap.memory(), snap.regs)
    c_fp, a_fp = clean.frames[0].fp, clean.frames[2].fp
    st = stack_of(snap, "fp", memory=corrupt(snap, c_fp, a_fp.to_bytes(8, "little")))
    oracle, frames = cfi_of(st, snap)
    assert Symbolizer(st.space).functions(st.trace.ips)[:3] == ["c", "b", "main"]
    assert frames.ips[:5] == tuple(clean.ips)
    return st, oracle, frames


def refuse_prologue_step_not_fp(request, name: str):
    """Built by hand: callchain fp static (host) at c's push %rbp (or c's ret) walked with SFrame,
    which steps right from there, and a LOST of b as if the FP unwinder had made it: the step
    from the IP was SFrame's, not FP's, so no FP rule explains it."""
    _cap, st, oracle, frames = cfi_stop(request, "fp_stops", name, "sframe")
    assert st.trace.frames[1].how is UnwinderType.SFRAME
    return Refused(st, dataclasses.replace(div(st, oracle, frames, LOST, 1, 1), unwinder="fp"))


def refuse_lose_a(request):
    st, oracle, frames = lose_a(request)
    return Refused(st, div(st, oracle, frames, LOST, 2, 2))


def lose_b_in_body(request):
    """fp_snaps at getppid in c (an IP in c's body: its frame is set up) with b's frame record
    copied over c's: FP loses b from an IP where it should not."""
    cap: CauseCapture = _fixture(request, "fp_snaps")
    snap = cap.snaps["c-raw"]
    clean = unwind_user(snap.memory(), snap.regs)
    c_fp, b_fp = clean.frames[0].fp, clean.frames[1].fp
    st = stack_of(snap, "fp", memory=corrupt(snap, c_fp, snap.memory().read(b_fp, 16)))
    oracle, frames = cfi_of(st, snap)
    assert Symbolizer(st.space).functions(st.trace.ips)[:3] == ["c", "a", "main"]
    return st, oracle, frames


def refuse_lose_b_in_body(request):
    st, oracle, frames = lose_b_in_body(request)
    return Refused(st, div(st, oracle, frames, LOST, 1, 1))


def refuse_fp_ends_at_lscm(request):
    """FP's end at __libc_start_call_main (fp-frameless-function's case: fp < sp, no limit)."""
    _cap, st, oracle, frames = fp_stop(request, "c-raw")
    return Refused(st, div(st, oracle, frames, ENDS, 5, 5))


# signal-frame ---------------------------------------------------------------------------------------

def accept_signal_frame(request):
    """signal.c (fp) at h2's clock_gettime syscall, in the SIGALRM handler: CFI goes through the
    signal frame to the interrupted IP, FP from __restore_rt follows the interrupted rbp."""
    _cap, st, oracle, frames = cfi_stop(request, "signal_snaps", "h2-syscall", "fp")
    sym = Symbolizer(st.space)
    assert sym.functions(frames.ips[:3]) == ["h2", "h1", "on_alarm"]
    assert sym.name(frames.ips[3]) == "__restore_rt+0x0" and is_signal_trampoline(st.space, frames.ips[3])
    assert 4 in frames.marks
    # glibc's FDE of __restore_rt starts at the nop before it (so that ra - 1 is inside): the
    # function found at the return address - 1 is named by that FDE where no symbol covers it.
    tramp = st.code.function_at(frames.ips[3], True)
    assert tramp.start <= frames.ips[3] - 1 < tramp.end
    return Accepted(st, oracle, frames, (4, 4), {
        "interrupted_ip": frames.ips[4], "trampoline": lambda s: s in ("__restore_rt", tramp.name),
    }, (LOST,))


def refuse_signal_frame_not_an_ip(request):
    """Built by hand: the signal-frame case (h2-syscall), the oracle's frame below the trampoline
    not marked as an interrupted IP (a return address): no signal interrupted it."""
    _cap, st, oracle, frames = cfi_stop(request, "signal_snaps", "h2-syscall", "fp")
    return Refused(st, div(st, oracle, frames, LOST, 4, 4, marks=frames.marks - {4}))


def refuse_signal_frame_syscall(request):
    """glibc's syscall() LOST of c (fp-frameless-function's case: frame #1, no trampoline)."""
    _cap, st, oracle, frames = fp_stop(request, "c-libc")
    return Refused(st, div(st, oracle, frames, LOST, 1, 1))


def own_restorer_stop(request):
    return cfi_stop(request, "own_restorer_snaps", "restorer", "fp")


def accept_signal_frame_at_the_restorer(request):
    """own_restorer.c at its restorer's first byte, whose 'S' FDE starts there (not a byte
    before, as glibc's): CFI looks the topmost IP up at itself (an IP), finds the trampoline and
    goes through the signal frame to spin's interrupted IP; FP from the restorer follows the
    interrupted rbp to spin's caller and loses spin.  The trampoline is frame 0, an IP: looked up
    at ra - 1 it would be the byte before the FDE, no trampoline."""
    cap, st, oracle, frames = own_restorer_stop(request)
    r0, r1 = cap.symbols["own_restore_rt"]
    s0, s1 = cap.symbols["spin"]
    assert st.regs.ip == r0 and frames.ips[0] == r0 and {0, 1} <= frames.marks
    assert s0 <= frames.ips[1] < s1 and st.trace.ips[:1] == [r0]
    fde = cfi_table(st.space.elf_at(r0).image).fde_for(r0)
    assert fde["initial_location"] == r0 and not is_signal_trampoline(st.space, r0)  # not at r0 - 1
    return Accepted(st, oracle, frames, (1, 1), {
        "interrupted_ip": frames.ips[1], "trampoline": "own_restore_rt",
        "text": lambda t: t.startswith(f"{frames.ips[1]:#x} is the IP a signal interrupted; the frame above it "
                                       f"is the trampoline own_restore_rt (CIE augmentation 'S')"),
    }, (LOST,))


def accept_signal_frame_named_at_ra_minus_1(request):
    """Built by hand over own_restorer.c's restorer stop, its binary stripped by the real strip:
    the trampoline's frame a return address one past the restorer's end (the int3 padding after
    it, which no symbol and no FDE covers), looked up at ra - 1, the restorer's last byte, inside
    its 'S' FDE.  Nothing is named at the address itself, so the trampoline is named by the FDE
    found at ra - 1 (the file's name and the FDE's start)."""
    cap = _fixture(request, "own_restorer_snaps")
    snap = stripped(cap.snaps["restorer"], cap.binary, _fixture(request, "tmp_path_factory").mktemp("stripped") / "own_restorer")
    st = stack_of(snap, "fp")
    oracle, frames = cfi_of(st)
    r0, r1 = cap.symbols["own_restore_rt"]
    assert frames.ips[0] == r0 and st.code.function_at(r1) is None
    assert st.code.function_at(r1, True).name == f"own_restorer+{r0:#x}"
    want = (r1, *frames.ips[1:])
    d = Divergence(st.unwinder, oracle.name, LOST, 1, 1, tuple(st.trace.ips), want, frames.marks - {0},
                   frames.outermost)
    return Accepted(st, oracle, dataclasses.replace(frames, ips=want, marks=frames.marks - {0}), (1, 1), {
        "interrupted_ip": frames.ips[1], "trampoline": f"own_restorer+{r0:#x}",
    }, (LOST,), divergence=d)


# truncated --------------------------------------------------------------------------------------------

def recurse_stack(request, **kw):
    _cap, st, oracle, frames = cfi_stop(request, "recurse_snaps", "rec-bottom", kw.pop("unwinder", "fp"), **kw)
    return st, oracle, frames


def accept_truncated(request, unwinder):
    """recurse.c 600 at rec(0)'s call of bottom: 606 frames; the walk stops at 510."""
    st, oracle, frames = recurse_stack(request, unwinder=unwinder)
    assert st.trace.stop.reason is StopReason.LIMIT and len(frames.ips) > 600
    return Accepted(st, oracle, frames, (510, 510), {
        "nr": 510, "max_entries": 510, "oracle_frames": len(frames.ips),
    }, (ENDS,))


def refuse_truncated_other_limit(request):
    """The same walk cut at 100 entries, delivered by a kernel whose UNWIND_MAX_ENTRIES is 510."""
    st, oracle, frames = recurse_stack(request, walk_entries=100)
    assert len(st.trace) == 100 and st.trace.stop.reason is StopReason.LIMIT
    return Refused(st, div(st, oracle, frames, ENDS, 100, 100))


# shadow-in-hooks / shadow-uninstrumented / shadow-hook-window ---------------------------------------

def shadow_stop(request, name: str, unwinder: str = "fp"):
    cap = _fixture(request, "shadow_snaps")
    st = stack_of(cap.snaps[name], unwinder)
    oracle, frames = shadow_of(st, cap.binary)
    return cap, st, oracle, frames


def accept_in_hooks(request, unwinder):
    """callchain shadow build at the first instruction of __cyg_profile_func_enter, called from a's
    prologue: the walk has a's caller, the shadow stack has no frame for a yet."""
    cap, st, oracle, frames = shadow_stop(request, "in-enter", unwinder)
    f = st.code.function_at(st.regs.ip)
    return Accepted(st, oracle, frames, (1, 1), {
        "function": HOOK_ENTER, "start": f.start, "end": f.end, "module": cap.binary,
    }, (EXTRA,))


def accept_hook_window(request, unwinder):
    """callchain shadow build at c's call of the enter hook: c's frame is set up (the walks have
    b's return address), its shadow frame is not pushed yet."""
    _cap, st, oracle, frames = shadow_stop(request, "c-hook-call", unwinder)
    enter = Symbolizer(st.space).address_of(HOOK_ENTER)
    return Accepted(st, oracle, frames, (1, 1), {
        "function": "c", "ip": st.regs.ip,
        "calls_before_ip": lambda calls: hex(enter) not in calls,
    }, (EXTRA,))


def accept_uninstrumented_tail_call(request):
    """shadow_tail.c at getppid in spin (fp): the shadow stack has spin (its call site quiet's end)
    and loud, not quiet, built without the hooks; FP has quiet's frame.  quiet's return address in
    spin's frame is its end, loud's first byte: looked up at itself it would be loud, which is
    instrumented; as a return address it is looked up at ra - 1, in quiet."""
    cap = _fixture(request, "shadow_tail_snaps")
    st = stack_of(cap.snaps["spin-raw"], "fp")
    oracle, frames = shadow_of(st, cap.binary)
    q0, q1 = cap.symbols["quiet"]
    assert st.trace.ips[1] == frames.ips[1] == q1 == cap.start("loud")
    return Accepted(st, oracle, frames, (2, 2), {"function": "quiet", "start": q0, "end": q1}, (EXTRA,))


def refuse_shadow(request, name: str, i: int, unwinder: str = "fp"):
    _cap, st, oracle, frames = shadow_stop(request, name, unwinder)
    return Refused(st, div(st, oracle, frames, EXTRA, i, 1))


def refuse_shadow_pushed(request):
    """Built by hand: at getppid in c the walk and the shadow stack agree; an EXTRA of frame #1
    there, where c's shadow frame is pushed (its enter hook's call is behind the IP)."""
    _cap, st, oracle, frames = shadow_stop(request, "c-raw")
    assert st.trace.ips == list(frames.ips)
    return Refused(st, div(st, oracle, frames, EXTRA, 1, 1))


def vdso_stop(request, unwinder: str = "fp"):
    cap = _fixture(request, "vdso_snaps")
    st = stack_of(cap.snaps["in-vdso"], unwinder)
    oracle, frames = shadow_of(st, cap.binary)
    return cap, st, oracle, frames


def accept_uninstrumented(request, unwinder):
    """vdso.c shadow build inside __vdso_clock_gettime, its frame set up: the walk has the vDSO
    function's return address (into glibc's clock_gettime), the shadow stack goes from the IP to
    b (read_clock's call site)."""
    _cap, st, oracle, frames = vdso_stop(request, unwinder)
    sym = Symbolizer(st.space)
    assert sym.functions(st.trace.ips[:3]) == ["__vdso_clock_gettime", "__clock_gettime", "b"]
    assert sym.functions(frames.ips[:2]) == ["__vdso_clock_gettime", "b"]
    return Accepted(st, oracle, frames, (1, 1), {"function": "__vdso_clock_gettime", "module": "[vdso]"},
                    (EXTRA,))


def refuse_vdso(request):
    """The vDSO's EXTRA (shadow-uninstrumented's case)."""
    _cap, st, oracle, frames = vdso_stop(request)
    return Refused(st, div(st, oracle, frames, EXTRA, 1, 1))


def startup_stop(request, unwinder: str = "fp"):
    """callchain shadow build in glibc's start-up at mprotect: the shadow stack has the IP only;
    FP from __mprotect (no frame of its own) reads a garbage frame through the rbp glibc left."""
    cap = _fixture(request, "shadow_startup")
    st = stack_of(cap.snaps["mprotect"], unwinder)
    oracle, frames = shadow_of(st, cap.binary)
    assert frames.ips == (st.regs.ip,) and len(st.trace) >= 2
    return cap, st, oracle, frames


def accept_uninstrumented_startup(request, unwinder):
    cap, st, oracle, frames = startup_stop(request, unwinder)
    return Accepted(st, oracle, frames, (1, 1), {"function": "__mprotect", "module": cap.binary}, (EXTRA,))


def refuse_shadow_past_end_instrumented(request):
    """Built by hand: callchain shadow build at getppid in c, the shadow's frames cut after b's
    return address: a PAST_END from b, which is instrumented (its call site is the shadow's)."""
    _cap, st, oracle, frames = shadow_stop(request, "c-raw")
    cut = dataclasses.replace(frames, ips=frames.ips[:2])
    return Refused(st, div(st, oracle, cut, PAST_END, 2, 2))


# cfi-no-fde -------------------------------------------------------------------------------------------

def nofde_stop(request):
    return cfi_stop(request, "nofde_snaps", "spin-raw", "fp")


def accept_cfi_no_fde(request):
    """nofde.c at getppid in spin: no FDE covers spin, the CFI walk ends at once (not at the
    outermost frame); FP goes on."""
    cap, st, oracle, frames = nofde_stop(request)
    assert frames.ips == (st.regs.ip,) and not frames.outermost
    assert len(st.trace) >= 2
    return Accepted(st, oracle, frames, (1, 1), {
        "address": st.regs.ip, "module": cap.binary, "unchecked": len(st.trace) - 1,
        "text": lambda t: t == (f"no .eh_frame FDE covers {st.regs.ip:#x} ({cap.binary}): the CFI walk ends there "
                                f"and the {len(st.trace) - 1} frame(s) the unwinder reports past it are unchecked"),
    }, (PAST_END,))


def refuse_cfi_no_fde_case(request):
    """nofde.c at getppid in spin: CFI ended for want of an FDE (cfi-no-fde's case)."""
    _cap, st, oracle, frames = nofde_stop(request)
    return Refused(st, div(st, oracle, frames, PAST_END, 1, 1))


def fde_gap(path: str) -> tuple[int, int]:
    """(end, start): the first bytes of ``path``'s text that no .eh_frame FDE covers, at least 2,
    between the FDE that ends at ``end`` and the one that starts at ``start``."""
    with open(path, "rb") as f:
        fdes = sorted((e["initial_location"], e["initial_location"] + e["address_range"])
                      for e in ELFFile(f).get_dwarf_info().EH_CFI_entries() if isinstance(e, FDE))
    return next((end, start) for (_s, end), (start, _e) in pairwise(fdes) if start - end >= 2)


def cfi_ended_at(request, which: str) -> tuple[Stack, Oracle, OracleFrames, Divergence, int]:
    """Built by hand: callchain fp static (host) at getppid in c, CFI's frames cut after b's return
    address and one frame more, an address of the binary by its FDEs (:func:`fde_gap`): ``end``
    (the first byte past an FDE, as a return address: its call, the byte before, is covered),
    ``end+1`` (a return address whose call byte is not covered either), ``start`` (an FDE's first
    byte as an interrupted IP: covered; the byte before it is not), ``stack`` (an address in the
    anonymous [stack] mapping, as generated code's would be: no ELF file)."""
    cap, st, oracle, frames = cfi_stop(request, "fp_stops", "c-raw", "fp")
    end, start = fde_gap(cap.binary)
    x = {"end": end, "end+1": end + 1, "start": start, "stack": st.regs.sp + 8}[which]
    marks = frozenset({0, 2}) if which == "start" else frozenset({0})
    cut = dataclasses.replace(frames, ips=(*frames.ips[:2], x), marks=marks, outermost=False)
    return st, oracle, cut, div(st, oracle, cut, PAST_END, 3, 3), x


def accept_cfi_no_fde_at_a_return_address(request):
    st, oracle, frames, d, x = cfi_ended_at(request, "end+1")
    return Accepted(st, oracle, frames, (3, 3), {
        "address": x, "module": st.space.elf_at(x).path, "unchecked": len(st.trace) - 3,
        "text": lambda t: t.startswith(f"no .eh_frame FDE covers {x:#x} ({st.space.elf_at(x).path}): "),
    }, (PAST_END,), d)


def accept_cfi_no_fde_in_no_elf(request):
    st, oracle, frames, d, x = cfi_ended_at(request, "stack")
    assert st.space.elf_at(x - 1) is None
    return Accepted(st, oracle, frames, (3, 3), {
        "address": x, "module": "", "unchecked": len(st.trace) - 3,
        "text": lambda t: t.startswith(f"no .eh_frame FDE covers {x:#x} (no ELF file (anonymous or generated code)): "),
    }, (PAST_END,), d)


def refuse_cfi_fde_covers_the_probe(request, which: str):
    st, _oracle, _frames, d, _x = cfi_ended_at(request, which)
    return Refused(st, d)


def refuse_cfi_outermost(request):
    """Built by hand: the same PAST_END, as if CFI had ended at the outermost frame."""
    _cap, st, oracle, frames = nofde_stop(request)
    return Refused(st, div(st, oracle, frames, PAST_END, 1, 1, outermost=True))


def refuse_cfi_fde_covers(request):
    """Built by hand: callchain fp at getppid in c, CFI's frames cut after a's return address (which
    a's FDE covers) and marked as not outermost; FP goes on to main."""
    _cap, st, oracle, frames = cfi_stop(request, "fp_snaps", "c-raw", "fp")
    cut = dataclasses.replace(frames, ips=frames.ips[:3], outermost=False)
    assert Symbolizer(st.space).name(cut.ips[2]).startswith("a+")
    return Refused(st, div(st, oracle, cut, PAST_END, 3, 3))


# cfi-untracked-sp-change -----------------------------------------------------------------------------

def go_nanotime_stop(request, name: str):
    return cfi_stop(request, "go_nanotime_snaps", name, "fp")


def _nanotime1_paths(paths) -> bool:
    # both ways to the call: on g0 (jne over the switch), and from a goroutine (g0's saved sp)
    return (any(p.startswith("sub rsp, 0x10; and rsp, 0xfffffffffffffff0: rsp -") for p in paths)
            and any(p.startswith("mov rsp, qword ptr") and p.endswith("loaded from elsewhere") for p in paths))


def accept_untracked_sp_vdso(request):
    """gospin in __vdso_clock_gettime called by runtime.nanotime1 (the flake's stack, there on
    sysmon's g0): the row at the return address is nanotime1's after its prologue, CFA = rsp+32,
    but nanotime1 has moved rsp since; the word read as the return address is the m.vdsoSP it
    saved, 0, so CFI ends there, and FP goes on to nanotime1's callers."""
    cap, st, oracle, frames = go_nanotime_stop(request, "nt-vdso")
    start, end = cap.symbols["runtime.nanotime1.abi0"]
    assert Symbolizer(st.space).name(st.regs.ip).startswith("__vdso_clock_gettime+")
    assert len(frames.ips) == 2 and start < frames.ips[1] < end, frames
    assert frames.outermost and "return address 0" in frames.stop
    assert tuple(st.trace.ips[:2]) == frames.ips and len(st.trace) > 3  # FP: the vDSO keeps a frame
    return Accepted(st, oracle, frames, (2, 2), {
        "function": "runtime.nanotime1.abi0", "address": frames.ips[1], "row_start": start + 4,
        "row": "CFA = rsp+32, return address at CFA-8", "paths": _nanotime1_paths, "unchecked": len(st.trace) - 2,
        "text": lambda t: t.startswith(f"the CFI row at the return address {frames.ips[1]:#x} in runtime.nanotime1.abi0 ")
        and "read as the return address (0: it ended there as at the outermost frame) is another one" in t
        and f"and the {len(st.trace) - 2} frame(s) the unwinder reports past it are unchecked" in t,
    }, (PAST_END,))


def accept_untracked_sp_at_the_ip(request, name: str):
    """gospin in runtime.nanotime1, an interrupted IP where rsp is realigned: the same row, the same
    word read, 0.  nt-call: at its call of the vDSO.  nt-ret: the instruction after it (campaign
    run h3 on QEMU 7.2, 2026-12-06: sysmon's g0, a TB start), also where the syscall fallback after
    the function's ret jumps back: the paths from the row's start leave the window and rejoin it."""
    cap, st, oracle, frames = go_nanotime_stop(request, name)
    start, _end = cap.symbols["runtime.nanotime1.abi0"]
    assert frames.ips == (st.regs.ip,) and frames.outermost and len(st.trace) > 2
    return Accepted(st, oracle, frames, (1, 1), {
        "function": "runtime.nanotime1.abi0", "address": st.regs.ip, "row_start": start + 4,
        "paths": _nanotime1_paths, "unchecked": len(st.trace) - 1,
        "text": lambda t: t.startswith(f"the CFI row at the IP {st.regs.ip:#x} in runtime.nanotime1.abi0 ")
        and re.search(r"the code moves rsp and no row follows \((sub|mov) rsp[^|]* \| (sub|mov) rsp", t) is not None,
    }, (PAST_END,))


def accept_untracked_sp_pie(request):
    """untracked_sp.c (-static-pie) at getppid in target: realign's row at the call (CFA = rsp+16,
    from after its push) does not hold there, its code has realigned rsp; the word read as the
    return address is the 0 realign wrote, so CFI ends there, and FP goes on through realign's
    frame pointer.  A row starts at the return address itself (CFA = rbp+16): the row the oracle
    used is ra - 1's.  The program is loaded at a bias: the row's start is a run-time address."""
    cap, st, oracle, frames = cfi_stop(request, "untracked_sp_snaps", "target-raw", "fp")
    bias = st.space.elf_at(st.regs.ip).bias
    r0, r1 = cap.symbols["realign"]
    assert bias and len(frames.ips) == 2 and r0 + bias < frames.ips[1] < r1 + bias
    assert frames.outermost and "return address 0" in frames.stop and len(st.trace) > 2
    e = st.space.elf_at(frames.ips[1])
    at_ra = cfi_table(e.image).row_for(e.link_address(frames.ips[1]))[0]["cfa"]
    assert at_ra.reg == 6 and at_ra.offset == 16  # rbp + 16 from the return address on
    return Accepted(st, oracle, frames, (2, 2), {
        "function": "realign", "address": frames.ips[1], "row_start": r0 + 1 + bias,
        "row": "CFA = rsp+16, return address at CFA-8", "unchecked": len(st.trace) - 2,
        "paths": lambda p: len(p) == 1 and p[0].startswith("sub rsp, 0x10; and rsp, 0xfffffffffffffff0"),
    }, (PAST_END,))


def refuse_untracked_sp_rbp_row(request):
    """Built by hand: untracked_sp.c at getppid in target, CFI's frames cut after the IP and
    marked as not outermost.  target keeps a frame pointer: its row at the IP takes the CFA from
    rbp (after push rbp; mov rsp,rbp), and every path from that row to the IP moves rsp (sub
    $0x20,%rsp for its locals), which an rbp-based CFA does not depend on."""
    _cap, st, oracle, frames = cfi_stop(request, "untracked_sp_snaps", "target-raw", "fp")
    ip, e, f = st.regs.ip, st.space.elf_at(st.regs.ip), st.code.function_at(st.regs.ip)
    row = cfi_table(e.image).row_for(e.link_address(ip))[0]
    paths = st.code.sp_paths(f, row["pc"] + e.bias, ip)
    assert f.name == "target" and row["cfa"].reg == 6 and row["cfa"].expr is None
    assert paths and all(p.moved for p in paths)
    cut = dataclasses.replace(frames, ips=frames.ips[:1], outermost=False)
    return Refused(st, div(st, oracle, cut, PAST_END, 1, 1))

def refuse_untracked_sp_before_writes(request):
    """Built by hand: gospin in runtime.nanotime1 before it moves rsp (at its cmp of m.curg), where
    CFI walks on to its callers, cut after the IP as if it had ended there: the same row, but no
    write of rsp on the way to the IP."""
    _cap, st, oracle, frames = go_nanotime_stop(request, "nt-cmp")
    assert len(frames.ips) > 2 and tuple(st.trace.ips[:2]) == frames.ips[:2]
    cut = dataclasses.replace(frames, ips=frames.ips[:1])
    return Refused(st, div(st, oracle, cut, PAST_END, 1, 1))


def refuse_untracked_sp_at_start(request):
    """Built by hand: callchain fp static (host) at getppid in c, CFI's whole walk (to _start, whose
    row leaves the return address undefined) and one frame more as the unwinder's: _start moves
    rsp with no row (pop; and $-16; push; push), but its end is the rule's own."""
    _cap, st, oracle, frames = cfi_stop(request, "fp_snaps", "c-raw", "fp")
    assert frames.outermost and Symbolizer(st.space).name(frames.ips[-1]).startswith("_start+")
    n = len(frames.ips)
    return Refused(st, Divergence("fp", "cfi", PAST_END, n, n, (*frames.ips, 0x401000), frames.ips, frames.marks,
                                  frames.outermost))


def refuse_untracked_sp_not_the_oracles_end(request, at: tuple[int, int]):
    """Built by hand: gospin in __vdso_clock_gettime (nt-vdso, cfi-untracked-sp-change's real case),
    the PAST_END put where the oracle's last frame is not the frame the unwinder stepped from: a
    frame later in the unwinder's walk (3, 2), or before the oracle's last frame (2, 1)."""
    _cap, st, oracle, frames = go_nanotime_stop(request, "nt-vdso")
    assert len(st.trace) > 3 and len(frames.ips) == 2
    return Refused(st, div(st, oracle, frames, PAST_END, *at))


def refuse_untracked_sp_no_oracle_frame(request):
    """Built by hand: gospin at nanotime1's call of the vDSO (nt-call), an oracle that gave no
    frame at all: there is no step of the oracle's to look at."""
    _cap, st, oracle, frames = go_nanotime_stop(request, "nt-call")
    return Refused(st, Divergence("fp", "cfi", PAST_END, 1, 0, tuple(st.trace.ips), (), frozenset(), False))


def refuse_untracked_sp_after_no_call(request):
    """Built by hand: gospin at nanotime1's call of the vDSO (nt-call), its IP taken as a return
    address (no mark): the instruction before it is `and rsp, -16`, no call, so it is no return
    address a row could be stale at, though rsp moved on every path to it."""
    _cap, st, oracle, frames = go_nanotime_stop(request, "nt-call")
    assert frames.ips == (st.regs.ip,)
    return Refused(st, div(st, oracle, frames, PAST_END, 1, 1, marks=frozenset()))


def refuse_untracked_sp_after_push(request):
    """Built by hand: callchain fp static (host) right after c's push %rbp (c-after-push), CFI's
    frames cut after the IP: the row at the IP is the one that follows the push (CFA = rsp+16),
    starting at the IP, so no instruction between the row and the IP moves rsp.  (The row before
    it, at the push, would see the push as a move no row follows.)"""
    _cap, st, oracle, frames = fp_stop(request, "c-after-push")
    cut = dataclasses.replace(frames, ips=frames.ips[:1], outermost=False)
    return Refused(st, div(st, oracle, cut, PAST_END, 1, 1))


def accept_untracked_sp_not_outermost(request):
    """Built by hand: nt-vdso's divergence (cfi-untracked-sp-change's real case) as if the CFI
    oracle had ended there for another reason than a return address of 0 (not outermost): the
    same row and paths, and the evidence does not say it ended as at the outermost frame."""
    cap, st, oracle, frames = go_nanotime_stop(request, "nt-vdso")
    start, _end = cap.symbols["runtime.nanotime1.abi0"]
    d = div(st, oracle, frames, PAST_END, 2, 2, outermost=False)
    return Accepted(st, oracle, frames, (2, 2), {
        "function": "runtime.nanotime1.abi0", "address": frames.ips[1], "row_start": start + 4,
        "text": lambda t: t.startswith(f"the CFI row at the return address {frames.ips[1]:#x} ")
        and "the word the oracle read as the return address is another one" in t,
    }, (PAST_END,), d)


# the registers causes --------------------------------------------------------------------------------

def regs_in_entry_asm(request):
    """callchain fp (host): a request at the getppid syscall entry in c (c-raw) that hit the entry
    asm, delivered at a later exit of the same run, with the registers at c's ret (c-ret)."""
    cap = _fixture(request, "fp_stops")
    want = with_syscall(cap.snaps["c-raw"].regs, SYS_GETPPID)
    st = stack_of(cap.snaps["c-ret"], "fp", request=Request(want, ENTRY_WINDOW, ENTRY_WINDOW, SYS_GETPPID, "main"))
    return st, *regs_of(st)


def accept_in_entry_asm(request):
    st, oracle, frames = regs_in_entry_asm(request)
    return Accepted(st, oracle, frames, (0, 0), {"window": ENTRY_WINDOW}, (REGS,))


def regs_signal_delivery(request):
    """signal.c at on_alarm's entry: the walk starts from the handler's registers; the request was
    about the registers the signal interrupted (the ones its frame saved)."""
    cap = _fixture(request, "signal_snaps")
    snap = cap.snaps["on-alarm"]
    space, mem = snap.address_space(), snap.memory()
    pretcode = word(mem, snap.regs.sp)
    saved = signal_frame_regs(space, mem, pretcode, snap.regs.sp + 8)
    assert saved is not None and Symbolizer(space).name(pretcode) == "__restore_rt+0x0"
    st = stack_of(snap, "fp", request=Request(saved, own="main"))
    return st, *regs_of(st), pretcode


def accept_signal_delivery(request):
    st, oracle, frames, pretcode = regs_signal_delivery(request)
    return Accepted(st, oracle, frames, (0, 0), {
        "pretcode": pretcode, "text": lambda t: f"(pretcode {pretcode:#x}: its CIE has 'S')" in t}, (REGS,))


def regs_execve(request):
    """nofde.c run with exec: the request was about the registers at its execve syscall entry
    (in-execve); the walk starts from those execve installed, at the new image's _start."""
    cap = _fixture(request, "nofde_snaps")
    new = cap.snaps["new-image"]
    want = with_syscall(cap.snaps["in-execve"].regs, SYS_EXECVE)
    assert new.regs.ip == cap.start("_start") and new.regs.fresh_exec and not want.fresh_exec
    st = stack_of(new, "fp", request=Request(want, syscall=SYS_EXECVE, own="main"))
    return st, *regs_of(st)


def regs_execve_not_replaced(request, which: str):
    """nofde.c run with exec, a request at its execve: ``in-execve``, the walk on the old image's
    registers (the execve had not replaced them); ``getppid``, the new image's fresh registers but
    the request's syscall another (getppid): neither is the new image walked for an execve."""
    cap = _fixture(request, "nofde_snaps")
    if which == "in-execve":
        old = cap.snaps["in-execve"]
        want = with_syscall(old.regs, SYS_EXECVE)
        st = stack_of(old, "fp", regs=want, request=Request(want, syscall=SYS_EXECVE, own="main"))
    else:
        new = cap.snaps["new-image"]
        want = with_syscall(cap.snaps["in-execve"].regs, SYS_GETPPID)
        st = stack_of(new, "fp", request=Request(want, syscall=SYS_GETPPID, own="main"))
    assert st.regs.fresh_exec == (which == "getppid")
    return st, *regs_of(st)


def accept_execve(request):
    st, oracle, frames = regs_execve(request)
    return Accepted(st, oracle, frames, (0, 0), {"syscall": SYS_EXECVE}, (REGS,))


def regs_sigreturn(request):
    """signal.c at the rt_sigreturn syscall entry (IP in __restore_rt, sp at the signal frame): the
    walk starts from the registers it restores (the interrupted ones, read from the frame)."""
    cap = _fixture(request, "signal_snaps")
    snap = cap.snaps["sigreturn"]
    want = with_syscall(snap.regs, SYS_RT_SIGRETURN)
    restored = signal_frame_regs(snap.address_space(), snap.memory(), want.ip, want.sp)
    assert restored is not None and Symbolizer(snap.address_space()).name(want.ip).startswith("__restore_rt+")
    st = stack_of(snap, "fp", regs=restored, request=Request(want, syscall=SYS_RT_SIGRETURN, own="main"))
    return st, *regs_of(st)


def accept_sigreturn(request):
    st, oracle, frames = regs_sigreturn(request)
    return Accepted(st, oracle, frames, (0, 0), {
        "frame_sp": st.request.want.sp,
        "text": lambda t: t == ("the task was in rt_sigreturn and the walked registers are those it restored from the "
                                f"signal frame at sp {st.request.want.sp:#x}")}, (REGS,))


def accept_sigreturn_own_restorer_changed(request):
    """signal.c at the rt_sigreturn syscall entry (the program's own task), the restorer's first
    byte changed in memory: the frame is read by its CFI ('S'), which does not rest on the code."""
    st, oracle, frames = regs_sigreturn(request)
    at = st.request.want.ip - 9
    mem = corrupt(st.memory, at, bytes([st.memory.read(at, 1)[0] ^ 0xFF]))
    st = dataclasses.replace(st, memory=mem)
    return Accepted(st, oracle, frames, (0, 0), {"frame_sp": st.request.want.sp}, (REGS,))


def regs_sigreturn_other_syscall(request):
    """signal.c at the rt_sigreturn syscall entry, the request's syscall taken as another one
    (getppid's): the registers are those the frame would restore, but the task was not restoring."""
    st, oracle, frames = regs_sigreturn(request)
    st = dataclasses.replace(st, request=dataclasses.replace(st.request, syscall=SYS_GETPPID))
    return st, oracle, frames


def foreign(build):
    """``build``'s stack as the engine builds it for another task than the program's (its subshell,
    say): an address space that maps none of its binaries, so no CFI says where a restorer is."""
    def of_foreign(request):
        st, *rest = build(request)
        return (dataclasses.replace(st, space=AddressSpace([], memory=st.memory),
                                    request=dataclasses.replace(st.request, own=None)), *rest)
    of_foreign.__doc__ = f"{build.__doc__} As another task: no mapping known."
    return of_foreign


def accept_foreign(build, evidence):
    def accept(request):
        st, oracle, frames, *_ = foreign(build)(request)
        return Accepted(st, oracle, frames, (0, 0), evidence, (REGS,))
    accept.__doc__ = build.__doc__
    return accept


def own_task_unmapped(build):
    """``build``'s stack of the program's own task whose space maps no restorer: the space is the
    task's own and authoritative, so the kernel-layout reading (for other tasks) is not tried."""
    def refuse(request):
        st, oracle, frames, *_ = build(request)
        st = dataclasses.replace(st, space=AddressSpace([], memory=st.memory))
        return Refused(st, div(st, oracle, frames, REGS, 0, 0))
    return refuse


def restorer_not_rt_sigreturn(build, at):
    """``build``'s foreign stack over memory where the restorer's first byte differs: the kernel's
    frame layout is not read for code that is not rt_sigreturn."""
    def refuse(request):
        st, oracle, frames, *_ = foreign(build)(request)
        addr = at(st)
        mem = corrupt(st.memory, addr, bytes([st.memory.read(addr, 1)[0] ^ 0xFF]))
        return Refused(dataclasses.replace(st, memory=mem), div(st, oracle, frames, REGS, 0, 0))
    return refuse


def without_request(build, keep: bool):
    """``build``'s stack with no request (the engine knows none of this stop), or (``keep``) with
    its request but without the registers it wanted (a request the engine could not read them
    for): the registers causes compare with what the request wanted, and refuse."""
    def refuse(request):
        st, oracle, frames, *_ = build(request)
        d = div(st, oracle, frames, REGS, 0, 0)
        req = dataclasses.replace(st.request, want=None) if keep else None
        return Refused(dataclasses.replace(st, request=req), d)
    refuse.__doc__ = build.__doc__
    return refuse


def refuse_regs(build):
    def refuse(request, *args):
        st, oracle, frames, *_ = build(request, *args)
        return Refused(st, div(st, oracle, frames, REGS, 0, 0))
    refuse.__doc__ = build.__doc__
    return refuse


# the kernel's perf callchain ---------------------------------------------------------------------------

def perf_oracle(request, which: str) -> tuple[PerfOracle, list]:
    """A fresh PerfOracle (``harness perf``'s) over one of the two real captures of
    tests/unit/perf/test_oracle_fixture.py (callchain fp static, host toolchain, in the default guest, every sample at
    the getppid syscall in c), and its records."""
    cap = _fixture(request, "perf_captures")[which]
    return PerfOracle(cap), cap.records()


def perf_fp(request, *, max_stack: int | None = None, dump: int | None = None, cut: int | None = None):
    """The plain capture's first sample, judged against perf_callchain_user()'s chain: with
    ``max_stack`` as kernel.perf_event_max_stack and the chain cut there (``cut``), or the stack
    dump cut to ``dump`` bytes."""
    o, recs = perf_oracle(request, "plain")
    s = recs[0]
    if max_stack is not None:
        o.source.max_stack = max_stack
    if dump is not None:
        s = dataclasses.replace(s, stack=s.stack[:dump])
    st = o.stack(s, s.user[:cut] if cut else s.user, False)
    frames = o.perf.frames(st)
    assert isinstance(frames, OracleFrames), frames
    return s, st, o.perf, frames


def accept_perf_unchecked_fp(request):
    """Real: the plain capture's first sample.  Our walk stops after __libc_start_call_main
    (glibc's rbp is an address in .data, below sp); perf_callchain_user() reads on."""
    _s, st, oracle, frames = perf_fp(request)
    assert st.trace.stop.reason is StopReason.FP_BELOW_SP and len(frames.ips) == 7 and len(st.trace) == 5
    return Accepted(st, oracle, frames, (5, 5), {
        "check": "fp < sp", "fp": st.trace.frames[-1].fp, "return_address": None,  # fp + 8 is not in the dump
        "text": lambda t: t.endswith("(perf_callchain_user) lacks the check and reads on: fp + 8 is not in the dump"),
    }, (ENDS,))


def accept_perf_max_stack(request):
    """Built by hand over the real sample: the chain as a kernel with perf_event_max_stack = 4
    would give it (its first 4 entries); our walk has 5."""
    _s, st, oracle, frames = perf_fp(request, max_stack=4, cut=4)
    assert not frames.outermost
    return Accepted(st, oracle, frames, (4, 4), {"max_stack": 4, "kernel_entries": 4, "unwinder_entries": 5},
                    (PAST_END,))


def accept_perf_ran_off_dump(request):
    """Built by hand over the real sample: its stack dump cut to 0x48 bytes (as ``--stack 72``
    would copy): our walk faults reading b's frame record, the kernel read it in live memory."""
    s, st, oracle, frames = perf_fp(request, dump=0x48)
    sp = s.regs.sp
    assert st.trace.stop.reason is StopReason.FAULT
    return Accepted(st, oracle, frames, (2, 2), {
        "fault": st.trace.stop.addr, "dump": [sp, sp + 0x48],
        "text": lambda t: f"outside the 72 bytes dumped at sp [{sp:#x}, {sp + 0x48:#x}); the kernel read on" in t,
    }, (ENDS,))


def perf_deferred(request, k: int):
    o, recs = perf_oracle(request, "deferred")
    s = recs[k]
    assert isinstance(s, Sample) and s.deferred
    return o, recs, s


def accept_perf_exit_unanswered(request):
    """Built by hand over the real deferred capture: its last entry (sample 18) as if its
    CALLCHAIN_DEFERRED (record 19) had not come before the task's PERF_RECORD_EXIT (record 20):
    the stack and the divergence as DeferredChecker builds them for an unanswered entry."""
    o, recs, s = perf_deferred(request, 18)
    assert isinstance(recs[20], TaskEvent) and recs[20].kind == "exit"
    st = o.stack(s, None, True, seq=18, exit_seq=20)
    frames = o.perf.frames(st)
    d = Divergence(PERF_UNWINDER, "perf", PAST_END, 0, 0, tuple(st.trace.ips), frames.ips, frames.marks,
                   frames.outermost)
    return Accepted(st, o.perf, frames, (0, 0), {"exit": 20}, (PAST_END,), d)


def refuse_perf_exit(request, which: str):
    """Built by hand over the real captures, one fact of the unanswered entry changed: ``frames``,
    the kernel's record compared after all (the oracle has frames); ``answered``, record 19 there
    and the exit after it, with no frame compared; ``fp``, the plain capture's first sample (an FP
    chain, no deferred record) with an exit after it and no chain."""
    if which == "fp":
        o, recs = perf_oracle(request, "plain")
        s = recs[0]
        st = o.stack(s, None, False, seq=0, exit_seq=1)
    else:
        o, recs, s = perf_deferred(request, 18)
        st = o.stack(s, recs[19].ips if which == "answered" else None, True, seq=18, exit_seq=20)
    want = tuple(recs[19].ips) if which == "frames" else ()
    return Refused(st, Divergence(PERF_UNWINDER, "perf", PAST_END, len(want), len(want), tuple(st.trace.ips), want,
                                  frozenset({0}), False))


def accept_perf_after_callback(request):
    """Built by hand over the real deferred capture: sample 2 as a later sample of sample 0's
    entry, after that entry's CALLCHAIN_DEFERRED (record 1), on other registers (its ip moved by
    one byte: every sample of the capture has the same registers, and the predicate looks only at
    the order of the records)."""
    o, recs, s0 = perf_deferred(request, 0)
    s2 = recs[2]
    s2 = dataclasses.replace(s2, regs=dataclasses.replace(s2.regs, ip=s2.regs.ip + 1))
    st = o.stack(s2, None, True, seq=2, record_seq=1, entry_first=s0)
    r, f = s2.regs, s0.regs
    d = Divergence(PERF_UNWINDER, "perf", REGS, 0, 0, (r.ip, r.sp, r.bp), (f.ip, f.sp, f.bp))
    return Accepted(st, o.perf, OracleFrames(()), (0, 0), {"record": 1, "sample": 2}, (REGS,), d)


def refuse_perf_deferred_ends(request):
    """Built by hand: an ENDS of the real deferred sample 0 (answered by record 1): the deferred
    record is unwind_user() itself, which has the checks."""
    o, recs, s = perf_deferred(request, 0)
    st = o.stack(s, recs[1].ips, True, seq=0, record_seq=1)
    frames = o.perf.frames(st)
    return Refused(st, div(st, o.perf, frames, ENDS, len(st.trace) - 1, len(st.trace) - 1))


def refuse_perf_deferred_past_end(request, max_stack: int | None = None):
    """Built by hand: a PAST_END of the real deferred sample 18, answered by its record 19 (not
    left unanswered at exit, not an FP chain cut at perf_event_max_stack, even where that is as
    short as the record: ``max_stack``)."""
    o, recs, s = perf_deferred(request, 18)
    if max_stack is not None:
        o.source.max_stack = max_stack
    st = o.stack(s, recs[19].ips, True, seq=18, record_seq=19)
    frames = o.perf.frames(st)
    return Refused(st, div(st, o.perf, dataclasses.replace(frames, ips=frames.ips[:3], outermost=False),
                           PAST_END, 3, 3))


def refuse_perf_max_stack_marked(request, max_stack: int, outermost: bool):
    """Built by hand: the plain capture's first sample, its chain cut after 4 entries and marked
    ``outermost`` against the oracle's own marking: a chain shorter than perf_event_max_stack
    (127) is no cut at it, and one the oracle says ended where the stack ends is none either."""
    _s, st, oracle, frames = perf_fp(request, max_stack=max_stack, cut=4)
    return Refused(st, div(st, oracle, frames, PAST_END, 4, 4, outermost=outermost))


def refuse_perf_not_a_sample(request, kind: str):
    """Built by hand: callchain fp static (host) at getppid in c under gdb, a stack that is no perf
    sample, with a divergence from the perf oracle: the perf causes look only at a sample."""
    _cap, st, oracle, frames = fp_stop(request, "c-raw")
    n = len(st.trace)
    if kind == REGS:
        r = st.regs
        return Refused(st, Divergence(PERF_UNWINDER, "perf", REGS, 0, 0, (r.ip + 1, r.sp, r.bp), (r.ip, r.sp, r.bp)))
    i = n - 1 if kind == ENDS else 2
    return Refused(st, Divergence(PERF_UNWINDER, "perf", kind, i, i, tuple(st.trace.ips), frames.ips[:i],
                                  frozenset({0}), False))


def refuse_perf_stop_at(request, reason: StopReason, where: Callable[[Sample], int]):
    """Built by hand: the plain capture's first sample, our walk's end given another stop: a fault
    inside the dumped bytes (which the walk could read), or a stop at an address outside them
    that is no fault (fp < sp): neither is a read off the dump."""
    s, st, oracle, frames = perf_fp(request)
    stop = dataclasses.replace(st.trace.stop, reason=reason, addr=where(s))
    st = dataclasses.replace(st, trace=dataclasses.replace(st.trace, stop=stop))
    return Refused(st, div(st, oracle, frames, ENDS, len(st.trace), len(st.trace)))


def refuse_perf_fp(request, spec: dict):
    """The plain capture's first sample (``spec``: perf_fp's arguments), the divergence at
    ``spec["at"]``."""
    _s, st, oracle, frames = perf_fp(request, **{k: v for k, v in spec.items() if k != "at"})
    kind, i, j = spec["at"]
    return Refused(st, div(st, oracle, frames, kind, i, j))


def refuse_perf_before_callback(request):
    """The real deferred sample 0, whose entry's record (1) comes after it: a regs divergence of
    it (built by hand: its registers are its entry's) is not one after the callback."""
    o, _recs, s = perf_deferred(request, 0)
    st = o.stack(s, None, True, seq=0, record_seq=1, entry_first=s)
    r = s.regs
    return Refused(st, Divergence(PERF_UNWINDER, "perf", REGS, 0, 0, (r.ip + 1, r.sp, r.bp), (r.ip, r.sp, r.bp)))


# --- the tables ---------------------------------------------------------------------------------------

ACCEPT = [
    *[Case("sframe-tail-call", f"tailcall-nofp-O2-{tc}:die-entry", accept_tail_call, (tc,)) for tc in TOOLCHAINS],
    *[Case("sframe-tail-call-next-fde", f"tailcall-nofp-O2-{tc}:spin-call", accept_tail_call_next_fde, (tc,))
      for tc in TOOLCHAINS],
    Case("sframe-tail-call-next-fde", "tailcall-nofp-O2-host:spin-call:stack-cut-below-dies-frame",
         accept_tail_call_next_fde_ends),
    Case("sframe-tail-call-next-fde", "nosframe-tail-host-stripped:die-sonly", accept_tail_call_next_fde_unnamed),
    *[Case("sframe-after-drap-fp-step", f"drap-nofp-static-host:target-raw:{path}", accept_after_drap, (path,))
      for path in ("direct", "shim")],
    *[Case("sframe-function-without-fde", f"callchain-nofp-static-{tc}:c-raw", accept_function_without_fde, (tc,))
      for tc in TOOLCHAINS],
    Case("sframe-function-without-fde", "callchain-fp-static-host:c-libc", accept_function_without_fde_syscall),
    Case("sframe-function-without-fde", "nosframe-tail-host:die-raw:at-_exits-end-after-no-call",
         accept_function_without_fde_after_no_call),
    *[Case("sframe-module-without-sframe", f"callchain-nofp-dyn-{tc}:c-raw", accept_module_without_sframe, (tc,))
      for tc in TOOLCHAINS],
    Case("sframe-module-without-sframe", "callchain-fp-nosframe-static-host:c-entry",
         accept_module_without_sframe_fallback_at, ("c-entry",)),
    Case("sframe-module-without-sframe", "callchain-fp-nosframe-static-host:c-push-rbp",
         accept_module_without_sframe_fallback_at, ("c-push-rbp",)),
    Case("sframe-module-without-sframe", "callchain-fp-nosframe-static-host:c-ret",
         accept_module_without_sframe_fallback_at, ("c-ret",)),
    Case("sframe-module-without-pt-gnu-sframe", "callchain-nofp-static-gold-host:c-raw",
         accept_module_without_pt_gnu_sframe),
    *[Case(NOCFI_CAUSES[kind], f"nocfi-epilogue-{kind}-host{'-stripped' if strip else ''}:bare-ret:by-hand",
           accept_fallback_at_a_bare_epilogue, (kind, strip)) for kind in NOCFI_LINKS for strip in (False, True)],
    Case("fp-frameless-function", "callchain-fp-static-host:c-raw:ends", accept_frameless_lscm),
    Case("fp-frameless-function", "callchain-fp-static-host:c-libc:lost", accept_frameless_syscall),
    Case("fp-prologue-ip", "callchain-fp-static-host:c-push-rbp", accept_prologue, ("c-push-rbp",)),
    Case("fp-prologue-ip", "callchain-fp-static-host:c-after-push", accept_prologue, ("c-after-push",)),
    Case("fp-prologue-ip", "callchain-fp-static-host:c-push-rbp:frameless-caller", accept_prologue_frameless_caller),
    Case("fp-epilogue-ip", "callchain-fp-static-host:c-ret", accept_epilogue),
    Case("signal-frame", "signal-fp-static-host:h2-syscall", accept_signal_frame),
    Case("signal-frame", "own-restorer-host:restorer", accept_signal_frame_at_the_restorer),
    Case("signal-frame", "own-restorer-host-stripped:restorer:a-return-address-past-its-end",
         accept_signal_frame_named_at_ra_minus_1),
    Case("truncated", "recurse-fp-static-host:rec-bottom:fp", accept_truncated, ("fp",)),
    Case("truncated", "recurse-fp-static-host:rec-bottom:sframe", accept_truncated, ("sframe",)),
    Case("shadow-in-hooks", "callchain-shadow-host:in-enter:fp", accept_in_hooks, ("fp",)),
    Case("shadow-in-hooks", "callchain-shadow-host:in-enter:sframe", accept_in_hooks, ("sframe",)),
    Case("shadow-uninstrumented", "vdso-shadow-host:in-vdso:fp", accept_uninstrumented, ("fp",)),
    Case("shadow-uninstrumented", "vdso-shadow-host:in-vdso:sframe", accept_uninstrumented, ("sframe",)),
    Case("shadow-uninstrumented", "callchain-shadow-host:mprotect:fp", accept_uninstrumented_startup, ("fp",)),
    Case("shadow-uninstrumented", "callchain-shadow-host:mprotect:sframe", accept_uninstrumented_startup,
         ("sframe",)),
    Case("shadow-uninstrumented", "shadow-tail-host:spin-raw:fp", accept_uninstrumented_tail_call),
    Case("shadow-hook-window", "callchain-shadow-host:c-hook-call:fp", accept_hook_window, ("fp",)),
    Case("shadow-hook-window", "callchain-shadow-host:c-hook-call:sframe", accept_hook_window, ("sframe",)),
    Case("cfi-no-fde", "nofde-host:spin-raw", accept_cfi_no_fde),
    Case("cfi-no-fde", "callchain-fp-static-host:c-raw:cut-at-a-return-address-past-an-fde",
         accept_cfi_no_fde_at_a_return_address),
    Case("cfi-no-fde", "callchain-fp-static-host:c-raw:cut-at-an-address-on-the-stack", accept_cfi_no_fde_in_no_elf),
    Case("cfi-untracked-sp-change", "gospin-go:nt-vdso", accept_untracked_sp_vdso),
    Case("cfi-untracked-sp-change", "gospin-go:nt-call", accept_untracked_sp_at_the_ip, ("nt-call",)),
    Case("cfi-untracked-sp-change", "gospin-go:nt-ret", accept_untracked_sp_at_the_ip, ("nt-ret",)),
    Case("cfi-untracked-sp-change", "gospin-go:nt-vdso:not-outermost", accept_untracked_sp_not_outermost),
    Case("cfi-untracked-sp-change", "untracked-sp-static-pie-host:target-raw", accept_untracked_sp_pie),
    Case("request-in-entry-asm", "callchain-fp-static-host:c-raw->c-ret", accept_in_entry_asm),
    Case("signal-delivery", "signal-fp-static-host:on-alarm", accept_signal_delivery),
    Case("signal-delivery", "signal-fp-static-host:on-alarm:foreign-task",
         accept_foreign(regs_signal_delivery, {"text": lambda t: ": its code is rt_sigreturn) saved exactly" in t})),
    Case("sigreturn-restored", "signal-fp-static-host:sigreturn:foreign-task",
         accept_foreign(regs_sigreturn, {"frame_sp": lambda sp: isinstance(sp, int)})),
    Case("execve-replaced", "nofde-host:in-execve->new-image", accept_execve),
    Case("sigreturn-restored", "signal-fp-static-host:sigreturn", accept_sigreturn),
    Case("sigreturn-restored", "signal-fp-static-host:sigreturn:restorer-changed", accept_sigreturn_own_restorer_changed),
    Case("perf-unchecked-fp", "perf-callchain-7.3.4:sample-0", accept_perf_unchecked_fp),
    Case("perf-max-stack", "perf-callchain-7.3.4:sample-0:max-stack-4", accept_perf_max_stack),
    Case("perf-ran-off-dump", "perf-callchain-7.3.4:sample-0:dump-0x48", accept_perf_ran_off_dump),
    Case("perf-exit-unanswered", "perf-callchain-defer-7.3.4:sample-18:record-19-left-out",
         accept_perf_exit_unanswered),
    Case("perf-after-callback", "perf-callchain-defer-7.3.4:sample-2-in-sample-0s-entry",
         accept_perf_after_callback),
]

REFUSE = [
    # a divergence at __libc_start_call_main, a return address that is not its function's end
    Case("sframe-tail-call", "callchain-nofp-static-sid:c-raw:function-without-fde's",
         refuse_function_without_fde_case, ("sid",)),
    Case("sframe-tail-call", "tailcall-nofp-O2-host:spin-call:next-fde's", refuse_tail_spin_call, ("host",)),
    Case("sframe-tail-call", "vdso-host:in-vdso:corrupt-ra", refuse_vdso_corrupt),
    Case("sframe-tail-call", "nosframe-tail-host:die-raw:no-fde-of-its-own", refuse_tail_call_without_its_fde),
    Case("sframe-tail-call", "nosframe-tail-host:die-raw:at-mains-end-after-no-call", after_no_call,
         ("die-raw", "main", ENDS)),
    Case("sframe-tail-call", "nosframe-tail-host:die-trap:symbol-past-the-fde", refuse_tail_call_before_a_trap),
    Case("sframe-after-drap-fp-step", "drap-nofp-static-host:target-raw:one-frame-up",
         refuse_after_drap_before_the_caller),
    Case("sframe-after-drap-fp-step", "callchain-nofp-static-host:c-raw:function-without-fde's",
         lambda request: _refused_from(accept_function_without_fde(request, "host"))),
    Case("sframe-tail-call-next-fde", "nosframe-tail-host:die-fde:symbol-past-the-fde",
         refuse_tail_call_next_before_a_trap),
    Case("sframe-tail-call-next-fde", "nosframe-tail-host:die-next:at-dies-end-after-no-call", after_no_call,
         ("die-next", "die", DIFFERS)),
    Case("sframe-tail-call-next-fde", "nosframe-tail-host:die-next:an-fde-inside-the-call",
         refuse_tail_call_next_fde_inside_the_call),
    # the step that went wrong was FP's, not SFrame's
    Case("sframe-tail-call-next-fde", "tailcall-nofp-O2-host:die-entry:tail-call's", refuse_tail_die_entry, ("host",)),
    Case("sframe-tail-call-next-fde", "tailcall-nofp-O2-sid:die-entry:tail-call's", refuse_tail_die_entry, ("sid",)),
    # a call in tail position (left to sframe-tail-call); a function that keeps rbp; no table at all
    Case("sframe-function-without-fde", "tailcall-nofp-O2-host:die-entry:tail-call's", refuse_tail_die_entry,
         ("host",)),
    Case("sframe-function-without-fde", "tailcall-nofp-O2-sid:die-entry:tail-call's", refuse_tail_die_entry,
         ("sid",)),
    Case("sframe-function-without-fde", "vdso-host:in-vdso:corrupt-ra", refuse_vdso_corrupt),
    Case("sframe-function-without-fde", "callchain-nofp-dyn-trixie:c-raw:module-without-sframe's",
         refuse_module_without_sframe_case, ("trixie",)),
    # the module has .sframe; a module without it where FP can step
    Case("sframe-module-without-sframe", "callchain-nofp-static-trixie:c-raw:function-without-fde's",
         refuse_function_without_fde_case, ("trixie",)),
    Case("sframe-module-without-sframe", "vdso-host:in-vdso:corrupt-ra", refuse_vdso_corrupt),
    # a module with .sframe and no PT_GNU_SFRAME, and one with neither
    Case("sframe-module-without-sframe", "callchain-nofp-static-gold-host:c-raw:no-pt-gnu-sframe's",
         refuse_gold_case),
    Case("sframe-module-without-pt-gnu-sframe", "callchain-nofp-dyn-trixie:c-raw:module-without-sframe's",
         refuse_module_without_sframe_case, ("trixie",)),
    # the issue's must-fail case: an FP loss at a function that sets up its frame
    Case("fp-frameless-function", "callchain-fp-static-host:c-raw:corrupt-lose-a", refuse_lose_a),
    Case("fp-frameless-function", "callchain-fp-static-host:c-push-rbp:prologue's", refuse_fp_stop_lost,
         ("c-push-rbp",)),
    Case("fp-frameless-function", "callchain-fp-static-host:c-ret:epilogue's", refuse_fp_stop_lost, ("c-ret",)),
    # an IP in c's body (frame set up), and the epilogue's ret
    Case("fp-prologue-ip", "callchain-fp-static-host:c-raw:corrupt-lose-b", refuse_lose_b_in_body),
    Case("fp-prologue-ip", "callchain-fp-static-host:c-ret:epilogue's", refuse_fp_stop_lost, ("c-ret",)),
    Case("fp-prologue-ip", "callchain-fp-static-host:c-raw:corrupt-lose-a", refuse_lose_a),
    Case("fp-prologue-ip", "callchain-fp-static-host:c-push-rbp:sframe-step", refuse_prologue_step_not_fp,
         ("c-push-rbp",)),
    Case("fp-epilogue-ip", "callchain-fp-static-host:c-ret:sframe-step", refuse_prologue_step_not_fp, ("c-ret",)),
    Case("fp-epilogue-ip", "callchain-fp-static-host:c-raw:corrupt-lose-b", refuse_lose_b_in_body),
    Case("fp-epilogue-ip", "callchain-fp-static-host:c-push-rbp:prologue's", refuse_fp_stop_lost, ("c-push-rbp",)),
    # lost frames not below a trampoline
    Case("signal-frame", "callchain-fp-static-host:c-libc:frameless'", refuse_signal_frame_syscall),
    Case("signal-frame", "signal-fp-static-host:h2-syscall:not-an-ip", refuse_signal_frame_not_an_ip),
    Case("signal-frame", "callchain-fp-static-host:c-raw:corrupt-lose-a", refuse_lose_a),
    Case("signal-frame", "callchain-fp-static-host:c-push-rbp:prologue's", refuse_fp_stop_lost, ("c-push-rbp",)),
    # a limit that is not the stack's max_entries; an end that is not at a limit
    Case("truncated", "recurse-fp-static-host:rec-bottom:walk-cut-at-100", refuse_truncated_other_limit),
    Case("truncated", "callchain-fp-static-host:c-raw:frameless'", refuse_fp_ends_at_lscm),
    # the shadow stack: the IP outside the hooks, an instrumented function, a pushed frame
    Case("shadow-in-hooks", "callchain-shadow-host:c-hook-call:hook-window's", refuse_shadow, ("c-hook-call", 1)),
    Case("shadow-in-hooks", "vdso-shadow-host:in-vdso:uninstrumented's", refuse_vdso),
    Case("shadow-uninstrumented", "callchain-shadow-host:c-hook-call:hook-window's", refuse_shadow,
         ("c-hook-call", 1)),
    Case("shadow-uninstrumented", "callchain-shadow-host:in-enter:sframe:frame-2", refuse_shadow,
         ("in-enter", 2, "sframe")),
    Case("shadow-uninstrumented", "callchain-shadow-host:c-raw:cut-past-end-at-b", refuse_shadow_past_end_instrumented),
    Case("shadow-hook-window", "vdso-shadow-host:in-vdso:uninstrumented's", refuse_vdso),
    Case("shadow-hook-window", "callchain-shadow-host:in-enter:sframe:frame-2", refuse_shadow,
         ("in-enter", 2, "sframe")),
    Case("shadow-hook-window", "callchain-shadow-host:c-raw:pushed", refuse_shadow_pushed),
    # CFI ended at the outermost frame; an FDE covers CFI's last frame
    Case("cfi-no-fde", "nofde-host:spin-raw:outermost", refuse_cfi_outermost),
    Case("cfi-no-fde", "callchain-fp-static-host:c-raw:cut-at-a", refuse_cfi_fde_covers),
    # the oracle's last frame looked up where the oracle looked: a return address at ra - 1, an IP at itself
    Case("cfi-no-fde", "callchain-fp-static-host:c-raw:cut-at-an-fdes-end-as-a-return-address",
         refuse_cfi_fde_covers_the_probe, ("end",)),
    Case("cfi-no-fde", "callchain-fp-static-host:c-raw:cut-at-an-fdes-start-as-an-ip",
         refuse_cfi_fde_covers_the_probe, ("start",)),
    # rsp not moved on the way to the IP; the return address undefined; a row from rbp
    Case("cfi-untracked-sp-change", "gospin-go:nt-cmp:cut-at-the-ip", refuse_untracked_sp_before_writes),
    Case("cfi-untracked-sp-change", "callchain-fp-static-host:c-raw:past-start", refuse_untracked_sp_at_start),
    Case("cfi-untracked-sp-change", "callchain-fp-static-host:c-raw:cut-at-a", refuse_cfi_fde_covers),
    # the divergence not at the oracle's end, or after a frame of the unwinder's that is not its last
    Case("cfi-untracked-sp-change", "gospin-go:nt-vdso:a-frame-later", refuse_untracked_sp_not_the_oracles_end,
         ((3, 2),)),
    Case("cfi-untracked-sp-change", "gospin-go:nt-vdso:before-the-oracles-last", refuse_untracked_sp_not_the_oracles_end,
         ((2, 1),)),
    Case("cfi-untracked-sp-change", "gospin-go:nt-call:no-oracle-frame", refuse_untracked_sp_no_oracle_frame),
    # a "return address" after no call; the row that starts at the IP; no FDE at all (cfi-no-fde's)
    Case("cfi-untracked-sp-change", "gospin-go:nt-call:as-a-return-address", refuse_untracked_sp_after_no_call),
    Case("cfi-untracked-sp-change", "callchain-fp-static-host:c-after-push:cut-at-the-ip", refuse_untracked_sp_after_push),
    Case("cfi-untracked-sp-change", "nofde-host:spin-raw:no-fde's", refuse_cfi_no_fde_case),
    Case("cfi-untracked-sp-change", "untracked-sp-static-pie-host:target-raw:cut-at-the-ip:rbp-row",
         refuse_untracked_sp_rbp_row),
    # the registers: each cause on the others' cases
    Case("request-in-entry-asm", "signal-fp-static-host:on-alarm:signal-delivery's", refuse_regs(regs_signal_delivery)),
    Case("request-in-entry-asm", "nofde-host:new-image:execve's", refuse_regs(regs_execve)),
    Case("signal-delivery", "signal-fp-static-host:sigreturn:sigreturn's", refuse_regs(regs_sigreturn)),
    Case("signal-delivery", "signal-fp-static-host:on-alarm:own-task-unmapped",
         own_task_unmapped(regs_signal_delivery)),
    Case("sigreturn-restored", "signal-fp-static-host:sigreturn:own-task-unmapped", own_task_unmapped(regs_sigreturn)),
    Case("signal-delivery", "signal-fp-static-host:on-alarm:foreign-task:restorer-changed",
         restorer_not_rt_sigreturn(regs_signal_delivery, lambda st: word(st.memory, st.regs.sp))),
    Case("sigreturn-restored", "signal-fp-static-host:sigreturn:foreign-task:restorer-changed",
         restorer_not_rt_sigreturn(regs_sigreturn, lambda st: st.request.want.ip - 9)),
    Case("signal-delivery", "callchain-fp-static-host:c-ret:entry-asm's", refuse_regs(regs_in_entry_asm)),
    Case("signal-delivery", "nofde-host:new-image:execve's", refuse_regs(regs_execve)),
    Case("execve-replaced", "signal-fp-static-host:sigreturn:sigreturn's", refuse_regs(regs_sigreturn)),
    Case("execve-replaced", "callchain-fp-static-host:c-ret:entry-asm's", refuse_regs(regs_in_entry_asm)),
    Case("execve-replaced", "nofde-host:in-execve:not-replaced", refuse_regs(regs_execve_not_replaced), ("in-execve",)),
    Case("execve-replaced", "nofde-host:new-image:in-getppid", refuse_regs(regs_execve_not_replaced), ("getppid",)),
    Case("sigreturn-restored", "signal-fp-static-host:on-alarm:signal-delivery's",
         refuse_regs(regs_signal_delivery)),
    Case("sigreturn-restored", "nofde-host:new-image:execve's", refuse_regs(regs_execve)),
    Case("sigreturn-restored", "signal-fp-static-host:sigreturn:in-getppid", refuse_regs(regs_sigreturn_other_syscall)),
    # no request known; one without the registers it wanted (what the two signal causes compare)
    *[Case(cause, f"{what}:{'request-without-registers' if keep else 'no-request'}", without_request(build, keep))
      for cause, what, build, keeps in (
          ("signal-delivery", "signal-fp-static-host:on-alarm", regs_signal_delivery, (False, True)),
          ("sigreturn-restored", "signal-fp-static-host:sigreturn", regs_sigreturn, (False, True)),
          ("execve-replaced", "nofde-host:in-execve->new-image", regs_execve, (False,)),
          ("request-in-entry-asm", "callchain-fp-static-host:c-raw->c-ret", regs_in_entry_asm, (False,)))
      for keep in keeps],
    # the kernel's perf callchain
    Case("perf-unchecked-fp", "perf-callchain-defer-7.3.4:sample-0:deferred", refuse_perf_deferred_ends),
    Case("perf-unchecked-fp", "perf-callchain-7.3.4:sample-0:dump-0x48:ran-off-dump's", refuse_perf_fp,
         ({"dump": 0x48, "at": (ENDS, 2, 2)},)),
    Case("perf-ran-off-dump", "perf-callchain-7.3.4:sample-0:unchecked-fp's", refuse_perf_fp,
         ({"at": (ENDS, 5, 5)},)),
    Case("perf-max-stack", "perf-callchain-7.3.4:sample-0:cut-at-4-max-stack-127", refuse_perf_fp,
         ({"cut": 4, "at": (PAST_END, 4, 4)},)),
    Case("perf-max-stack", "perf-callchain-defer-7.3.4:sample-18:deferred", refuse_perf_deferred_past_end),
    Case("perf-exit-unanswered", "perf-callchain-defer-7.3.4:sample-18:answered", refuse_perf_deferred_past_end),
    Case("perf-after-callback", "perf-callchain-defer-7.3.4:sample-0:before-its-record", refuse_perf_before_callback),
    Case("perf-max-stack", "perf-callchain-7.3.4:sample-0:cut-at-4-not-outermost", refuse_perf_max_stack_marked,
         (127, False)),
    Case("perf-max-stack", "perf-callchain-7.3.4:sample-0:max-stack-4-outermost", refuse_perf_max_stack_marked,
         (4, True)),
    Case("perf-max-stack", "perf-callchain-defer-7.3.4:sample-18:deferred-max-stack-3", refuse_perf_deferred_past_end,
         (3,)),
    Case("perf-ran-off-dump", "perf-callchain-7.3.4:sample-0:fault-in-the-dump", refuse_perf_stop_at,
         (StopReason.FAULT, lambda s: s.regs.sp + 8)),
    Case("perf-ran-off-dump", "perf-callchain-7.3.4:sample-0:fp-below-sp-off-the-dump", refuse_perf_stop_at,
         (StopReason.FP_BELOW_SP, lambda s: s.regs.sp + len(s.stack) + 0x100)),
    *[Case("perf-exit-unanswered", f"perf-callchain-defer-7.3.4:sample-18:exit:{which}", refuse_perf_exit, (which,))
      for which in ("frames", "answered")],
    Case("perf-exit-unanswered", "perf-callchain-7.3.4:sample-0:exit-after-an-fp-sample", refuse_perf_exit, ("fp",)),
    *[Case(cause, f"callchain-fp-static-host:c-raw:no-perf-sample:{kind}", refuse_perf_not_a_sample, (kind,))
      for cause, kind in (("perf-max-stack", PAST_END), ("perf-ran-off-dump", ENDS), ("perf-unchecked-fp", ENDS),
                          ("perf-after-callback", REGS), ("perf-exit-unanswered", PAST_END))],
]


# --- the tests ------------------------------------------------------------------------------------------

@functools.cache
def examiner() -> CrossExaminer:
    """One witness for the module: the tools' outputs are asked once a file."""
    return CrossExaminer()


# Accepted cases whose claims no tool can be asked (the case id, and the outcome expected instead).
UNCLAIMED: dict[str, str] = {
    # the address the CFI walk ended at is on the stack: in no ELF file
    "cfi-no-fde:callchain-fp-static-host:c-raw:cut-at-an-address-on-the-stack": UNVERIFIABLE,
    # another task's signal frame, read by the kernel's own layout (the restorer's code): no CFI asked
    "signal-delivery:signal-fp-static-host:on-alarm:foreign-task": UNVERIFIABLE,
}


def test_every_cause_has_cases():
    accepted = {c.cause for c in ACCEPT}
    refused = {c.cause for c in REFUSE}
    assert not set(CAUSES) - accepted, f"causes without an accepting case: {sorted(set(CAUSES) - accepted)}"
    assert not set(CAUSES) - refused, f"causes without a refusing case: {sorted(set(CAUSES) - refused)}"
    assert accepted | refused <= set(CAUSES), f"cases of unknown causes: {sorted((accepted | refused) - set(CAUSES))}"


@pytest.mark.parametrize("case", [c.param() for c in ACCEPT])
def test_cause_accepts(case: Case, request):
    a = case.build(request, *case.args)
    assert isinstance(a, Accepted)
    if a.divergence is not None:
        d = explain(a.stack, a.divergence)
        v = PairVerdict(a.stack.unwinder, a.oracle.name, EXPLAINED if d.explained else FAILURE, [d])
    else:
        v = judge(a.stack, a.oracle, a.frames)
    assert v.verdict == EXPLAINED, describe(v)
    at = [d for d in v.divergences if (d.got_index, d.want_index) == a.at]
    assert len(at) == 1, f"no divergence at {a.at}:\n{describe(v)}"
    d = at[0]
    assert a.kinds is None or d.kind in a.kinds, describe(v)
    assert d.cause == case.cause, describe(v)
    assert d.evidence["text"] and d.text == f"{d.what()}: {d.evidence['text']}"
    for key, want in a.evidence.items():
        have = d.evidence.get(key)
        assert (want(have) if callable(want) else have == want), f"evidence {key!r} is {have!r}:\n{describe(v)}"
    # the predicate on its own, on the divergence as align built it, gives the same evidence
    again = CAUSES[case.cause].predicate(a.stack, dataclasses.replace(d, cause=None, evidence=None))
    assert again == d.evidence
    # and the toolchain's own tools, asked the cause's claims about the binaries, confirm them all
    crossed = examiner().review(a.stack, v)
    d = next(x for x in crossed.divergences if (x.got_index, x.want_index) == a.at)
    if case.cause in NO_CLAIMS:
        assert d.cross is None and not d.testimony
        return
    assert crossed.verdict == EXPLAINED, describe(crossed) + "\n" + "\n".join(map(str, d.testimony))
    want = UNCLAIMED.get(f"{case.cause}:{case.what}", CONFIRMED)
    assert d.cross == want and d.testimony, "\n".join(map(str, d.testimony))


@pytest.mark.parametrize("case", [c.param() for c in REFUSE])
def test_cause_refuses(case: Case, request):
    r = case.build(request, *case.args)
    assert isinstance(r, Refused)
    c = CAUSES[case.cause]
    assert c.applies(r.divergence), f"{case.cause} is never tried on a {r.divergence.kind} of " \
                                    f"{r.divergence.unwinder} vs {r.divergence.oracle}: the refusal proves nothing"
    assert c.predicate(r.stack, r.divergence) is None


# No cause may prove these: the walk went wrong where nothing known explains it.
UNEXPLAINED = [
    pytest.param(lose_a, 2, id="fp-lost-a-which-sets-up-its-frame"),
    pytest.param(lose_b_in_body, 1, id="fp-lost-b-from-an-ip-in-cs-body"),
    pytest.param(vdso_corrupt, 1, id="sframe-fp-fallback-from-a-vdso-function-with-its-frame"),
]


@pytest.mark.parametrize("build, j", UNEXPLAINED)
def test_an_unexplained_loss_is_a_failure(build, j, request):
    st, oracle, frames = build(request)
    v = judge(st, oracle, frames)
    assert v.verdict == FAILURE, describe(v)
    first = v.first_unexplained()
    assert first is not None and first.want_index == j and first.kind in (LOST, DIFFERS), describe(v)
    # and every cause tried on it refuses, not just the first
    for c in CAUSES.values():
        if c.applies(first):
            assert c.predicate(st, first) is None, c.name


def test_shadow_uninstrumented_past_the_shadows_end(request):
    """The PAST_END story of the start-up stop, which align tries and proves too (its single
    EXTRA wins the tie): the frames past an uninstrumented function are beyond the shadow stack."""
    _cap, st, oracle, frames = startup_stop(request)
    d = div(st, oracle, frames, PAST_END, 1, 1)
    assert CAUSES["shadow-uninstrumented"].applies(d)
    ev = CAUSES["shadow-uninstrumented"].predicate(st, d)
    assert ev is not None and ev["function"] == "__mprotect" and ev["unchecked"] == len(st.trace) - 1
    assert ev["text"].startswith("the shadow stack ends below __mprotect")
    assert f"the {len(st.trace) - 1} frame(s) past it are beyond what the shadow stack can know" in ev["text"]


def test_shadow_uninstrumented_at_a_hooks_first_byte(request):
    """The in-enter stop (shadow-in-hooks' case, which explain() tries first): the IP is the enter
    hook's first byte, looked up at itself (not at the byte before, another function's), and the
    hook is built without the instrumentation, so shadow-uninstrumented's own rule holds there."""
    _cap, st, oracle, frames = shadow_stop(request, "in-enter")
    assert st.code.function_at(st.regs.ip).start == st.regs.ip
    ev = CAUSES["shadow-uninstrumented"].predicate(st, div(st, oracle, frames, EXTRA, 1, 1))
    assert ev is not None and ev["function"] == HOOK_ENTER and ev["start"] == st.regs.ip


def test_a_lost_frame_after_the_unwinders_last_has_no_step(request):
    """Built by hand over a real stop (align makes an ENDS of it, never this LOST): callchain fp
    static (host) at getppid in c, where FP ends after __libc_start_call_main and CFI goes on, the
    oracle's next frame as LOST at (5, 5).  No frame of the unwinder's took a step there, so
    ``_step`` has none to name (not the frame past the walk's end: there is none), and the step
    causes, which ask it, refuse."""
    _cap, st, oracle, frames = fp_stop(request, "c-raw")
    n = len(st.trace)
    assert n == 5 and len(frames.ips) > n and st.trace.ips == list(frames.ips[:n])
    d = div(st, oracle, frames, LOST, n, n)
    assert _step(st, d) is None
    for c in CAUSES.values():
        if c.applies(d) and c.name.startswith(("fp-", "sframe-")):
            assert c.predicate(st, d) is None, c.name


def test_a_tail_call_in_a_function_without_sframe_is_explained(request):
    """nosframe_tail at getppid in die: the SFrame walk ends at tail_exit's return address (its
    end), where neither the address nor the call before it has an SFrame FDE: the kernel's lookup
    at ra finds none, as ra - 1's would, and the FP fallback cannot step from tail_exit.  That is
    sframe-function-without-fde's case (tail_exit's object carried no .sframe)."""
    _cap, st, oracle, frames = nosframe_tail_stop(request)
    v = judge(st, oracle, frames)
    assert v.verdict == EXPLAINED, describe(v)
    assert [d.cause for d in v.divergences] == ["sframe-function-without-fde"], describe(v)


def test_a_tail_call_into_the_next_fde_without_its_own_is_explained(request):
    """nosframe_tail next at getppid in die: the kernel's SFrame lookup at tail_exit_next's return
    address (its end) finds die's FDE and applies its entry row, as sframe-tail-call-next-fde says;
    that tail_exit_next has no SFrame FDE of its own changes nothing in the lookup."""
    _cap, st, oracle, frames = nosframe_tail_next_stop(request)
    v = judge(st, oracle, frames)
    assert v.verdict == EXPLAINED, describe(v)
    assert v.divergences[0].cause == "sframe-tail-call-next-fde", describe(v)


