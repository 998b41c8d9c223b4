"""The DWARF CFI oracle on 32-bit (i386, compat) tasks: real ``-m32`` builds, real stacks.

A session fixture builds ``guest_programs/callchain.c`` with ``Variant(bits=32)`` (the host
toolchain with and without frame pointers, static and dynamic; sid's without frame pointers),
runs each on the host under gdb and captures snapshots (harness/tools/capture_gdb.py): the
registers are a compat task's (CS = 0x23), so :func:`unwind_cfi` walks with 4-byte words and
the i386 register numbering.

* with frame pointers, CFI and the compat FP unwinder agree frame for frame through the program;
* without frame pointers CFI still reaches ``main`` (main -> a -> b -> c, the program's own chain)
  and glibc's ``_start``, where FP cannot;
* stopped inside glibc (its ``syscall()`` and the vDSO's ``__kernel_vsyscall``, no frame pointers
  in either) CFI walks out through the vDSO's and libc's ``.eh_frame``;
* at ``main``'s stack realignment the CFA is ``ecx`` (a register only the topmost frame knows),
  below it ``*(ebp - N)`` and ebp is restored by ``DW_CFA_expression``;
* the i386 PLT's CFA expression gives the right CFA at all 16 offsets of every PLT entry (checked
  against the PLT's disassembly), and decoded rows equal ``readelf --debug-dump=frames-interp``;
* corrupt ``.eh_frame`` bytes, an image of the other architecture and signal trampolines (the
  i386 vDSO's, and glibc's 64-bit ``__restore_rt`` the engine relies on) stop the walk, typed.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from elftools.dwarf.dwarf_expr import DWARFExprParser
from elftools.dwarf.structs import DWARFStructs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.images.errors import ImageError
from harness.regs import USER_CS_64
from harness.rule import (
    SAME,
    UNDEFINED,
    RuleError,
    ValueRule,
    apply_rule,
    dwarf_regs,
)
from harness.tools.capture_gdb import CaptureError, StopPoint, capture_program
from harness.unwind.cfi import (
    I386,
    X86_64,
    CFITable,
    CorruptCFI,
    UnsupportedCFI,
    cfi_table,
    cfi_tables_for,
    eval_cfa_expression,
    eval_register_expression,
    unwind_cfi,
)
from harness.unwind.maps import ElfImage, load_image
from harness.unwind.snapshot import Snapshot
from harness.unwind.symbolize import Symbolizer, symbol_index
from harness.unwind.user import EntryFrame, StopReason, UnwinderType, unwind_user
from tests.support.captured import Captured, funcs, get, walk
from tests.support.gating import require

# (toolchain, frame pointers, static): the host toolchain (binutils 2.40, glibc 2.36: what the
# guest's compat scenarios run) in all four variants, and sid's newest gcc without frame
# pointers (it saves registers with mov after one lea, not with pushes).  Indexing a 32-bit
# .eh_frame is the cost here (a static glibc's or libc.so.6's: 0.3 to 2 seconds each), so one
# dynamic glibc is walked; the other toolchains' are left to the 64-bit tests.
BUILDS = [("host", True, True), ("host", True, False), ("host", False, True), ("host", False, False),
          ("sid", False, True)]
ITER = "1000000"
CHAIN = ["c", "b", "a", "main"]

# One run per build, in "libc" mode (getppid through glibc's syscall()).  Stops are set once the
# program makes its first set_robust_list (glibc's __tls_init_tp: after the libraries are mapped,
# before main), so main's own prologue is reached too.
LOADED = "set_robust_list"
MAIN_REALIGN = StopPoint("main-realign", "insn", "main", "$0xfffffff0,%esp")  # CFA = ecx + 0 here
# c's first call (to __x86.get_pc_thunk.bx, i386 PIC code): c's prologue has run
C_CALL = StopPoint("c-call", "insn", "c", "call")
C_LIBC = StopPoint("c-libc", "syscall", syscall="getppid")  # in the vDSO's __kernel_vsyscall
FP_STOPS = [
    MAIN_REALIGN,
    StopPoint("b-entry", "break", "b"),
    StopPoint("c-push-ebp", "insn", "c", "push   %ebp"),
    StopPoint("c-after-push", "insn", "c", "push   %ebp", after=1),
    C_CALL,
    C_LIBC,
]
NOFP_STOPS = [
    MAIN_REALIGN,
    # c's second instruction: after its first push of a callee-saved register (host) or its
    # lea -0x1c(%esp),%esp (sid)
    StopPoint("c-second", "insn", "c", "", after=1),
    C_CALL,
    C_LIBC,
]


@pytest.fixture(scope="session")
def captures32(tmp_path_factory) -> dict[tuple[str, bool, bool], Captured | str]:
    """Every 32-bit (toolchain, fp, static) build, captured; a string says why one is missing."""
    from harness.images.programs import Variant, build_program
    from harness.images.toolchain import get_toolchain

    if shutil.which("gdb") is None:
        return {k: "gdb is not installed" for k in BUILDS}
    out: dict[tuple[str, bool, bool], Captured | str] = {}
    root = tmp_path_factory.mktemp("snapshots32")
    for key in BUILDS:
        tc_name, fp, static = key
        try:
            prog = build_program("callchain", get_toolchain(tc_name),
                                 Variant(bits=32, frame_pointers=fp, static=static))
            d = root / f"{tc_name}-{fp}-{static}"
            capture_program(prog, [ITER, "libc"], FP_STOPS if fp else NOFP_STOPS, d, loaded_syscall=LOADED)
        except (ImageError, CaptureError) as exc:
            out[key] = f"{tc_name} fp={fp} static={static} 32-bit: {exc}"
            continue
        snaps = {p.name: Snapshot.load(p) for p in d.iterdir()}
        out[key] = Captured(tc_name, fp, static, snaps, prog)
    return out


def glibc_tail(static: bool) -> list[str | None]:
    # __libc_start_call_main is local: only a static binary's .symtab names it
    return ["__libc_start_call_main" if static else None, "__libc_start_main", "_start"]


def _params(builds):
    ids = [f"{t}-{'fp' if fp else 'nofp'}-{'static' if st else 'dyn'}" for t, fp, st in builds]
    return pytest.mark.parametrize("tc,fp,static", builds, ids=ids)


ALL = _params(BUILDS)
WITH_FP = _params([b for b in BUILDS if b[1]])
WITHOUT_FP = _params([b for b in BUILDS if not b[1]])
# readelf: the program and static glibc's functions, the PLT and libc.so.6, sid's prologues
READELF = _params([("host", True, True), ("host", True, False), ("sid", False, True)])


# --- real stacks ------------------------------------------------------------------------------

@ALL
def test_compat_snapshot_is_a_compat_task(captures32, tc, fp, static):
    snap = get(captures32, tc, fp, static).snaps["c-call"]
    assert snap.regs.compat and snap.regs.cs == 0x23
    assert snap.regs.ip < 1 << 32 and snap.regs.sp < 1 << 32
    assert dwarf_regs(snap.regs)["r4"] == snap.regs.sp and dwarf_regs(snap.regs)["r8"] == snap.regs.ip


@WITH_FP
def test_cfi_and_compat_fp_agree_frame_for_frame(captures32, tc, fp, static):
    snap = get(captures32, tc, fp, static).snaps["c-call"]
    fpt, cfi, sym = walk(snap)
    assert funcs(sym, cfi) == CHAIN + glibc_tail(static)
    assert cfi.stop.reason is StopReason.END_OF_CHAIN  # _start: cfi_undefined (eip)
    assert all(f.ip < 1 << 32 and f.sp < 1 << 32 for f in cfi)
    # c, b, a, main and main's return address into glibc: the same IPs, the same CFAs for c, b, a
    assert fpt.ips[:5] == cfi.ips[:5]
    assert [f.sp for f in fpt][:4] == [f.sp for f in cfi][:4]
    assert set(fpt.types[1:]) == {UnwinderType.COMPAT_FP}
    # main realigns its stack (and $-16,%esp) and pushes a copy of its return address under its
    # frame: FP reads the copy at ebp + 4 (the right value) and takes ebp + 8 as the CFA; CFI has
    # the real CFA, *(ebp - N): ecx as main saved it, with the original return address below it.
    assert fpt.frames[4].sp != cfi.frames[4].sp and fpt.frames[4].sp < cfi.frames[4].sp
    # FP ends in glibc, which keeps no frame pointer; CFI goes on to _start
    assert len(fpt) == 5 and len(cfi) == 7


@WITH_FP
def test_prologue_ips_cfi_has_the_caller_compat_fp_loses_it(captures32, tc, fp, static):
    cap = get(captures32, tc, fp, static)
    for name, entry in (("c-push-ebp", True), ("c-after-push", False), ("b-entry", True)):
        snap = cap.snaps[name]
        fpt, cfi, sym = walk(snap)
        chain = CHAIN if name.startswith("c") else CHAIN[1:]
        assert funcs(sym, cfi)[:len(chain)] == chain, name
        assert funcs(sym, fpt)[:2] == [chain[0], chain[2]], name  # the caller is lost
        any_ip = unwind_user(snap.memory(), snap.regs, entry_frame=EntryFrame.ANY_IP)
        if entry:  # IP at push %ebp: the compat entry frame (cfa = sp + 4) recovers the caller
            assert any_ip.types[1] is UnwinderType.FP_ENTRY, name
            assert any_ip.ips == cfi.ips[:len(any_ip)] and len(any_ip) == len(chain) + 1, name
        else:
            assert any_ip.ips == fpt.ips, name


@ALL
def test_cfi_at_mains_stack_realignment_uses_ecx(captures32, tc, fp, static):
    snap = get(captures32, tc, fp, static).snaps["main-realign"]
    space = snap.address_space()
    e = space.elf_at(snap.regs.ip)
    rule = cfi_table(e.image).rule_for_link(e.link_address(snap.regs.ip))
    assert rule.cfa == ValueRule("r1", 0)  # DW_CFA_def_cfa: r1 (ecx) ofs 0
    _, cfi, sym = walk(snap)
    assert funcs(sym, cfi) == ["main"] + glibc_tail(static)
    assert cfi.frames[1].sp == (snap.regs.cx & 0xFFFFFFFF)
    # Below the top, ecx is unknown: applying the rule without the topmost registers is a
    # RuleError, which unwind_cfi reports as a RULE_ERROR stop.
    with pytest.raises(RuleError, match="r1"):
        apply_rule(rule, snap.regs.sp, snap.regs.bp, lambda a: 0, None)


@WITHOUT_FP
def test_without_frame_pointers_cfi_reaches_main_and_fp_does_not(captures32, tc, fp, static):
    cap = get(captures32, tc, fp, static)
    for name in ("c-call", "c-second"):
        fpt, cfi, sym = walk(cap.snaps[name])
        assert funcs(sym, cfi) == CHAIN + glibc_tail(static), name
        assert cfi.stop.reason is StopReason.END_OF_CHAIN
        assert funcs(sym, fpt)[:4] != CHAIN, name


@ALL
def test_stopped_inside_glibc_cfi_walks_out_through_libc_eh_frame(captures32, tc, fp, static):
    cap = get(captures32, tc, fp, static)
    snap = cap.snaps["c-libc"]
    fpt, cfi, sym = walk(snap)
    space = snap.address_space()
    # i386 glibc enters the kernel through the vDSO (call *%gs:0x10 -> __kernel_vsyscall)
    assert funcs(sym, cfi) == ["__kernel_vsyscall", "syscall"] + CHAIN + glibc_tail(static)
    assert cfi.stop.reason is StopReason.END_OF_CHAIN
    where = [space.mapping_at(ip if i == 0 else ip - 1).path for i, ip in enumerate(cfi.ips)]
    assert where[0] == "[vdso]"
    libc = "libc.so.6" if not static else Path(str(cap.program.path)).name
    assert where[1].endswith(libc) and where[-3].endswith(libc) and where[-2].endswith(libc)
    # every step out of glibc's code used a row of that image's .eh_frame
    for i in (1, len(cfi) - 3, len(cfi) - 2):
        e = space.elf_at(cfi.ips[i] - 1)
        assert cfi_table(e.image).fde_for(e.link_address(cfi.ips[i] - 1)) is not None
    # FP cannot leave __kernel_vsyscall/syscall(): ebp there is an argument register
    assert len(fpt) < 3 and fpt.stop.reason.is_error


# --- the i386 PLT's CFA expression ------------------------------------------------------------

def i386_ops(expr: list[int]):
    return DWARFExprParser(DWARFStructs(little_endian=True, dwarf_format=32, address_size=4)).parse_expr(expr)


# binutils bfd/elf32-i386.c, elf_i386_eh_frame_lazy_plt (lit11: jmp *GOT 6 bytes, push 5) and
# elf_i386_eh_frame_lazy_ibt_plt (lit9: endbr32 4 bytes, push 5): DW_OP_breg4 (esp) 4;
# DW_OP_breg8 (eip) 0; DW_OP_lit15; DW_OP_and; DW_OP_litN; DW_OP_ge; DW_OP_lit2; DW_OP_shl; DW_OP_plus.
# Whatever the threshold N (10 as well, x86-64's BND layout), the CFA gains a word from offset N on.
def plt_expr(lit: int) -> list[int]:
    return [0x74, 4, 0x78, 0, 0x3F, 0x1A, 0x30 + lit, 0x2A, 0x32, 0x24, 0x22]


@pytest.mark.parametrize("lit", [11, 10, 9])
def test_i386_plt_expression_at_each_of_the_16_entry_offsets(lit):
    ops = i386_ops(plt_expr(lit))
    for entry in (0x1030, 0x1040, 0x8049FF0 & ~0xF):
        for off in range(16):
            want = ValueRule("sp", 4 + (4 if off >= lit else 0))
            assert eval_cfa_expression(ops, entry + off, I386) == want, (lit, off)


def test_i386_register_numbering_in_expressions():
    # DW_OP_breg8 is eip on i386 (the PC), r8 on x86-64; breg4 is esp, breg5 ebp
    with pytest.raises(UnsupportedCFI):
        eval_cfa_expression(i386_ops([0x78, 0x10]), 0x1000, I386)  # a constant CFA
    assert eval_cfa_expression(i386_ops([0x74, 4]), 0, I386) == ValueRule("sp", 4)
    assert eval_cfa_expression(i386_ops([0x78, 4]), 0, X86_64) == ValueRule("r8", 4)
    # main after realignment: DW_OP_breg5 (ebp): -16; DW_OP_deref
    assert eval_cfa_expression(i386_ops([0x75, 0x70, 0x06]), 0, I386) == ValueRule("fp", -16, True)
    # DW_CFA_expression: r5 (ebp) (DW_OP_breg5 (ebp): 0): ebp saved at the word ebp points to
    assert eval_register_expression(i386_ops([0x75, 0]), 0, I386) == ValueRule("fp", 0, True)
    # the CFA is pushed first: DW_OP_plus_uconst 8 alone is cfa + 8; val_expression keeps it a value
    assert eval_register_expression(i386_ops([0x23, 8]), 0, I386) == ValueRule("cfa", 8, True)
    assert eval_register_expression(i386_ops([0x23, 8]), 0, I386, val=True) == ValueRule("cfa", 8, False)
    # addresses wrap at 32 bits on i386: eip + 16 at 0xfffffff8 is 8
    assert eval_cfa_expression(i386_ops([0x74, 0, 0x78, 0x10, 0x22]), 0xFFFFFFF8, I386) == ValueRule("sp", 8)


@pytest.mark.parametrize("expr", [[0x22], [0x1A], [0x23, 8], [0x75, 0, 0x06, 0x06], [0x75, 0, 0x74, 0]])
def test_malformed_expressions_are_unsupported_not_exceptions(expr):
    # plus/and/plus_uconst on an empty stack, deref twice, two register values left
    with pytest.raises(UnsupportedCFI):
        eval_cfa_expression(i386_ops(expr), 0, I386)


def objdump_plt(path: Path) -> list[tuple[int, int, str]]:
    """(address, length, mnemonic) of every instruction in .plt, from objdump -d."""
    text = subprocess.run(["objdump", "-d", "-j", ".plt", str(path)], check=True, capture_output=True,
                          text=True).stdout
    out = []
    for line in text.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t(\S+)", line)
        if m:
            out.append((int(m.group(1), 16), len(m.group(2).split()), m.group(3)))
    return out


@pytest.mark.parametrize("fp", [True, False], ids=["fp", "nofp"])
def test_real_plt_cfa_matches_its_disassembly(captures32, fp):
    """Each PLT entry after PLT0: the CFA is esp + 4 plus 4 for every push that has completed at
    that offset (objdump's instructions), for all 16 offsets of every entry."""
    require(shutil.which("objdump") is not None, "objdump is not installed")
    cap = get(captures32, "host", fp, False)
    path = Path(cap.program.path)
    image = load_image(path)
    table = CFITable(image)
    plt = image.elf.get_section_by_name(".plt")
    insns = objdump_plt(path)
    assert insns and plt is not None
    start, size = plt["sh_addr"], plt["sh_size"]
    entries = range(start + 16, start + size, 16)
    assert len(entries) >= 4  # strcmp, __libc_start_main, printf, syscall, strtol...
    row, _ = table.row_for(entries[0])
    assert row["cfa"].expr is not None  # the expression, not a register + offset
    ops = table.parse_expr(row["cfa"].expr)
    assert [o.op_name for o in ops][:2] == ["DW_OP_breg4", "DW_OP_breg8"]
    for entry in entries:
        pushes = [a + n for a, n, mnem in insns if entry <= a < entry + 16 and mnem.startswith("push")]
        assert len(pushes) == 1
        for off in range(16):
            pc = entry + off
            want = ValueRule("sp", 4 + 4 * sum(end <= pc for end in pushes))
            assert table.rule_for_link(pc).cfa == want, hex(pc)
            assert eval_cfa_expression(ops, pc, I386) == want


# --- decoded rows against readelf -------------------------------------------------------------

I386_NAMES = {"eax": 0, "ecx": 1, "edx": 2, "ebx": 3, "esp": 4, "ebp": 5, "esi": 6, "edi": 7, "eip": 8, "ra": 8}


@dataclass
class ReadelfFDE:
    start: int
    end: int
    rows: list[tuple[int, dict[str, str]]]  # (loc, column -> cell) from frames-interp
    cfa_exprs: list[str]  # DW_CFA_def_cfa_expression texts, from frames
    reg_exprs: dict[int, list[str]]  # DW_CFA_expression: rN texts


_FDE = re.compile(r"^[0-9a-f]+ [0-9a-f]+ [0-9a-f]+ FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)")


@functools.cache
def readelf_fdes(path: Path) -> dict[int, ReadelfFDE]:
    """FDEs of ``readelf --debug-dump=frames-interp`` (rows) and ``--debug-dump=frames``
    (expression texts), by start address."""
    def run(what: str) -> str:
        return subprocess.run(["readelf", "-wf" if what == "frames" else "-wF", str(path)], check=True,
                              capture_output=True, text=True).stdout

    fdes: dict[int, ReadelfFDE] = {}
    cies: dict[int, ReadelfFDE] = {}
    cie_of: dict[int, int] = {}
    cur: ReadelfFDE | None = None
    columns: list[str] = []
    for line in run("frames-interp").splitlines():
        m = _FDE.match(line)
        if m:
            cur = ReadelfFDE(int(m.group(1), 16), int(m.group(2), 16), [], [], {})
            fdes[cur.start] = cur
            cie_of[cur.start] = int(re.search(r"cie=([0-9a-f]+)", line).group(1), 16)
            continue
        m = re.match(r"^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ CIE ", line)
        if m:
            cur = cies[int(m.group(1), 16)] = ReadelfFDE(0, 0, [], [], {})
            continue
        if not line.strip() or cur is None:
            continue
        words = line.split()
        if words[0] == "LOC":
            columns = words[1:]
        elif len(words) == len(columns) + 1:
            cur.rows.append((int(words[0], 16), dict(zip(columns, words[1:], strict=True))))
    for start, fde in fdes.items():
        # readelf prints no rows for an FDE without instructions: the CIE's initial row holds
        if not fde.rows and cie_of[start] in cies:
            fde.rows = [(start, cells) for _, cells in cies[cie_of[start]].rows[:1]]
    cur = None
    for line in run("frames").splitlines():
        m = _FDE.match(line)
        if m:
            cur = fdes.get(int(m.group(1), 16))
            continue
        if cur is None:
            continue
        line = line.strip()
        if line.startswith("DW_CFA_def_cfa_expression ("):
            cur.cfa_exprs.append(line[len("DW_CFA_def_cfa_expression ("):-1])
        m = re.match(r"DW_CFA_expression: r(\d+) \(\w+\) \((.*)\)$", line)
        if m:
            cur.reg_exprs.setdefault(int(m.group(1)), []).append(m.group(2))
    return fdes


def readelf_ops(text: str) -> list[tuple[str, list[int]]]:
    """``DW_OP_breg5 (ebp): -16; DW_OP_deref`` -> [("DW_OP_breg5", [-16]), ("DW_OP_deref", [])]."""
    out = []
    for part in text.split("; "):
        m = re.fullmatch(r"(DW_OP_\w+)(?: \(\w+\))?(?:: (-?\d+))?", part.strip())
        assert m, part
        out.append((m.group(1), [int(m.group(2))] if m.group(2) is not None else []))
    return out


def simple_rule(text: str, deref_result: bool) -> ValueRule | None:
    """``DW_OP_bregN (reg): off[; DW_OP_deref]`` as the rule it means; None for other shapes."""
    ops = readelf_ops(text)
    if not ops or not ops[0][0].startswith("DW_OP_breg") or len(ops) > 2:
        return None
    if len(ops) == 2 and ops[1][0] != "DW_OP_deref":
        return None
    base = I386.base(int(ops[0][0][len("DW_OP_breg"):]))
    return ValueRule(base, ops[0][1][0], deref_result or len(ops) == 2)


def expected_cell(cell: str, column: str, fde: ReadelfFDE, default: ValueRule) -> ValueRule | str | None:
    if cell == "u":
        return default
    if cell == "s":
        return ValueRule(SAME)
    m = re.fullmatch(r"c([+-]\d+)", cell)
    if m:
        return ValueRule("cfa", int(m.group(1)), True)
    m = re.fullmatch(r"v([+-]\d+)", cell)
    if m:
        return ValueRule("cfa", int(m.group(1)), False)
    if cell == "exp":
        texts = fde.cfa_exprs if column == "CFA" else fde.reg_exprs.get(I386_NAMES[column], [])
        assert len(set(texts)) == 1, (column, texts)  # one expression per column in these FDEs
        rule = simple_rule(texts[0], deref_result=column != "CFA")
        return rule if rule is not None else "exp:" + texts[0]
    m = re.fullmatch(r"([a-z]+)([+-]\d+)", cell)
    if m and column == "CFA":
        return ValueRule(I386.base(I386_NAMES[m.group(1)]), int(m.group(2)))
    if cell in I386_NAMES:
        return ValueRule(I386.base(I386_NAMES[cell]))
    return None


def check_fde_rows(image: ElfImage, fde: ReadelfFDE) -> int:
    """Our row at every PC of the FDE against readelf's row in force there; returns rows compared."""
    table = cfi_table(image)
    ours = table.fde_for(fde.start)
    assert ours is not None and ours["initial_location"] == fde.start
    assert ours["initial_location"] + ours["address_range"] == fde.end
    compared = 0
    for pc in range(fde.start, fde.end):
        _, cells = max((r for r in fde.rows if r[0] <= pc), key=lambda r: r[0])
        rule = table.rule_for_link(pc)
        row, ra_col = table.row_for(pc)
        assert ra_col == 8
        for column, got, default in (("CFA", rule.cfa, None), ("ra", rule.ra, ValueRule(UNDEFINED)),
                                     ("ebp", rule.fp, ValueRule(SAME))):
            cell = cells.get(column, "u")
            want = expected_cell(cell, column, fde, default)
            if isinstance(want, str):  # an expression of another shape: the same ops at least
                expr = row["cfa"].expr if column == "CFA" else row[I386_NAMES[column]].arg
                assert [(o.op_name, list(o.args)) for o in table.parse_expr(expr)] == readelf_ops(want[4:])
                continue
            assert got == want, (hex(pc), column, cell, got)
        compared += 1
    return compared


@READELF
def test_decoded_rows_equal_readelf_frames_interp(captures32, tc, fp, static):
    require(shutil.which("readelf") is not None, "readelf is not installed")
    cap = get(captures32, tc, fp, static)
    path = Path(cap.program.path)
    image = load_image(path)
    fdes = readelf_fdes(path)
    index = symbol_index(image)
    names = CHAIN + (["syscall", "__libc_start_call_main", "_start"] if static else ["_start"])
    checked = set()
    for name in names:
        addr = index.address_of(name)
        assert addr is not None, name
        fde = next(f for f in fdes.values() if f.start <= addr < f.end and f.rows)
        assert check_fde_rows(image, fde) == fde.end - fde.start
        checked.add(name)
    if not static:
        plt = image.elf.get_section_by_name(".plt")
        fde = fdes[plt["sh_addr"]]
        assert any(c.get("CFA") == "exp" for _, c in fde.rows)
        check_fde_rows(image, fde)
    if not static:
        # and glibc's own syscall() in the libc.so.6 it runs with
        libc = next(Path(h) for h, g in cap.program.runtime if g.endswith("/libc.so.6"))
        limg = load_image(libc)
        lfdes = readelf_fdes(libc)
        addr = symbol_index(limg).address_of("syscall")
        fde = next(f for f in lfdes.values() if f.start <= addr < f.end and f.rows)
        check_fde_rows(limg, fde)
    assert checked == set(names)


# --- bad input stays typed --------------------------------------------------------------------

def test_i386_image_in_a_64_bit_task_stops_typed(captures32):
    cap = get(captures32, "host", True, True)
    snap = cap.snaps["c-call"]
    regs = dataclasses.replace(snap.regs, cs=USER_CS_64)
    t = unwind_cfi(snap.memory(), regs, cfi_tables_for(snap.address_space()))
    assert t.stop.reason is StopReason.UNSUPPORTED_RULE
    assert "i386 CFI in a x86-64 task" in t.stop.detail and len(t) == 1


def _eh_frame_span(image: ElfImage) -> tuple[int, int]:
    sec = image.elf.get_section_by_name(".eh_frame")
    return sec["sh_offset"], sec["sh_size"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupt_eh_frame_stops_the_walk_typed(captures32, tmp_path_factory, data):
    cap = get(captures32, "host", False, False)
    snap = cap.snaps["c-call"]
    path = Path(cap.program.path)
    raw = bytearray(path.read_bytes())
    off, size = _eh_frame_span(ElfImage(str(path), bytes(raw)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 255)), min_size=1, max_size=8))
    for at, value in flips:
        raw[off + at] = value
    bad = tmp_path_factory.mktemp("corrupt") / "callchain"
    bad.write_bytes(bytes(raw))
    guest = next(g for g, h in snap.files.items() if Path(h) == path)
    files = {**snap.files, guest: str(bad)}
    broken = dataclasses.replace(snap, files=files)
    t = unwind_cfi(broken.memory(), broken.regs, cfi_tables_for(broken.address_space()))
    assert isinstance(t.stop.reason, StopReason) and len(t) >= 1
    if t.stop.reason is StopReason.UNSUPPORTED_RULE:
        assert t.stop.detail


