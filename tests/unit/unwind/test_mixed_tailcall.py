"""A call in tail position, on real binaries and stacks captured under gdb (tests/support/cause_snapshots.py).

guest_programs/tailcall.c: main -> outer -> middle -> die -> spin, die and spin noreturn, so
``middle`` ends with ``call die`` and ``die`` with ``call spin``: each pushes a return address
equal to its own function's end.  The kernel's SFrame series looks every frame up with the IP
itself (REFERENCE.md section 3); DWARF CFI looks caller frames up at ``ra - 1``.  With the host
(SFrame V1), trixie (V2) and sid (V3) toolchains, -O2:

* middle's end lies in padding before outer: no FDE covers it, the SFrame lookup fails
  (``-ENOENT``), the walk falls back to frame pointers there.  Without frame pointers rbp holds
  whatever main left in it (argv with gcc 12 and 14, argc with gcc 16): the walk takes a garbage
  frame or stops at once, where CFI walks on through middle, outer and main;
* die's end is middle's first byte: the lookup finds middle's FDE, the wrong function's, and
  applies its first row (CFA = sp + 8, RA = *sp): a garbage frame, found "by SFrame";
* with frame pointers (``tailcall_fp_snaps``) the FP fallback at middle's end recovers outer,
  and SFrame resumes there; at die's end the wrong FDE still derails the walk, where FP alone
  and CFI are right.

The last test checks :func:`cause_snapshots.corrupt` on ``fp_snaps``.
"""

from __future__ import annotations

import shutil

import pytest

from harness.memory import MemoryFault
from harness.unwind.cfi import cfi_tables_for, unwind_cfi
from harness.unwind.mixed import sframe_tables_for
from harness.unwind.snapshot import Snapshot
from harness.unwind.symbolize import Symbolizer
from harness.unwind.user import StopReason, UnwinderType, unwind_user
from tests.support.cause_snapshots import TOOLCHAINS, CauseCapture, corrupt, got
from tests.support.objdump_text import functions

ALL = pytest.mark.parametrize("tc", TOOLCHAINS)
IN_DIE = pytest.mark.parametrize("stop", ["die-entry", "die-call"])
GLIBC_TAIL = ["__libc_start_call_main", "__libc_start_main", "_start"]
SF, FP, REGS = UnwinderType.SFRAME, UnwinderType.FP, UnwinderType.REGS

# What main left in rbp (-O2, no frame pointers, args "1000000 raw"): it is what the FP fallback
# at middle's end starts from.  A register-allocation fact of each toolchain's gcc.
RBP_FROM_MAIN = {"host": "argv", "trixie": "argv", "sid": "argc"}


def word(mem, addr: int) -> int:
    return int.from_bytes(mem.read(addr, 8), "little")


def cstring(mem, addr: int, limit: int = 4096) -> bytes:
    out = b""
    while len(out) < limit and (c := mem.read(addr + len(out), 1)) != b"\0":
        out += c
    return out


def walks(snap: Snapshot):
    """(SFrame-then-FP kernel walk, FP-only walk, CFI walk, symbolizer) on one snapshot."""
    space = snap.address_space()
    mem = snap.memory()
    mix = unwind_user(mem, snap.regs, tables_for=sframe_tables_for(space))
    fp = unwind_user(mem, snap.regs)
    cfi = unwind_cfi(mem, snap.regs, cfi_tables_for(space))
    return mix, fp, cfi, Symbolizer(space)


def call_target(mem, end: int) -> int | None:
    """The target of the ``call rel32`` that ends just before ``end``, None if there is none."""
    insn = mem.read(end - 5, 5)
    if insn[0] != 0xE8:
        return None
    return end + int.from_bytes(insn[1:], "little", signed=True)


# --- the layout: return addresses, symbol ends and FDE ranges ---------------------------------

