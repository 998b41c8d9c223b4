"""FP, CFI (and SFrame, where the parser is present) on stacks captured from real host runs.

A session fixture builds ``guest_programs/callchain.c`` with the host, trixie and sid toolchains
(frame pointers on and off, static and dynamic), runs each on the host under gdb and captures
snapshots at chosen IPs (harness/tools/capture_gdb.py).  The tests then unwind the snapshots
and check that the unwinders agree where they should, and that the known divergences appear,
named, where they should:

* FP at a prologue IP (``push %rbp`` not yet run, or run but ``mov %rsp,%rbp`` not) loses the
  caller; the function-entry frame recovers it only at the ``push %rbp`` itself;
* FP through glibc's ``syscall()`` (a leaf without a frame) loses ``c``;
* FP stops in glibc, built without frame pointers, after ``__libc_start_call_main`` while CFI
  continues to ``__libc_start_main`` and ``_start``.
"""

from __future__ import annotations

import re
import shutil

import pytest

from harness.images.errors import ImageError
from harness.tools.capture_gdb import CaptureError, StopPoint, capture_program
from harness.unwind.snapshot import Snapshot
from harness.unwind.symbolize import Symbolizer
from harness.unwind.user import EntryFrame, StopReason, UnwinderType, unwind_user
from tests.support.captured import Captured, funcs, get, walk
from tests.support.gating import require

TOOLCHAINS = ("host", "trixie", "sid")
ITER = "1000000"

FP_STOPS = [
    StopPoint("b-entry", "break", "b"),
    StopPoint("c-push-rbp", "insn", "c", "push   %rbp"),
    StopPoint("c-after-push", "insn", "c", "push   %rbp", after=1),
    StopPoint("c-raw", "syscall", syscall="getppid"),
]
NOFP_STOPS = [
    # without frame pointers c still pushes rbp, as a callee-saved register after push %r12
    StopPoint("c-push-rbp", "insn", "c", "push   %rbp"),
    StopPoint("c-raw", "syscall", syscall="getppid"),
]
LIBC_STOPS = [StopPoint("c-libc", "syscall", syscall="getppid")]


@pytest.fixture(scope="session")
def captures(tmp_path_factory) -> dict[tuple[str, bool, bool], Captured | str]:
    """Every (toolchain, fp, static) build, captured; a string says why one is missing."""
    from harness.images.programs import Variant, build_program
    from harness.images.toolchain import get_toolchain

    out: dict[tuple[str, bool, bool], Captured | str] = {}
    if shutil.which("gdb") is None:
        return {k: "gdb is not installed" for k in _keys()}
    root = tmp_path_factory.mktemp("snapshots")
    for tc_name in TOOLCHAINS:
        try:
            tc = get_toolchain(tc_name)
        except ImageError as exc:
            for k in _keys():
                if k[0] == tc_name:
                    out[k] = f"toolchain {tc_name} unavailable: {exc}"
            continue
        for fp in (True, False):
            for static in (True, False):
                key = (tc_name, fp, static)
                try:
                    prog = build_program("callchain", tc, Variant(frame_pointers=fp, static=static))
                    d = root / f"{tc_name}-{fp}-{static}"
                    capture_program(prog, [ITER, "raw"], FP_STOPS if fp else NOFP_STOPS, d)
                    capture_program(prog, [ITER, "libc"], LIBC_STOPS, d)
                except (ImageError, CaptureError) as exc:
                    out[key] = f"{tc_name} fp={fp} static={static}: {exc}"
                    continue
                snaps = {p.name: Snapshot.load(p) for p in d.iterdir()}
                out[key] = Captured(tc_name, fp, static, snaps, prog)
    return out


def _keys():
    return [(t, fp, st) for t in TOOLCHAINS for fp in (True, False) for st in (True, False)]


ALL = pytest.mark.parametrize("tc", TOOLCHAINS)
LINKS = pytest.mark.parametrize("static", [True, False], ids=["static", "dyn"])
CHAIN = ["c", "b", "a", "main"]


def glibc_tail(static: bool) -> list[str | None]:
    # __libc_start_call_main is a local symbol: only a static binary's .symtab names it; a
    # stripped libc.so.6 has no entry for it in .dynsym.
    return ["__libc_start_call_main" if static else None, "__libc_start_main", "_start"]