def test_truncated_eh_frame_is_corrupt_cfi_not_an_exception(captures32):
    cap = get(captures32, "host", True, False)
    path = Path(cap.program.path)
    raw = bytearray(path.read_bytes())
    off, _ = _eh_frame_span(ElfImage(str(path), bytes(raw)))
    raw[off:off + 4] = (0xFFFFFF00).to_bytes(4, "little")  # the first CIE claims 4 GiB
    table = CFITable(ElfImage("corrupt", bytes(raw)))
    assert table.error is not None and ".eh_frame" in table.error
    with pytest.raises(CorruptCFI):
        table.rule_for_link(0x1000)


# --- signal trampolines: the walk ends there, typed (the engine continues 64-bit ones) ----------

def test_i386_vdso_sigreturn_trampolines_stop_the_walk(captures32):
    """A compat task's signal frames return to the vDSO's __kernel_sigreturn/__kernel_rt_sigreturn
    (i386 glibc installs no restorer of its own): their FDEs ("zRS" CIE) stop the CFI walk with
    UNSUPPORTED_RULE, as glibc's __restore_rt does for 64-bit tasks."""
    snap = get(captures32, "host", True, True).snaps["c-call"]
    space = snap.address_space()
    vdso = space.elf_at(space.mappings_of("[vdso]")[0].start)
    table = cfi_table(vdso.image)
    assert table.arch is I386
    signal = [f for f in table.fdes() if table.is_signal_frame(f)]
    names = {symbol_index(vdso.image).lookup(f["initial_location"] + 1).name for f in signal}
    assert {"__kernel_sigreturn", "__kernel_rt_sigreturn"} <= names
    for fde in signal:
        with pytest.raises(UnsupportedCFI, match="signal frame"):
            table.rule_for_link(fde["initial_location"] + 1)