@ALL
def test_return_addresses_are_function_ends_and_no_fde_covers_middles_end(tailcall_snaps, tc):
    cap = got(tailcall_snaps, tc)
    snap = cap.snaps["die-entry"]
    mem = snap.memory()
    table = cap.sframe()
    assert table.header.version == {"host": 1, "trixie": 2, "sid": 3}[tc]
    m0, m1 = cap.symbols["middle"]
    d0, d1 = cap.symbols["die"]

    # middle's and die's last instructions are the calls; at die's entry the pushed return
    # address is middle's end (symbol end = start + st_size).
    assert call_target(mem, m1) == d0
    assert call_target(mem, d1) == cap.start("spin")
    assert word(mem, snap.regs.sp) == m1

    # middle's FDE ends exactly at the return address, and no FDE covers it: the next FDE is
    # outer's, after the alignment padding.
    fde = table.find_fde(m0)
    assert (fde.func_start, fde.func_end) == (m0, m1)
    assert table.find_fde(m1) is None and table.find_fre(m1) is None and table.rule_for(m1) is None
    assert not [f for f in table.fdes if f.func_start <= m1 < f.func_end]
    after = min((f for f in table.fdes if f.func_start >= m1), key=lambda f: f.func_start)
    assert after.func_start == cap.start("outer") > m1

    # die's FDE ends at die's return address too, and that is where middle's FDE begins: the
    # lookup of die's return address finds the wrong function's FDE, at its first row.
    dfde = table.find_fde(d0)
    assert (dfde.func_start, dfde.func_end) == (d0, d1) and d1 == m0
    assert table.find_fde(d1) == fde
    match = table.find_fre(d1)
    assert match.fre.start == 0 and (match.fre.cfa.base, match.fre.cfa.offset) == ("sp", 8)

    # the program's own layout assumption (guest_programs/tailcall.c): callees first
    order = sorted(cap.symbols, key=lambda n: cap.symbols[n][0])
    assert [n for n in order if n != "main"] == ["leaf", "spin", "die", "middle", "outer"]


@ALL
def test_the_toolchains_own_objdump_shows_the_same_fde_ranges(tailcall_snaps, tc):
    """The FDE ranges around the tail calls as the toolchain's own libsframe prints them."""
    from harness.images.toolchain import get_toolchain

    cap = got(tailcall_snaps, tc)
    toolchain = get_toolchain(tc)
    outer, inner = toolchain.workdir(f"tailcall-objdump-{cap.variant.tag}")
    try:
        shutil.copy(cap.binary, outer / "tailcall")
        text = toolchain.run(["objdump", "--sframe", "tailcall"], cwd=inner).stdout
    finally:
        shutil.rmtree(outer, ignore_errors=True)
    ranges = {f.pc: f.pc + f.size for f in functions(text)}
    m0, m1 = cap.symbols["middle"]
    d0, d1 = cap.symbols["die"]
    assert ranges[d0] == d1 == m0 and ranges[m0] == m1
    assert not [pc for pc, end in ranges.items() if pc <= m1 < end]
    assert min(pc for pc in ranges if pc >= m1) == cap.start("outer")
    assert ranges == {f.func_start: f.func_end for f in cap.sframe().fdes}


# --- IP in die: the caller's frame is at middle's end, outside every FDE ----------------------

@ALL
@IN_DIE
def test_cfi_walks_through_the_tail_call(tailcall_snaps, tc, stop):
    cap = got(tailcall_snaps, tc)
    _, _, cfi, sym = walks(cap.snaps[stop])
    assert sym.functions(cfi.ips) == ["die", "middle", "outer", "main"] + GLIBC_TAIL
    assert cfi.ips[1] == cap.end("middle")  # looked up at ra - 1: inside middle
    assert sym.trace(cfi.ips)[1] == f"middle+{cap.end('middle') - cap.start('middle'):#x}"
    assert cfi.stop.reason is StopReason.END_OF_CHAIN and cfi.stopped_in is UnwinderType.CFI
    assert set(cfi.types[1:]) == {UnwinderType.CFI}