@ALL
@LINKS
def test_fp_and_cfi_agree_inside_c_and_fp_stops_in_glibc(captures, tc, static):
    cap = get(captures, tc, True, static)
    fp, cfi, sym = walk(cap.snaps["c-raw"])
    assert funcs(sym, cfi) == CHAIN + glibc_tail(static)
    assert cfi.stop.reason is StopReason.END_OF_CHAIN  # _start's CFI marks RA undefined
    # FP agrees with CFI frame for frame up to glibc's first function without frame pointers...
    assert fp.ips[:5] == cfi.ips[:5]
    assert [f.sp for f in fp][:5] == [f.sp for f in cfi][:5]
    # ... and ends there: main's saved rbp is whatever __libc_start_call_main kept in rbp.  Most
    # glibc builds leave a small integer (fp < sp at once); sid's libc.so.6 leaves a stack
    # pointer, and FP takes one more, garbage, frame whose "return address" points into [stack]
    # before the CFA comes out misaligned.
    assert fp.stop.reason.is_error, fp.stop
    assert len(fp) in (5, 6)
    if len(fp) == 6:
        assert cap.snaps["c-raw"].address_space().mapping_at(fp.ips[5]).path == "[stack]"
        assert fp.stop.reason is StopReason.MISALIGNED_CFA
    assert set(fp.types[1:]) == {UnwinderType.FP}


@ALL
@LINKS
def test_symbolized_chain_reads_c_b_a_main(captures, tc, static):
    cap = get(captures, tc, True, static)
    fp, cfi, sym = walk(cap.snaps["c-raw"])
    names = sym.trace(fp.ips)
    for name, func in zip(names, CHAIN, strict=False):
        assert re.fullmatch(rf"{func}\+0x[0-9a-f]+", name), names
    if not static:
        assert re.fullmatch(r"libc\.so\.6\+0x[0-9a-f]+", names[4]), names


@ALL
@LINKS
def test_fp_loses_c_through_glibc_syscall_wrapper(captures, tc, static):
    cap = get(captures, tc, True, static)
    fp, cfi, sym = walk(cap.snaps["c-libc"])
    assert funcs(sym, cfi)[:5] == ["syscall"] + CHAIN
    assert funcs(sym, fp)[:4] == ["syscall", "b", "a", "main"]  # c is lost: syscall() keeps no frame
    assert fp.ips[1:4] == cfi.ips[2:5]


@ALL
@LINKS
def test_fp_loses_caller_at_push_rbp_and_entry_frame_recovers_it(captures, tc, static):
    cap = get(captures, tc, True, static)
    snap = cap.snaps["c-push-rbp"]
    fp, cfi, sym = walk(snap)
    assert funcs(sym, cfi)[:4] == CHAIN
    assert funcs(sym, fp)[:3] == ["c", "a", "main"]  # b lost: mainline without a uprobe
    any_ip = unwind_user(snap.memory(), snap.regs, entry_frame=EntryFrame.ANY_IP)
    assert any_ip.ips[:5] == cfi.ips[:5]  # the full chain down to glibc, as CFI has it
    assert any_ip.types[1] is UnwinderType.FP_ENTRY
    uprobe = unwind_user(snap.memory(), snap.regs, entry_frame=EntryFrame.UPROBE)
    assert uprobe.ips == any_ip.ips


@ALL
@LINKS
def test_fp_loses_caller_after_push_before_mov(captures, tc, static):
    cap = get(captures, tc, True, static)
    snap = cap.snaps["c-after-push"]
    fp, cfi, sym = walk(snap)
    assert funcs(sym, cfi)[:4] == CHAIN
    assert funcs(sym, fp)[:3] == ["c", "a", "main"]
    # the entry frame does not help here: the instruction at IP is mov %rsp,%rbp
    any_ip = unwind_user(snap.memory(), snap.regs, entry_frame=EntryFrame.ANY_IP)
    assert any_ip.ips == fp.ips


@ALL
@LINKS
def test_function_entry_of_b(captures, tc, static):
    cap = get(captures, tc, True, static)
    snap = cap.snaps["b-entry"]
    fp, cfi, sym = walk(snap)
    assert funcs(sym, cfi)[:3] == ["b", "a", "main"]
    assert funcs(sym, fp)[:2] == ["b", "main"]
    any_ip = unwind_user(snap.memory(), snap.regs, entry_frame=EntryFrame.ANY_IP)
    assert funcs(sym, any_ip)[:3] == ["b", "a", "main"]


@ALL
@LINKS
def test_without_frame_pointers_cfi_still_unwinds_and_fp_does_not(captures, tc, static):
    cap = get(captures, tc, False, static)
    fp, cfi, sym = walk(cap.snaps["c-raw"])
    assert funcs(sym, cfi) == CHAIN + glibc_tail(static)
    assert len(fp) < len(cfi)
    assert fp.stop.reason.is_error
    assert funcs(sym, fp)[:4] != CHAIN

    fp_libc, cfi_libc, _ = walk(cap.snaps["c-libc"])
    assert funcs(sym, cfi_libc)[:5] == ["syscall"] + CHAIN


def test_snapshots_are_small_and_reload(captures, tmp_path):
    cap = get(captures, "host", True, True)
    snap = cap.snaps["c-raw"]
    stack = snap.region("stack")
    assert stack is not None and len(stack.data) <= 64 * 1024
    again = Snapshot.load(snap.save(tmp_path / "copy"))
    assert again.regs == snap.regs and again.maps_text == snap.maps_text
    assert unwind_user(again.memory(), again.regs).ips == unwind_user(snap.memory(), snap.regs).ips