def test_64_bit_signal_frame_still_ends_the_walk_for_the_engine(tmp_path):
    """Register expressions are evaluated now (i386 main needs them), but a signal trampoline's
    rules must still end the walk: harness/oracles/cfi.py continues from the interrupted
    context itself, marking its IP as one (not a return address)."""
    from harness.images.programs import Variant, build_program
    from harness.images.toolchain import get_toolchain

    require(shutil.which("gdb") is not None, "gdb is not installed")
    try:
        prog = build_program("signal", get_toolchain("host"), Variant(static=True))
        capture_program(prog, ["raw"], [StopPoint("h2", "break", "h2")], tmp_path)
    except (ImageError, CaptureError) as exc:
        require(False, f"signal program: {exc}")
    snap = Snapshot.load(tmp_path / "h2")
    space = snap.address_space()
    t = unwind_cfi(snap.memory(), snap.regs, cfi_tables_for(space))
    assert Symbolizer(space).functions(t.ips)[:3] == ["h2", "h1", "on_alarm"]
    assert t.stop.reason is StopReason.UNSUPPORTED_RULE and "signal frame" in t.stop.detail
    e = space.elf_at(t.ips[-1] - 1)
    table = cfi_table(e.image)
    assert table.is_signal_frame(table.fde_for(e.link_address(t.ips[-1] - 1)))  # __restore_rt
    assert len(t) == 4