@ALL
@IN_DIE
def test_sframe_walk_finds_no_fre_at_middles_end_and_falls_back_to_fp(tailcall_snaps, tc, stop):
    cap = got(tailcall_snaps, tc)
    snap = cap.snaps[stop]
    mix, fp, cfi, sym = walks(snap)
    mem = snap.memory()
    end = cap.end("middle")

    # die's own FRE takes the walk to middle's end, as CFI does ...
    assert mix.frames[0].ip == snap.regs.ip and mix.frames[0].how is REGS
    assert sym.functions(mix.ips[:1]) == ["die"]
    assert mix.frames[1].ip == end and mix.frames[1].how is SF
    assert mix.frames[1].sp == cfi.frames[1].sp
    # ... where the lookup of the IP itself finds no FRE (-ENOENT): the next step is FP's,
    assert sframe_tables_for(snap.address_space())(end).rule_for(end) is None
    # from the rbp die never touched (its rows keep FP "u"): the value main left there.
    assert mix.frames[1].fp == snap.regs.bp
    if RBP_FROM_MAIN[tc] == "argc":
        # rbp = 3 = argc: fp < sp, the walk ends at once, in FP
        assert snap.regs.bp == 3
        assert len(mix) == 2
        assert mix.stop.reason is StopReason.FP_BELOW_SP and mix.stopped_in is FP
    else:
        # rbp = argv: FP reads argv[1], the address of the string "1000000", as the return
        # address: a garbage frame in [stack], then the walk ends in error, in FP.
        bp = snap.regs.bp
        assert word(mem, bp - 8) == 3 and cstring(mem, word(mem, bp + 8)) == b"1000000"
        assert mix.frames[2].how is FP and mix.frames[2].ip == word(mem, bp + 8)
        assert snap.address_space().mapping_at(mix.frames[2].ip).path == "[stack]"
        assert sym.functions(mix.ips)[2] is None
        assert all(f.how is FP for f in mix.frames[2:])
        assert mix.stop.reason.is_error and mix.stopped_in is FP
    # either way outer, main and glibc are never reached; CFI reaches them.
    assert not set(mix.ips) & set(cfi.ips[2:])
    assert len(mix) < len(cfi)
    # FP alone does no better: it has not even middle.
    assert end not in fp.ips and not set(fp.ips) & set(cfi.ips[2:])


# --- IP in spin: the caller's frame is at die's end, the first byte of middle -----------------

@ALL
def test_sframe_walk_takes_middles_fde_at_dies_end(tailcall_snaps, tc):
    cap = got(tailcall_snaps, tc)
    snap = cap.snaps["spin-call"]
    mix, fp, cfi, sym = walks(snap)
    mem = snap.memory()
    d1 = cap.end("die")
    assert d1 == cap.start("middle")

    assert sym.functions(cfi.ips) == ["spin", "die", "middle", "outer", "main"] + GLIBC_TAIL
    assert cfi.ips[1:3] == [d1, cap.end("middle")]

    assert mix.frames[0].how is REGS and mix.frames[1].ip == d1 and mix.frames[1].how is SF
    assert sym.functions(mix.ips[:2]) == ["spin", "die"]
    # the step from die's end is SFrame's, with middle's first row: RA = *sp, the word die left
    # below its return address (sub $8,%rsp: stale stack contents), not middle's end.
    rule = sframe_tables_for(snap.address_space())(d1).rule_for(d1)
    assert rule is not None and (rule.cfa.base, rule.cfa.offset) == ("sp", 8)
    assert mix.frames[2].how is SF
    assert mix.frames[2].ip == word(mem, mix.frames[1].sp) != cfi.ips[2]
    m = snap.address_space().mapping_at(mix.frames[2].ip)
    assert m is None or not m.executable
    assert mix.stop.reason.is_error and mix.stopped_in is FP
    assert not set(mix.ips) & set(cfi.ips[2:])
    # FP alone: rbp is spin's loop bound (1000000) here, fp < sp at once
    assert fp.ips == [snap.regs.ip] and snap.regs.bp == 1000000
    assert fp.stop.reason is StopReason.FP_BELOW_SP


# --- with frame pointers ----------------------------------------------------------------------