def test_vdso_is_symbolized_from_memory(captures):
    cap = get(captures, "host", True, False)
    snap = cap.snaps["c-raw"]
    space = snap.address_space()
    vdso = space.elf_at(space.mappings_of("[vdso]")[0].start)
    require(vdso is not None, "no [vdso] captured")
    sym = Symbolizer(space)
    addr = sym.address_of("__vdso_clock_gettime", "[vdso]") or sym.address_of("clock_gettime", "[vdso]")
    assert addr is not None
    assert sym.name(addr).endswith("clock_gettime+0x0")


# --- mixed SFrame + FP (harness/sframe tables of the mapped ELFs) -------------------------------

def mixed(snap: Snapshot):
    from harness.unwind.mixed import sframe_tables_for

    space = snap.address_space()
    return unwind_user(snap.memory(), snap.regs, tables_for=sframe_tables_for(space))


FPS = pytest.mark.parametrize("fp", [True, False], ids=["fp", "nofp"])


@ALL
@FPS
@LINKS
def test_sframe_fp_and_cfi_agree_through_the_program(captures, tc, fp, static):
    cap = get(captures, tc, fp, static)
    snap = cap.snaps["c-raw"]
    fpt, cfi, sym = walk(snap)
    mix = mixed(snap)
    # The program's own functions have SFrame (as --gsframe, V1/V2/V3 by toolchain): c, b, a,
    # main unwind by SFrame, frame pointers or not, and agree with CFI frame for frame.
    assert mix.ips[:5] == cfi.ips[:5] and [f.sp for f in mix][:5] == [f.sp for f in cfi][:5]
    assert mix.types[1:5] == [UnwinderType.SFRAME] * 4
    if fp:
        assert fpt.ips[:5] == mix.ips[:5]  # all three agree where the binary has all three
    else:
        assert funcs(sym, fpt)[:4] != CHAIN  # FP alone cannot unwind -fomit-frame-pointer code
    # glibc carries no SFrame here: the walk falls back to FP there and ends like FP does
    assert mix.stop.reason.is_error
    assert all(t is UnwinderType.FP for t in mix.types[5:])


@ALL
@LINKS
def test_sframe_recovers_the_caller_at_a_prologue_ip(captures, tc, static):
    cap = get(captures, tc, True, static)
    for name in ("c-push-rbp", "c-after-push", "b-entry"):
        snap = cap.snaps[name]
        fpt, cfi, sym = walk(snap)
        mix = mixed(snap)
        n = 5 if name != "b-entry" else 4
        assert mix.ips[:n] == cfi.ips[:n], name
        assert len(fpt) < len(cfi) and fpt.ips[1] != cfi.ips[1], name  # FP loses the caller


@ALL
@FPS
@LINKS
def test_sframe_loses_c_in_glibc_syscall_wrapper_without_sframe(captures, tc, fp, static):
    cap = get(captures, tc, fp, static)
    snap = cap.snaps["c-libc"]
    fpt, cfi, sym = walk(snap)
    mix = mixed(snap)
    assert funcs(sym, cfi)[:5] == ["syscall"] + CHAIN
    if fp:
        # syscall() has no SFrame: the first step is FP, which skips c; SFrame takes over in b.
        assert funcs(sym, mix)[:4] == ["syscall", "b", "a", "main"]
        assert mix.types[1] is UnwinderType.FP and mix.types[2] is UnwinderType.SFRAME
    else:
        # Without frame pointers rbp is a general register in c (here n = 64): the FP step
        # from syscall() fails at once, fp < sp.
        assert mix.ips == [cfi.ips[0]] and mix.stop.reason is StopReason.FP_BELOW_SP


@ALL
@LINKS
def test_entry_frame_switch_misfires_on_a_callee_saved_push_rbp(captures, tc, static):
    """The ANY_IP heuristic takes every ``push %rbp`` for a function entry; in -fomit-frame-pointer
    code rbp is pushed as a callee-saved register after other pushes, sp does not point at the
    return address, and the "caller" it reports is a saved register value."""
    cap = get(captures, tc, False, static)
    snap = cap.snaps["c-push-rbp"]
    fpt, cfi, sym = walk(snap)
    assert funcs(sym, cfi)[:4] == CHAIN  # CFI knows the two-word CFA offset at this IP
    assert mixed(snap).ips[:4] == cfi.ips[:4]  # so does SFrame
    any_ip = unwind_user(snap.memory(), snap.regs, entry_frame=EntryFrame.ANY_IP)
    assert any_ip.types[1] is UnwinderType.FP_ENTRY
    assert any_ip.ips[1] != cfi.ips[1] and funcs(sym, any_ip)[1] != "b"