@ALL
@IN_DIE
def test_with_frame_pointers_the_fp_fallback_recovers_outer(tailcall_fp_snaps, tc, stop):
    cap = got(tailcall_fp_snaps, tc)
    snap = cap.snaps[stop]
    mix, fp, cfi, sym = walks(snap)
    end = cap.end("middle")
    assert sframe_tables_for(snap.address_space())(end).rule_for(end) is None
    # SFrame to middle's end, FP from there (no FRE) to outer, SFrame again in the program,
    # then FP in glibc (no SFrame) until it stops: the same frames as CFI as far as it goes.
    assert sym.functions(mix.ips) == ["die", "middle", "outer", "main", "__libc_start_call_main"]
    assert mix.ips == cfi.ips[:5] and [f.sp for f in mix] == [f.sp for f in cfi][:5]
    assert mix.types == [REGS, SF, FP, SF, SF]
    assert mix.stop.reason is StopReason.FP_BELOW_SP and mix.stopped_in is FP
    if stop == "die-entry":
        # FP alone at die's first instruction (push %rbp not run yet) loses middle
        assert sym.functions(fp.ips) == ["die", "outer", "main", "__libc_start_call_main"]
    else:
        assert fp.ips == mix.ips


@ALL
def test_with_frame_pointers_the_wrong_fde_at_dies_end_still_derails_sframe(tailcall_fp_snaps, tc):
    cap = got(tailcall_fp_snaps, tc)
    snap = cap.snaps["spin-call"]
    mix, fp, cfi, sym = walks(snap)
    mem = snap.memory()
    # FP alone is right here, frame for frame with CFI down to glibc's first frameless function
    assert sym.functions(fp.ips) == ["spin", "die", "middle", "outer", "main", "__libc_start_call_main"]
    assert fp.ips == cfi.ips[:6]
    # SFrame reaches die's end, takes middle's first row there: RA = *sp = the rbp die saved
    # (middle's frame address, in [stack]); rbp stays die's, below the new sp: fp < sp.
    assert mix.ips[:2] == cfi.ips[:2] and mix.types == [REGS, SF, SF]
    saved_rbp = word(mem, mix.frames[1].sp)
    assert mix.ips[2] == saved_rbp == cfi.frames[2].fp
    assert snap.address_space().mapping_at(saved_rbp).path == "[stack]"
    assert mix.stop.reason is StopReason.FP_BELOW_SP and mix.stopped_in is FP


# --- fp_snaps and corrupt() -------------------------------------------------------------------

def test_fp_snaps_and_corrupt_lose_a_frame_with_a_frame_pointer(fp_snaps):
    cap: CauseCapture = fp_snaps
    snap = cap.snaps["c-raw"]
    sym = Symbolizer(snap.address_space())
    clean = unwind_user(snap.memory(), snap.regs)
    assert sym.functions(clean.ips) == ["c", "b", "a", "main", "__libc_start_call_main"]
    # frames: c (rbp = regs.bp), b (fp = the rbp c saved at *c.rbp), a, main
    c_fp, b_fp, a_fp = clean.frames[0].fp, clean.frames[1].fp, clean.frames[2].fp
    assert word(snap.memory(), c_fp) == b_fp
    before = snap.memory().read(c_fp, 8)
    # b's saved rbp (in c's frame) now points at a's frame record: b's caller is taken from a's
    # record, and a -- which sets up its frame pointer -- is lost.
    mem = corrupt(snap, c_fp, a_fp.to_bytes(8, "little"))
    bad = unwind_user(mem, snap.regs)
    assert sym.functions(bad.ips) == ["c", "b", "main", "__libc_start_call_main"]
    assert bad.ips[2] == clean.ips[3]
    # the snapshot is untouched; patches stack; a patch of unreadable memory is refused
    assert snap.memory().read(c_fp, 8) == before
    assert unwind_user(snap.memory(), snap.regs).ips == clean.ips
    orig = snap.memory()
    assert mem.read(c_fp - 4, 16) == orig.read(c_fp - 4, 4) + a_fp.to_bytes(8, "little") + orig.read(c_fp + 8, 4)
    twice = corrupt(mem, a_fp, (0).to_bytes(8, "little"))  # a's record: main's saved rbp, 0
    ends = unwind_user(twice, snap.regs)
    assert sym.functions(ends.ips) == ["c", "b", "main"] and ends.stop.reason is StopReason.END_OF_CHAIN
    zero_b = corrupt(snap, b_fp, (0).to_bytes(8, "little"))  # b's record: a's saved rbp, 0
    ends = unwind_user(zero_b, snap.regs)
    assert sym.functions(ends.ips) == ["c", "b", "a"] and ends.stop.reason is StopReason.END_OF_CHAIN
    with pytest.raises(MemoryFault):
        corrupt(snap, 0x1000, b"\0" * 8)
