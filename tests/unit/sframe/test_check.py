"""``harness sframe check`` and ``harness sframe dump`` on real binaries, no guest.

* Every guest program, built by the host (binutils 2.40, V1), trixie (2.44, V2) and sid (2.47,
  V3) toolchains, with and without frame pointers, checks clean -- except where the toolchain's
  SFrame really disagrees with its own .eh_frame, and then the test names exactly that finding:
  gas 2.40 and 2.44 ignore ``.cfi_undefined rip`` (sframe_odd's ``outermost``) and describe the
  RA at CFA-8 where the CFI says undefined; ld 2.44 and 2.47 give the ``.plt.got`` stub of a
  dynamic program CFA = SP+16 where its .eh_frame FDE (and the code: nothing pushed) says SP+8.
* Corrupted copies of a real binary, one per check, are each caught by that check, with its
  message, and exit status 1 (2 where the section no longer decodes).
* ``dump`` prints the flags as each toolchain's own ``objdump --sframe`` does, on patched copies
  (the dump of every program against objdump, byte for byte: tests/unit/report/test_sframe_dump.py).
"""

from __future__ import annotations

import functools
import io
import re
import shutil
import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from harness.cli import main
from harness.images.programs import SOURCES, Variant
from harness.rule import UNDEFINED, ValueRule
from harness.sframe import SFrameError, SFrameTable
from harness.sframe import format as F
from harness.unwind import sframe_check
from harness.unwind.ehframe import FDE as EhFDE
from harness.unwind.ehframe import parse_eh_frame
from harness.unwind.maps import ElfImage
from harness.unwind.sframe_check import check_binary
from harness.unwind.symbolize import places
from tests.support.tiers import unit_share
from tests.support.toolchains import need, program

TOOLCHAINS = ("host", "trixie", "sid")
VERSION = {"host": 1, "trixie": 2, "sid": 3}
BINUTILS = {"host": (2, 40), "trixie": (2, 44), "sid": (2, 47)}
PROGRAMS = sorted(p.stem for p in SOURCES.glob("*.c"))
VARIANTS = (Variant(), Variant(frame_pointers=False))


def objdump_text(tc_name: str, path: Path) -> str:
    tc = need(tc_name)
    outer, inner = tc.workdir(f"sframe-check-objdump-{path.parent.name}-{path.name}")
    try:
        shutil.copy(path, outer / path.name)
        return tc.run(["objdump", "--sframe", path.name], cwd=inner).stdout
    finally:
        shutil.rmtree(outer, ignore_errors=True)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["sframe", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _in(path: Path, addr: int) -> str:
    """What a finding says of where the address it names lies: ``in SECTION (SYMBOL)`` (the
    naming itself is held to objdump -d's labels in tests/unit/unwind/test_places.py)."""
    return places(ElfImage.from_path(str(path))).describe(addr)


def _sym(path: Path, addr: int) -> str:
    """What a finding says of the symbol an FRE's range starts in: ``(SYMBOL)``."""
    return f"({places(ElfImage.from_path(str(path))).symbol(addr) or 'no symbol'})"


# What follows an FDE's range and an FRE's in a finding's message, where a pattern need not name them.
IN = r" in \S+ \([^)]+\)"
SYM = r" \([^)]+\)"


# ------------------------------------------------------------------------------ the catalog

# (toolchain, program, static) -> the findings the toolchain's own output really has.
def _outermost_ra(tc_name: str, path: Path):
    """gas < 2.45 ignores .cfi_undefined rip: RA at CFA-8 in SFrame, undefined in .eh_frame."""
    sym = _symbol(path, "outermost")
    return [("ra", sym + 1, sym + 3, ValueRule("cfa", -8, True), ValueRule(UNDEFINED))]  # after its 1-byte nop


def _plt_got_cfa(tc_name: str, path: Path):
    """ld 2.44+ give .plt.got SP+16; its .eh_frame FDE (no instructions: the CIE's SP+8) is right."""
    with open(path, "rb") as f:
        s = ELFFile(f).get_section_by_name(".plt.got")
        lo, hi = s["sh_addr"], s["sh_addr"] + s["sh_size"]
    return [("cfa", lo, hi, ValueRule("sp", 16), ValueRule("sp", 8))]


EXPECTED = {
    ("host", "sframe_odd"): [_outermost_ra],
    ("trixie", "sframe_odd"): [_outermost_ra],
    ("host", "sframe_odd", "dyn"): [_outermost_ra],  # ld 2.40 writes no FDE for .plt.got
    ("trixie", "sframe_odd", "dyn"): [_plt_got_cfa, _outermost_ra],
    ("trixie", "callchain", "dyn"): [_plt_got_cfa],
    ("sid", "sframe_odd", "dyn"): [_plt_got_cfa],
    ("sid", "callchain", "dyn"): [_plt_got_cfa],
}


def _symbol(path: Path, name: str) -> int:
    with open(path, "rb") as f:
        return ELFFile(f).get_section_by_name(".symtab").get_symbol_by_name(name)[0]["st_value"]


def _expected(tc_name: str, prog: str, variant: Variant, path: Path):
    key = (tc_name, prog) if variant.static else (tc_name, prog, "dyn")
    return [e for make in EXPECTED.get(key, []) for e in make(tc_name, path)]


CASES = [(tc, prog, v) for tc in TOOLCHAINS for prog in PROGRAMS for v in VARIANTS]
CASES += [(tc, prog, Variant(static=False, frame_pointers=fp)) for tc in TOOLCHAINS
          for prog in ("callchain", "sframe_odd") for fp in (True, False)]


# one binary in eight in the unit tier, all of them in the deep tier (tests/support/tiers.py)
@pytest.mark.parametrize("tc_name,prog,variant", unit_share(CASES, 8, [f"{c[0]}-{c[1]}-{c[2].tag}" for c in CASES]))
def test_catalog_binaries_check_clean_or_with_their_known_findings(tc_name, prog, variant):
    p = program(prog, tc_name, variant)
    r = check_binary(p.path, expect_binutils=BINUTILS[tc_name])
    assert r.version == VERSION[tc_name]
    assert r.num_fdes > 0 and r.fres_checked == r.num_fres, r.notes  # every FRE met a CFI row
    got = [(f.kind, f.addr, f.end, getattr(f.sframe, f.kind), getattr(f.cfi, f.kind)) for f in r.findings]
    assert got == _expected(tc_name, prog, variant, p.path), [f.message for f in r.findings]
    assert not any("not compared" in n for n in r.notes), r.notes


def test_the_known_findings_exit_1_and_name_both_rules(capsys):
    p = program("sframe_odd", "trixie", Variant())
    rc, out, _ = run_cli(capsys, "check", str(p.path))
    assert rc == 1
    # the finding names where it lies: the section and the function, then the FRE's symbol and offset
    assert re.search(r"^  ra: FDE 1 \[0x[0-9a-f]+, 0x[0-9a-f]+\) in \.text \(outermost\): FRE 1 at "
                     r"\[0x[0-9a-f]+, 0x[0-9a-f]+\) \(outermost\+0x1\): RA sframe \*\(cfa-8\), eh_frame undefined$",
                     out, re.MULTILINE), out
    (f,) = check_binary(p.path).findings
    assert (f.section, f.symbol) == (".text", "outermost+0x1")
    assert re.search(r"\n  5 FDEs, (\d+) FREs, \1 FREs checked against \.eh_frame \(\d+ addresses\): 1 ra\n$", out), out


@pytest.mark.parametrize("tc_name", ["trixie", "sid"])
def test_the_plt_got_finding_names_its_section_and_the_symbol_objdump_gives_it(tc_name, tmp_path, capsys):
    """ld 2.44+'s .plt.got FDE (CFA = SP+16 where .eh_frame says SP+8): the finding names the
    section, .plt.got, and the entry's symbol, which .symtab does not hold -- objdump -d labels
    it from its GOT slot's GLOB_DAT relocation, __cxa_finalize@plt, and so do we (issue 34)."""
    p = program("callchain", tc_name, Variant(static=False))
    (f,) = check_binary(p.path).findings
    tc = need(tc_name)
    outer, inner = tc.workdir("sframe-check-objdump-d")
    try:
        shutil.copy(p.path, outer / "callchain")
        text = tc.run(["objdump", "-d", "-j", ".plt.got", "callchain"], cwd=inner).stdout
    finally:
        shutil.rmtree(outer, ignore_errors=True)
    assert f"\n{f.addr:016x} <__cxa_finalize@plt>:\n" in text, text
    assert (f.kind, f.section, f.symbol) == ("cfa", ".plt.got", "__cxa_finalize@plt")
    assert re.fullmatch(rf"FDE \d+ \[{f.addr:#x}, {f.end:#x}\) in \.plt\.got \(__cxa_finalize@plt\): FRE 0 at "
                        rf"\[{f.addr:#x}, {f.end:#x}\) \(__cxa_finalize@plt\): CFA sframe sp\+16, eh_frame sp\+8",
                        f.message), f.message
    rc, out, _ = run_cli(capsys, "check", str(p.path))
    assert rc == 1 and f"\n  cfa: {f.message}\n" in out


def test_clean_binaries_exit_0_with_a_summary_each(capsys):
    paths = [str(program("callchain", tc, Variant()).path) for tc in TOOLCHAINS]
    rc, out, err = run_cli(capsys, "check", *paths)
    assert rc == 0 and err == ""
    assert len(re.findall(r"FDEs, \d+ FREs, \d+ FREs checked against \.eh_frame \(\d+ addresses\): clean$",
                          out, re.MULTILINE)) == 3


# ------------------------------------------------------------------------------ corruptions


class Copy:
    """A writable copy of a real binary and the section it carries, to patch."""

    def __init__(self, src: Path, dst: Path) -> None:
        self.path = dst
        self.data = bytearray(src.read_bytes())
        with open(src, "rb") as f:
            elf = ELFFile(f)
            sec = elf.get_section_by_name(".sframe")
            self.off, self.addr = sec["sh_offset"], sec["sh_addr"]
            self.shdr = elf["e_shoff"] + elf.get_section_index(".sframe") * elf["e_shentsize"]
        self.table = SFrameTable.from_elf(src)
        self.sec = self.table.section.decode_all()

    def write(self) -> Path:
        self.path.write_bytes(bytes(self.data))
        return self.path

    def put(self, fmt: str, section_offset: int, *values) -> None:
        struct.pack_into("<" + fmt, self.data, self.off + section_offset, *values)

    def set_start(self, fde_offset: int, addr: int) -> None:
        """Point the FDE (V3: index entry) at ``offset`` to ``addr``, PC-relative where flagged."""
        rel = addr - (self.addr + fde_offset) if self.sec.header.pcrel else addr - self.addr
        self.put("q" if self.sec.header.version == 3 else "i", fde_offset, rel)

    def set_size(self, fde, size: int) -> None:
        self.put("I", fde.offset + (8 if self.sec.header.version == 3 else 4), size)

    def fde_with(self, pred):
        return next(f for f in self.sec.fdes if pred(f, self.sec.fres(f)))


@pytest.fixture(params=TOOLCHAINS)
def copy(request, tmp_path) -> Copy:
    p = program("callchain", request.param, Variant(frame_pointers=False))
    return Copy(p.path, tmp_path / "corrupt")


def _kinds(r) -> set[str]:
    return set(r.by_kind())


def _check(capsys, path: Path, kind: str, pattern: str):
    r = check_binary(path)
    assert kind in _kinds(r), [f.message for f in r.findings]
    assert any(re.search(pattern, f.message) for f in r.of_kind(kind)), [f.message for f in r.of_kind(kind)]
    rc, out, _ = run_cli(capsys, "check", str(path))
    assert rc == 1 and f"  {kind}: " in out
    return r


def test_original_is_clean(copy, capsys):
    r = _check_clean(copy.write())
    assert r.fres_checked == r.num_fres


def _where(findings) -> list[tuple]:
    """Each finding's FDE, FRE and address range."""
    return [(f.fde, f.fre, f.addr, f.end) for f in findings]


# What pyelftools reads of a catalog program (the reference, independent of the checker), once a
# binary: the corruption tests of each toolchain read the same program's symbols and .eh_frame
# entries again and again (through construct, 0.1-0.5 s a reading), and a catalog program does
# not change.  A test's patched copy is read again only where the patch is what is read.


@functools.cache
def _symtab(path: Path) -> tuple:
    """``path``'s .symtab symbols, in order (pyelftools' Symbol objects); its offset and entry size."""
    with open(path, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        return tuple(symtab.iter_symbols()), symtab["sh_offset"], symtab["sh_entsize"]


def _symbol_entry(copy: Copy, name: str) -> int:
    """The file offset of the first .symtab entry named ``name`` in ``copy`` (its source's layout:
    a patch moves no section)."""
    symbols, offset, entsize = _symtab(Path(copy.table.source))
    return offset + next(i for i, s in enumerate(symbols) if s.name == name) * entsize


def _symbol_at(path: Path, addr: int) -> str:
    """The first function symbol at ``addr`` of the catalog program ``path``."""
    return next(s.name for s in _symtab(path)[0] if s["st_value"] == addr and s["st_info"]["type"] == "STT_FUNC")


def _check_clean(path: Path):
    r = check_binary(path)
    assert r.clean, [f.message for f in r.findings]
    return r


def test_fde_sorted_cleared(copy, capsys):
    copy.data[copy.off + 3] &= ~F.F_FDE_SORTED
    r = _check(capsys, copy.write(), "fdes-unsorted", r"^SFRAME_F_FDE_SORTED is not set")
    assert _kinds(r) == {"fdes-unsorted"}


def test_pcrel_cleared_in_v3(tmp_path, capsys):
    c = Copy(program("callchain", "sid", Variant(frame_pointers=False)).path, tmp_path / "nopcrel")
    c.data[c.off + 3] &= ~F.F_FDE_FUNC_START_PCREL
    r = _check(capsys, c.write(), "header", r"^SFRAME_F_FDE_FUNC_START_PCREL is not set: every V3 section has "
                                            r"PC-relative function starts$")
    # read from the section start, each function start lands its FDE's offset too early: the
    # functions then start inside others and their rules are off
    assert r.of_kind("fde-symbol") and len(_kinds(r)) > 1


def test_pcrel_required_of_a_v2_from_binutils_2_45(capsys):
    p = program("callchain", "trixie", Variant())
    assert check_binary(p.path, expect_binutils=(2, 44)).clean
    r = check_binary(p.path, expect_binutils=(2, 45))
    assert [f.kind for f in r.findings] == ["header"] and "binutils 2.45" in r.findings[0].message
    rc, _out, _ = run_cli(capsys, "check", "--binutils", "2.45", str(p.path))
    assert rc == 1


def test_two_fdes_swapped(copy, capsys):
    a, b = copy.sec.fdes[0], copy.sec.fdes[1]
    size = copy.sec.header.fde_size
    ra = bytes(copy.data[copy.off + a.offset:copy.off + a.offset + size])
    rb = bytes(copy.data[copy.off + b.offset:copy.off + b.offset + size])
    copy.data[copy.off + a.offset:copy.off + a.offset + size] = rb
    copy.data[copy.off + b.offset:copy.off + b.offset + size] = ra
    copy.set_start(a.offset, b.func_start)  # PC-relative starts move with their field
    copy.set_start(b.offset, a.func_start)
    r = _check(capsys, copy.write(), "fde-order", rf"^FDE 1 \[{a.func_start:#x}, .*\) starts before FDE 0 "
                                                 rf"\({b.func_start:#x}\)$")
    assert _kinds(r) == {"fde-order"} and r.fres_checked == r.num_fres
    assert _where(r.findings) == [(1, None, a.func_start, a.func_end)]  # FDE 1 now holds a
    from harness.unwind.sframe_check import load
    table, _ = load(copy.path)  # not strict unless asked: the faulty section as it is
    assert [f.func_start for f in table.fdes[:2]] == [b.func_start, a.func_start]


def test_two_fdes_overlap(copy, capsys):
    a, b = copy.sec.fdes[-2], copy.sec.fdes[-1]
    copy.set_start(b.offset, b.func_start - 4)  # b now starts 4 bytes inside a
    copy.set_size(b, b.func_size + 4)
    r = _check(capsys, copy.write(), "fde-overlap",
               rf"^FDE {b.index} \[{b.func_start - 4:#x}, {b.func_end:#x}\){IN} overlaps FDE {a.index} .* by 4 bytes$")
    # b's start is no longer a function's: the symbol check says so too; its rules shift by 4 bytes
    assert _kinds(r) <= {"fde-overlap", "fde-symbol", "cfa", "fp", "ra"}
    assert _where(r.of_kind("fde-overlap")) == [(b.index, None, b.func_start - 4, a.func_end)]
    name = _symbol_at(Path(copy.table.source), a.func_start)  # the copy's symbols are its source's
    off = b.func_start - 4 - a.func_start
    assert [f.message for f in r.of_kind("fde-symbol")] == [
        f"FDE {b.index} [{b.func_start - 4:#x}, {b.func_end:#x}) in .text ({name}+{off:#x}) starts inside {name} "
        f"[{a.func_start:#x}, {a.func_end:#x}) at +{off:#x}, not at a function start"]
    assert _where(r.of_kind("fde-symbol")) == [(b.index, None, b.func_start - 4, b.func_end)]


def test_fde_outside_the_text(copy, capsys):
    last = copy.sec.fdes[-1]
    far = max(hi for _, hi in copy.table.text_ranges) + 0x100000
    copy.set_start(last.offset, far)
    r = _check(capsys, copy.write(), "fde-outside-text",
               rf"^FDE {last.index} \[{far:#x}, .*\) is not inside an executable PT_LOAD segment")
    assert _kinds(r) == {"fde-outside-text"}
    assert _where(r.findings) == [(last.index, None, far, far + last.func_size)]
    lo, hi = copy.table.text_ranges[0]
    assert r.findings[0].message.endswith(f" (those: [{lo:#x}, {hi:#x}))")


def test_fde_size_differs_from_its_symbol(copy, capsys):
    fde = copy.fde_with(lambda f, fres: fres[-1].start < f.func_size - 1)
    copy.set_size(fde, fde.func_size - 1)
    r = _check(capsys, copy.write(), "fde-symbol",
               rf"^FDE {fde.index} .*: {fde.func_size - 1} bytes, the function symbol at its start says "
               rf"otherwise: \w+ \({fde.func_size} bytes\)$")
    assert _kinds(r) == {"fde-symbol"}
    assert _where(r.findings) == [(fde.index, None, fde.func_start, fde.func_end - 1)]


def test_one_fre_cfa_offset_changed(copy, capsys):
    fde = copy.fde_with(lambda f, fres: len(fres) >= 2 and fres[1].cfa is not None)
    fre = copy.sec.fres(fde)[1]
    addr_size = F.FRE_START_ADDR_SIZE[fde.fre_type]
    wsize = F.DATAWORD_SIZE[F.fre_info_dataword_size_code(fre.info)]
    copy.put({1: "b", 2: "h", 4: "i"}[wsize], fre.offset + addr_size + 1, fre.cfa.offset + 8)
    r = _check(capsys, copy.write(), "cfa",
               rf"^FDE {fde.index} .*: FRE 1 at \[.*\): CFA sframe {fre.base_reg}\+{fre.cfa.offset + 8}, "
               rf"eh_frame {fre.base_reg}\+{fre.cfa.offset}$")
    assert _kinds(r) == {"cfa"} and len(r.findings) == 1
    f = r.findings[0]
    assert f.sframe.cfa.offset == f.cfi.cfa.offset + 8 and f.fde == fde.index and f.fre == 1


def test_fre_start_past_the_function_end(copy, capsys):
    fde = copy.fde_with(lambda f, fres: f.fre_type == F.FRE_TYPE_ADDR1 and len(fres) >= 2 and f.func_size < 250)
    last = copy.sec.fres(fde)[-1]
    copy.put("B", last.offset, fde.func_size + 2)
    k = len(copy.sec.fres(fde)) - 1
    r = _check(capsys, copy.write(), "fre-start",
               rf"^FDE {fde.index} .*: FRE {k} starts at \+{fde.func_size + 2:#x} \(.*\), past the function's "
               rf"{fde.func_size} bytes$")
    # the FRE before it now covers the last FRE's addresses as well: those rules may differ
    assert _kinds(r) <= {"fre-start", "cfa", "fp", "ra"}


def test_fre_data_that_does_not_decode(copy, capsys):
    fde = copy.sec.fdes[0]
    fre = copy.sec.fres(fde)[0]
    addr_size = F.FRE_START_ADDR_SIZE[fde.fre_type]
    copy.data[copy.off + fre.offset + addr_size] |= 0x60  # data word size code 3: invalid
    r = _check(capsys, copy.write(), "fre-decode", r"data word size code 3 is invalid")
    assert _kinds(r) == {"fre-decode"}


def test_signal_frame_mark_differs_from_the_cie(tmp_path, capsys):
    c = Copy(program("callchain", "sid", Variant(frame_pointers=False)).path, tmp_path / "signal")
    fde = c.sec.fdes[0]
    c.data[c.off + fde.attr_offset + 2] |= 0x80  # SFRAME_V3_FDE_SIGNAL_P
    r = _check(capsys, c.write(), "signal", r"SFrame says a signal frame, \.eh_frame does not")
    assert _kinds(r) == {"signal"}


def test_truncated_section_is_bad_input(copy, capsys):
    h = copy.sec.header
    shdr_size = copy.shdr + 0x20  # Elf64_Shdr.sh_size
    struct.pack_into("<Q", copy.data, shdr_size, h.end - 5)
    path = copy.write()
    with pytest.raises(SFrameError) as e:
        check_binary(path)
    assert e.value.field == "fre_len"
    rc, out, err = run_cli(capsys, "check", str(path))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and re.match(
        rf"^harness sframe: {re.escape(str(path))}: fre_len at byte 0x10: FRE sub-section .* runs past the "
        rf"section end", err), err
    rc, _, err = run_cli(capsys, "check", "--debug", str(path))
    assert rc == 2 and "Traceback (most recent call last)" in err and "SFrameError" in err


def test_one_fre_fp_offset_changed(copy, capsys):
    fde = copy.fde_with(lambda f, fres: not f.flex and any(fre.fp is not None for fre in fres))
    k, fre = next((k, fre) for k, fre in enumerate(copy.sec.fres(fde)) if fre.fp is not None)
    addr_size = F.FRE_START_ADDR_SIZE[fde.fre_type]
    wsize = F.DATAWORD_SIZE[F.fre_info_dataword_size_code(fre.info)]
    last_word = fre.offset + addr_size + 1 + (len(fre.datawords) - 1) * wsize  # CFA, then FP (RA fixed)
    copy.put({1: "b", 2: "h", 4: "i"}[wsize], last_word, fre.fp.offset - 8)
    r = _check(capsys, copy.write(), "fp", rf"^FDE {fde.index} .*: FRE {k} at \[.*\): FP sframe "
                                           rf"\*\(cfa{fre.fp.offset - 8:+d}\), eh_frame \*\(cfa{fre.fp.offset:+d}\)$")
    assert _kinds(r) == {"fp"}


def test_function_without_eh_frame(copy, capsys):
    """An .eh_frame FDE's pc_range set to 0: the SFrame FDE describes addresses the CFI does not."""
    fde = copy.sec.fdes[0]
    with open(copy.path.parent / "src", "wb") as f:
        f.write(bytes(copy.data))
    with open(copy.path.parent / "src", "rb") as f:
        elf = ELFFile(f)
        eh = elf.get_section_by_name(".eh_frame")
        entry = next(e for e in parse_eh_frame(eh.data(), eh["sh_addr"])
                     if isinstance(e, EhFDE) and e["initial_location"] == fde.func_start)
        assert eh.data()[entry.offset + 12:entry.offset + 16] == struct.pack("<I", fde.func_size)
        struct.pack_into("<I", copy.data, eh["sh_offset"] + entry.offset + 12, 0)  # pc_range (sdata4)
    r = _check(capsys, copy.write(), "no-cfi",
               rf"^FDE 0 \[{fde.func_start:#x}, {fde.func_end:#x}\){IN}: FRE 0 describes \[{fde.func_start:#x}, ")
    assert _kinds(r) == {"no-cfi"} and r.fres_checked == r.num_fres - len(copy.sec.fres(fde))
    fres = copy.sec.fres(fde)
    ends = [fre.start for fre in fres[1:]] + [fde.func_size]
    assert _where(r.findings) == [(0, k, fde.func_start + fre.start, fde.func_start + end)
                                  for k, (fre, end) in enumerate(zip(fres, ends, strict=True))]
    assert [(f.sframe, f.cfi) for f in r.findings] == [(copy.sec.rule(fde, fre), None) for fre in fres]


def test_fdes_nested_in_one_are_each_an_overlap(copy, capsys):
    """One FDE grown over the two after it: both lie inside it, and the second starts past the end
    of the first (mutation testing found an overlap check that compared each FDE with the one
    before it only, missing the second; issue 21)."""
    a, b, c = copy.sec.fdes[-3], copy.sec.fdes[-2], copy.sec.fdes[-1]
    assert a.func_end <= b.func_start and b.func_end <= c.func_start
    copy.set_size(a, c.func_end - a.func_start)  # a now covers b and c
    r = check_binary(copy.write())
    overlaps = {f.fde: f.message for f in r.of_kind("fde-overlap")}
    assert set(overlaps) == {b.index, c.index}, overlaps
    assert sorted(_where(r.of_kind("fde-overlap"))) == [(b.index, None, b.func_start, b.func_end),
                                                        (c.index, None, c.func_start, c.func_end)]
    assert overlaps[c.index] == (f"FDE {c.index} [{c.func_start:#x}, {c.func_end:#x}) {_in(copy.path, c.func_start)} "
                                 f"overlaps FDE {a.index} [{a.func_start:#x}, {c.func_end:#x}) "
                                 f"{_in(copy.path, a.func_start)} by {c.func_size} bytes")


def test_a_rule_change_inside_an_fre_is_compared(copy, capsys):
    """An FRE's start moved one byte later: the FRE before it now covers the address where the
    .eh_frame's rule changes, and that address is compared too, not only the FRE's start
    (mutation testing found a comparison at each FRE's start only; issue 21)."""
    fde = copy.fde_with(lambda f, fres: f.fre_type == F.FRE_TYPE_ADDR1 and len(fres) >= 3
                        and fres[2].start - fres[1].start >= 2 and fres[0].cfa != fres[1].cfa)
    fres = copy.sec.fres(fde)
    moved = fde.func_start + fres[1].start  # where the CFI row (and SFrame's FRE 1) starts
    copy.put("B", fres[1].offset, fres[1].start + 1)
    r = _check(capsys, copy.write(), "cfa", rf"^FDE {fde.index} .*: FRE 0 at \[{moved:#x}, {moved + 1:#x}\){SYM}: CFA ")
    assert _kinds(r) <= {"cfa", "fp", "ra"}
    assert all(f.fre == 0 and f.addr == moved for f in r.findings), [f.message for f in r.findings]


# ------------------------------------------------------------------------------ bad input


def test_bad_inputs_exit_2_with_one_line(tmp_path, capsys):
    text = tmp_path / "text"
    text.write_text("not ELF\n")
    nosframe = program("callchain", "host", Variant(sframe=False)).path
    good = program("callchain", "host", Variant()).path
    capsys.readouterr()  # what building them printed
    cases = {
        str(tmp_path / "missing"): "no such file",
        str(text): "not a readable ELF file",
        str(tmp_path): "not a regular file",
        str(nosframe): "no .sframe section and no PT_GNU_SFRAME segment",
    }
    for path, what in cases.items():
        rc, out, err = run_cli(capsys, "check", path)
        assert rc == 2 and out == "" and err.startswith(f"harness sframe: {path}: "), err
        assert what in err and err.count("\n") == 1 and "Traceback" not in err
        rc, _, err = run_cli(capsys, "dump", path)
        assert rc == 2 and what in err
    # the other binaries are still checked; bad input wins over findings for the status
    rc, out, err = run_cli(capsys, "check", str(tmp_path / "missing"), str(good))
    assert rc == 2 and "clean" in out
    rc, _, err = run_cli(capsys, "check", "--debug", str(text))
    assert rc == 2 and "Traceback (most recent call last)" in err
    assert main(["sframe", "check"]) == 2  # neither BINARY nor --tree
    assert "needs BINARY... or --tree DIR" in capsys.readouterr().err


# ------------------------------------------------------------------------------ dump


@pytest.mark.parametrize("tc_name,flags", [(tc, fl) for tc in ("host", "trixie") for fl in (0, 2, 3)]
                         + [("sid", 0), ("sid", 5)])
def test_dump_prints_flags_as_each_objdump_does(tc_name, flags, tmp_path, capsys, monkeypatch):
    """2.40/2.44 print one flag (FRAME_POINTER over FDE_SORTED) or NONE; 2.47 every flag."""
    c = Copy(program("recurse", tc_name, Variant()).path, tmp_path / "flags")
    c.data[c.off + 3] = flags
    c.write()
    theirs = objdump_text(tc_name, c.path)
    monkeypatch.chdir(tmp_path)
    rc, ours, _ = run_cli(capsys, "dump", "flags")
    assert rc == 0 and ours == theirs


def test_an_io_error_is_infrastructure(monkeypatch, capsys):
    import errno

    def fail(path, **kw):
        raise OSError(errno.EIO, "Input/output error", str(path))

    monkeypatch.setattr(sframe_check, "check_file", fail)  # the command imports it when it runs
    rc, out, err = run_cli(capsys, "check", "/some/binary")
    assert rc == 3 and out == "" and err.startswith("harness sframe: ") and "Input/output error" in err


# ------------------------------------------------------------------------------ the FDE table's rules, each on its own
# (mutation testing of sframe_check.py: a rule's boundaries, what each finding names)


def _set_pflags(copy: Copy, pred, flags) -> None:
    """Set p_flags of every PT_LOAD whose (vaddr, flags) ``pred`` accepts to ``flags(old)``."""
    with open(copy.path.parent / "phdrs", "wb") as f:
        f.write(bytes(copy.data))
    with open(copy.path.parent / "phdrs", "rb") as f:
        elf = ELFFile(f)
        for i, seg in enumerate(elf.iter_segments()):
            if seg["p_type"] == "PT_LOAD" and pred(seg["p_vaddr"], seg["p_flags"]):
                struct.pack_into("<I", copy.data, elf["e_phoff"] + i * elf["e_phentsize"] + 4, flags(seg["p_flags"]))


def test_two_fdes_at_one_start_overlap_but_are_in_order(copy, capsys):
    """Ascending order allows equal starts: two FDEs of one start are an overlap, not an order fault."""
    a, b = copy.sec.fdes[-2], copy.sec.fdes[-1]
    copy.set_start(b.offset, a.func_start)
    r = _check(capsys, copy.write(), "fde-overlap", rf"^FDE {b.index} \[{a.func_start:#x}, .* overlaps FDE {a.index} ")
    assert "fde-order" not in _kinds(r)
    assert _where(r.of_kind("fde-overlap")) == [(b.index, None, a.func_start, a.func_start + min(a.func_size,
                                                                                                  b.func_size))]


def test_an_fde_inside_several_is_named_against_the_first_reaching_over_it(copy, capsys):
    """a and b grown to c's end: c lies inside both, and is reported against a, the first of them."""
    a, b, c = copy.sec.fdes[-3], copy.sec.fdes[-2], copy.sec.fdes[-1]
    copy.set_size(a, c.func_end - a.func_start)
    copy.set_size(b, c.func_end - b.func_start)
    r = check_binary(copy.write())
    overlaps = {f.fde: f.message for f in r.of_kind("fde-overlap")}
    assert set(overlaps) == {b.index, c.index}, overlaps
    assert f" overlaps FDE {a.index} " in overlaps[c.index], overlaps


def test_a_binary_without_an_executable_segment_has_every_fde_outside(copy, capsys):
    _set_pflags(copy, lambda vaddr, flags: True, lambda flags: flags & ~1)  # PF_X off everywhere
    r = _check(capsys, copy.write(), "fde-outside-text", r"is not inside an executable PT_LOAD segment "
                                                         r"\(those: none\)$")
    assert _kinds(r) == {"fde-outside-text"} and len(r.findings) == len(copy.sec.fdes)
    assert r.fres_checked == 0  # an FDE outside the text is not compared with the CFI


def test_an_fde_outside_names_every_executable_segment(copy, capsys):
    (lo, hi), = copy.table.text_ranges
    _set_pflags(copy, lambda vaddr, flags: vaddr > hi and not flags & 2, lambda flags: flags | 1)  # rodata too
    last = copy.sec.fdes[-1]
    far = hi + 0x10000000
    copy.set_start(last.offset, far)
    r = check_binary(copy.write())
    segs = SFrameTable.from_elf(copy.path).text_ranges
    assert len(segs) == 2 and segs[0] == (lo, hi)
    assert [f.message for f in r.findings] == [
        f"FDE {last.index} [{far:#x}, {far + last.func_size:#x}) in no section (no symbol) is not inside an "
        f"executable PT_LOAD segment (those: [{lo:#x}, {hi:#x}), [{segs[1][0]:#x}, {segs[1][1]:#x}))"]
    assert (r.findings[0].section, r.findings[0].symbol) == (None, None)


def test_an_fde_outside_the_text_does_not_end_the_checks_of_the_others(copy, capsys):
    """The first FDE moved below the text, the last one's size changed: each is found."""
    first, last = copy.sec.fdes[0], copy.sec.fdes[-1]
    low = copy.table.text_ranges[0][0] - 0x1000
    copy.set_start(first.offset, low)
    copy.set_size(last, last.func_size - 1)
    r = check_binary(copy.write())
    assert _where(r.findings) == [(first.index, None, low, low + first.func_size),
                                  (last.index, None, last.func_start, last.func_end - 1)]
    assert [f.kind for f in r.findings] == ["fde-outside-text", "fde-symbol"]


def test_a_zero_byte_function_has_its_one_fre_at_0_and_no_other(copy, capsys):
    """gas gives a function of 0 bytes one FRE at 0: that one is no fault, an FRE after it is."""
    fde = copy.fde_with(lambda f, fres: len(fres) >= 2)
    fres = copy.sec.fres(fde)
    copy.set_size(fde, 0)
    r = check_binary(copy.write())
    assert _where(r.of_kind("fre-start")) == [(fde.index, k, fde.func_start + fre.start, None)
                                             for k, fre in enumerate(fres) if k > 0]
    assert r.of_kind("fre-start")[0].message.endswith(", past the function's 0 bytes")


# ------------------------------------------------------------------------------ the header's rules


def test_amd64_fixed_ra_offset_other_than_cfa_minus_8(copy, capsys):
    copy.put("b", 6, -16)  # cfa_fixed_ra_offset
    r = _check(capsys, copy.write(), "header", r"^CFA fixed RA offset is -16, AMD64 keeps the RA at CFA-8$")
    assert len(r.of_kind("header")) == 1
    assert r.of_kind("ra") and all(f.sframe.ra == ValueRule("cfa", -16, True) for f in r.of_kind("ra"))


def test_amd64_fixed_fp_offset_set(copy, capsys):
    copy.put("b", 5, -16)  # cfa_fixed_fp_offset
    r = _check(capsys, copy.write(), "header", r"^CFA fixed FP offset is -16, AMD64 has no fixed FP offset \(0\)$")
    assert len(r.of_kind("header")) == 1


def test_a_v2_section_without_pcrel_is_noted_unless_its_binutils_is_named(capsys):
    p = program("callchain", "trixie", Variant())
    note = ("V2 without SFRAME_F_FDE_FUNC_START_PCREL: the layout of binutils 2.41-2.44 (2.45+ set it; pass the "
            "producer's version to require it)")
    assert note in check_binary(p.path).notes
    assert note not in check_binary(p.path, expect_binutils=(2, 44)).notes
    assert check_binary(p.path, expect_binutils=(2, 45)).findings[0].message == (
        "SFRAME_F_FDE_FUNC_START_PCREL is not set, but binutils 2.45 writes V2 with it (from 2.45 on)")


def test_the_pcrel_rules_are_of_v2_and_v3_only(capsys):
    """A V1 section (binutils 2.40) has no FDE_FUNC_START_PCREL to carry: no header finding and
    no note for it, whichever binutils is named."""
    p = program("callchain", "host", Variant())
    assert check_binary(p.path).version == 1
    for binutils in (None, (2, 40), (2, 45)):
        r = check_binary(p.path, expect_binutils=binutils)
        assert r.clean and not [n for n in r.notes if "FDE_FUNC_START_PCREL" in n], (binutils, r.notes)


# ------------------------------------------------------------------------------ FRE starts


def test_fre_start_at_the_function_end(copy, capsys):
    """func_size is the first byte past the function: an FRE starting there covers nothing of it."""
    fde = copy.fde_with(lambda f, fres: f.fre_type == F.FRE_TYPE_ADDR1 and len(fres) >= 2 and f.func_size < 250)
    fres = copy.sec.fres(fde)
    copy.put("B", fres[-1].offset, fde.func_size)
    r = _check(capsys, copy.write(), "fre-start",
               rf"^FDE {fde.index} .*: FRE {len(fres) - 1} starts at \+{fde.func_size:#x} "
               rf"\({fde.func_end:#x}\), past the function's {fde.func_size} bytes$")
    assert _where(r.of_kind("fre-start")) == [(fde.index, len(fres) - 1, fde.func_end, None)]
    assert r.fres_checked == r.num_fres - 1  # it covers no address: nothing of it is compared


@pytest.mark.parametrize("same", [True, False], ids=["same-start", "earlier-start"])
def test_fre_start_not_after_the_previous_one(copy, capsys, same):
    fde = copy.fde_with(lambda f, fres: f.fre_type == F.FRE_TYPE_ADDR1 and len(fres) >= 3 and fres[1].start >= 2)
    fres = copy.sec.fres(fde)
    start = fres[1].start if same else fres[1].start - 1
    copy.put("B", fres[2].offset, start)
    r = _check(capsys, copy.write(), "fre-start",
               rf"^FDE {fde.index} .*: FRE 2 starts at \+{start:#x}, not after FRE 1 \(\+{fres[1].start:#x}\)$")
    assert _where(r.of_kind("fre-start")) == [(fde.index, 2, fde.func_start + start, None)]


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_a_pcmask_fre_start_past_the_repetition_block(tmp_path, capsys, tc_name):
    """A PLT stub's FREs repeat every rep_size bytes: an FRE at rep_size is past its block (while
    still inside the function)."""
    c = Copy(program("callchain", tc_name, Variant(static=False)).path, tmp_path / "plt")
    fde = c.fde_with(lambda f, fres: f.pcmask and len(fres) >= 2 and f.func_size > f.rep_size)
    fres = c.sec.fres(fde)
    c.put("B", fres[-1].offset, fde.rep_size)
    r = _check(capsys, c.write(), "fre-start", rf"^FDE {fde.index} .*: FRE {len(fres) - 1} starts at "
                                               rf"\+{fde.rep_size:#x} \(.*\), past its {fde.rep_size}-byte "
                                               rf"repetition block$")
    assert _where(r.of_kind("fre-start")) == [(fde.index, len(fres) - 1, fde.func_start + fde.rep_size, None)]
    assert r.fres_checked == r.num_fres - 1  # it covers no address of any block: nothing of it is compared


# ------------------------------------------------------------------------------ rules


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_a_disagreement_over_several_cfi_rows_is_one_finding(tmp_path, capsys, tc_name):
    """An FRE of an FP-based CFA spans CFI rows that save other registers: its CFA offset changed,
    it disagrees with each row, and that is one finding over the FRE's whole range."""
    from harness.unwind.cfi import cfi_table
    from harness.unwind.maps import ElfImage
    c = Copy(program("signal", tc_name, Variant()).path, tmp_path / "rows")
    cfi = cfi_table(ElfImage(str(c.path), bytes(c.data)))

    def spans_rows(f, fres):
        if f.pcmask or f.fre_type != F.FRE_TYPE_ADDR1:
            return False
        return any(fre.cfa is not None and fre.cfa.base == "fp" and not fre.cfa.deref
                   and k + 1 < len(fres) and cfi.row_starts(f.func_start + fre.start, f.func_start + fres[k + 1].start)
                   for k, fre in enumerate(fres))
    fde = c.fde_with(spans_rows)
    fres = c.sec.fres(fde)
    k = next(k for k, fre in enumerate(fres) if fre.cfa is not None and fre.cfa.base == "fp" and k + 1 < len(fres)
             and cfi.row_starts(fde.func_start + fre.start, fde.func_start + fres[k + 1].start))
    fre = fres[k]
    lo, hi = fde.func_start + fre.start, fde.func_start + fres[k + 1].start
    wsize = F.DATAWORD_SIZE[F.fre_info_dataword_size_code(fre.info)]
    c.put({1: "b", 2: "h", 4: "i"}[wsize], fre.offset + 1 + 1, fre.cfa.offset + 8)
    r = check_binary(c.write())
    (f,) = r.findings
    assert (f.kind, f.fde, f.fre, f.addr, f.end) == ("cfa", fde.index, k, lo, hi)
    name = places(ElfImage.from_path(str(c.path))).symbol(fde.func_start)
    assert f.message == (f"FDE {fde.index} [{fde.func_start:#x}, {fde.func_end:#x}) in .text ({name}): FRE {k} at "
                         f"[{lo:#x}, {hi:#x}) ({name}+{lo - fde.func_start:#x}): "
                         f"CFA sframe fp+{fre.cfa.offset + 8}, eh_frame fp+{fre.cfa.offset}")
    assert (f.section, f.symbol) == (".text", f"{name}+{lo - fde.func_start:#x}")


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_a_pcmask_fde_is_compared_at_every_address_of_every_block(tmp_path, capsys, tc_name):
    """A PLT stub's .eh_frame CFA is an expression of the PC (SP+8 before the jmp at +11 of
    each 16-byte entry, SP+16 from it): with FRE 1 moved from +11 to +12, FRE 0 covers +11 of
    every entry, and each entry's +11 is a disagreement of its own."""
    c = Copy(program("callchain", tc_name, Variant(static=False)).path, tmp_path / "plt")
    fde = c.fde_with(lambda f, fres: f.pcmask and f.rep_size == 16 and [fre.start for fre in fres] == [0, 11])
    fres = c.sec.fres(fde)
    c.put("B", fres[1].offset, 12)
    r = _check(capsys, c.write(), "cfa", rf"^FDE {fde.index} .*: FRE 0 at \[{fde.func_start + 11:#x}, "
                                         rf"{fde.func_start + 12:#x}\) \(\S+@plt\+0xb\): CFA sframe sp\+8, "
                                         rf"eh_frame sp\+16$")
    assert _kinds(r) == {"cfa"}
    ours = [f for f in r.findings if f.fde == fde.index]  # ld 2.44+ also give .plt.got a wrong CFA (see EXPECTED)
    assert _where(ours) == [(fde.index, 0, fde.func_start + block + 11, fde.func_start + block + 12)
                            for block in range(0, fde.func_size, 16)]


def _eh_frame_fde(copy: Copy, func_start: int):
    """(file offset of the .eh_frame FDE of the function at ``func_start``, its length) in the
    catalog program ``copy`` was made from, as pyelftools reads it (the copy's .eh_frame is not
    patched yet where this is asked)."""
    return _eh_frame_fdes(Path(copy.table.source))[func_start]


@functools.cache
def _eh_frame_fdes(path: Path) -> dict[int, tuple[int, int]]:
    """initial_location -> (file offset, length) of the first .eh_frame FDE of each start."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        eh = elf.get_section_by_name(".eh_frame")
        out: dict[int, tuple[int, int]] = {}
        for e in elf.get_dwarf_info().EH_CFI_entries():
            if hasattr(e, "header") and "initial_location" in e.header:  # not the ZERO terminator
                out.setdefault(e["initial_location"], (eh["sh_offset"] + e.offset, e["length"]))
        return out


def test_cfi_the_model_cannot_read_is_noted_and_not_compared(copy, capsys):
    """The .eh_frame FDE's first DW_CFA_def_cfa_offset made an empty DW_CFA_def_cfa_expression (the
    same two bytes' length): from that row on the CFA is not register + offset, so the FREs there
    are noted as not compared, and not counted as checked."""
    fde = copy.fde_with(lambda f, fres: len(fres) >= 2)
    fres = copy.sec.fres(fde)
    off, length = _eh_frame_fde(copy, fde.func_start)
    insns = off + 4 + 4 + 4 + 4 + 1  # length, CIE pointer, pc_begin, pc_range (sdata4), augmentation length 0
    op = copy.data.index(0x0E, insns, off + 4 + length)  # DW_CFA_def_cfa_offset, after DW_CFA_advance_loc
    assert copy.data[op - 1] & 0xC0 == 0x40 and copy.data[op + 1] < 0x80
    copy.data[op:op + 2] = bytes([0x0F, 0x00])  # DW_CFA_def_cfa_expression, 0 bytes
    row = fde.func_start + (copy.data[op - 1] & 0x3F)  # the advance before it: one FRE starts there
    k = next(k for k, fre in enumerate(fres) if fde.func_start + fre.start == row)
    r = check_binary(copy.write())
    assert r.clean and r.fres_checked == r.num_fres - (len(fres) - k)
    skipped = [n for n in r.notes if " not compared: " in n]
    assert skipped[0] == (f"FDE {fde.index} [{fde.func_start:#x}, {fde.func_end:#x}): FRE {k} at {row:#x} not "
                          f"compared: CFA expression leaves 0 values on the stack"), skipped
    assert len(skipped) == len(fres) - k


def _symbols(path: Path) -> dict:
    """The catalog program's .symtab symbols by name (the last of a name)."""
    return {s.name: s for s in _symtab(path)[0]}


def _set_symbol_size(copy: Copy, name: str, size: int) -> int:
    """Set the st_size of the .symtab symbol ``name``; returns its address."""
    at = _symbol_entry(copy, name)
    struct.pack_into("<Q", copy.data, at + 16, size)  # Elf64_Sym.st_size
    return struct.unpack_from("<Q", copy.data, at + 8)[0]  # st_value


def test_an_fde_starting_where_a_function_ends_is_not_inside_it(copy, capsys):
    """The first FDE moved to the first byte after _dl_relocate_static_pie (1 byte, crt1's): no
    symbol starts there, and the function below ends there: no fde-symbol."""
    first = copy.sec.fdes[0]
    syms = _symbols(Path(copy.table.source))
    fn = syms["_dl_relocate_static_pie"]
    assert fn["st_size"] == 1 and fn["st_info"]["type"] == "STT_FUNC"
    copy.set_start(first.offset, fn["st_value"] + 1)
    r = check_binary(copy.write())
    assert "fde-symbol" not in _kinds(r), [f.message for f in r.of_kind("fde-symbol")]


def test_zero_size_function_symbols_inside_a_function_do_not_hide_it(copy, capsys):
    """crt1's _dl_relocate_static_pie grown over the 0-size symbols of crtbegin after it
    (deregister_tm_clones, ..., frame_dummy), the first FDE moved 4 bytes into
    __do_global_dtors_aux: the search for the function around the FDE's start passes the 0-size
    symbols and finds _dl_relocate_static_pie."""
    first = copy.sec.fdes[0]
    syms = _symbols(Path(copy.table.source))
    assert all(syms[n]["st_size"] == 0 for n in ("deregister_tm_clones", "register_tm_clones",
                                                 "__do_global_dtors_aux", "frame_dummy"))
    at = syms["__do_global_dtors_aux"]["st_value"] + 4
    end = syms["frame_dummy"]["st_value"] + 0x10
    lo = _set_symbol_size(copy, "_dl_relocate_static_pie", end - syms["_dl_relocate_static_pie"]["st_value"])
    copy.set_start(first.offset, at)
    r = check_binary(copy.write())
    # where it lies, objdump names by the nearest label (a 0-size symbol): __do_global_dtors_aux+0x4
    assert [f.message for f in r.of_kind("fde-symbol")] == [
        f"FDE 0 [{at:#x}, {at + first.func_size:#x}) in .text (__do_global_dtors_aux+0x4) starts inside "
        f"_dl_relocate_static_pie [{lo:#x}, {end:#x}) at +{at - lo:#x}, not at a function start"]


def test_an_fre_whose_rule_does_not_decode_is_reported_and_the_other_fdes_compared(tmp_path, capsys):
    """sframe_odd's DRAP function has a V3 flexible FDE (the CFA a control word and an offset):
    one FRE's control word with reg_p cleared bases its CFA on the CFA itself, which no rule
    can be.  The FDE's FREs are decoded with their rules, so the FDE is fre-decode; every other
    FDE is still checked and compared."""
    c = Copy(program("sframe_odd", "sid", Variant()).path, tmp_path / "flex")
    fde = c.fde_with(lambda f, fres: f.flex and any(fre.cfa is not None for fre in fres[1:]))
    fre = next(fre for fre in c.sec.fres(fde)[1:] if fre.cfa is not None)
    wsize = F.DATAWORD_SIZE[F.fre_info_dataword_size_code(fre.info)]
    words_at = fre.offset + F.FRE_START_ADDR_SIZE[fde.fre_type] + 1
    c.put({1: "B", 2: "H", 4: "I"}[wsize], words_at, fre.datawords[0] & ~1)  # reg_p off
    r = _check(capsys, c.write(), "fre-decode", rf"^FDE {fde.index} \[{fde.func_start:#x}, {fde.func_end:#x}\)"
                                                rf" in \.text \(dyn_aligned\): "
                                                rf"fre\.cfa at byte {fre.offset:#x}: the CFA cannot be based on itself "
                                                rf"\(control word reg_p = 0\)$")
    assert _kinds(r) == {"fre-decode"}
    assert _where(r.findings) == [(fde.index, None, fde.func_start, fde.func_end)]
    assert r.fres_checked == r.num_fres - len(c.sec.fres(fde))


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_the_addresses_compared_are_the_fre_and_cfi_row_starts_and_every_pcmask_address(tc_name):
    """What ``(N addresses)`` counts: in a PCINC FDE, each FRE's start and each .eh_frame row start
    (read here by pyelftools) inside the function; in a PCMASK FDE (the PLT), every address."""
    p = program("callchain", tc_name, Variant(static=False))
    with open(p.path, "rb") as f:
        rows = sorted({row["pc"] for e in ELFFile(f).get_dwarf_info().EH_CFI_entries()
                       if hasattr(e, "header") and "initial_location" in e.header for row in e.get_decoded().table})
    table = SFrameTable.from_elf(p.path, strict=False)
    expected = 0
    for fde in table.section.fdes:
        if fde.pcmask:
            expected += fde.func_size
            continue
        starts = {fde.func_start + fre.start for fre in table.section.fres(fde) if fre.start < fde.func_size}
        expected += len(starts | {pc for pc in rows if fde.func_start <= pc < fde.func_end})
    r = check_binary(p.path)
    assert r.addresses_compared == expected


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_eh_frame_fdes_without_an_sframe_fde_are_counted_and_the_first_five_named(tc_name):
    """A static binary's libc has .eh_frame and no .sframe: each of its .eh_frame FDEs whose
    start no SFrame FDE covers is counted, and the five lowest named by their
    function symbol (the largest of those at the address) or their address."""
    p = program("callchain", tc_name, Variant(frame_pointers=False))
    with open(p.path, "rb") as f:
        elf = ELFFile(f)
        starts = [e["initial_location"] for e in elf.get_dwarf_info().EH_CFI_entries()
                  if hasattr(e, "header") and "initial_location" in e.header]
        names: dict[int, tuple[int, str]] = {}
        for s in elf.get_section_by_name(".symtab").iter_symbols():
            if s["st_info"]["type"] in ("STT_FUNC", "STT_LOOS") and s["st_shndx"] != "SHN_UNDEF":  # LOOS: IFUNC
                if s["st_value"] not in names or s["st_size"] > names[s["st_value"]][0]:
                    names[s["st_value"]] = (s["st_size"], s.name)
    fdes = SFrameTable.from_elf(p.path, strict=False).fdes
    missing = sorted(pc for pc in starts if not any(f.func_start <= pc < f.func_end for f in fdes))
    assert len(missing) > 5 and len(missing) < len(starts)
    r = check_binary(p.path)
    assert r.cfi_without_sframe == len(missing)
    shown = ", ".join(names[pc][1] if pc in names else f"{pc:#x}" for pc in missing[:5])
    assert (f"{len(missing)} of {len(starts)} .eh_frame FDEs have no SFrame FDE: {shown}, ... "
            f"{len(missing) - 5} more") in r.notes, r.notes



@pytest.mark.parametrize("n", [5, 6])
@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_five_eh_frame_fdes_without_an_sframe_fde_are_all_named_and_a_sixth_counted(tmp_path, tc_name, n):
    """The note names the first five uncovered .eh_frame FDEs and counts the others: five are
    named and nothing more said, six are five named and "... 1 more".  A dynamic callchain with
    its header's FDE count lowered: the last SFrame FDEs are no longer read, and their functions
    (laid end to end: an .eh_frame FDE starting where the last read one ends is not inside it)
    are .eh_frame's only."""
    p = program("callchain", tc_name, Variant(static=False))
    with open(p.path, "rb") as f:
        elf = ELFFile(f)
        starts = sorted(e["initial_location"] for e in elf.get_dwarf_info().EH_CFI_entries()
                        if hasattr(e, "header") and "initial_location" in e.header)
        names = {s["st_value"]: s.name for s in elf.get_section_by_name(".symtab").iter_symbols()
                 if s["st_info"]["type"] == "STT_FUNC" and s["st_value"] and s["st_size"]}
    c = Copy(p.path, tmp_path / "fewer")
    fdes = c.sec.fdes
    keep, missing = next((keep, missing) for keep in range(len(fdes), 0, -1)
                         if len(missing := [pc for pc in starts
                                            if not any(f.func_start <= pc < f.func_end for f in fdes[:keep])]) == n)
    c.put("II", 8, keep, sum(len(c.sec.fres(f)) for f in fdes[:keep]))  # num_fdes, num_fres
    r = check_binary(c.write())
    assert r.cfi_without_sframe == n and r.num_fdes == keep
    shown = ", ".join(names.get(pc, f"{pc:#x}") for pc in missing[:5])
    more = ", ... 1 more" if n == 6 else ""
    assert [x for x in r.notes if "have no SFrame FDE" in x] == [
        f"{n} of {len(starts)} .eh_frame FDEs have no SFrame FDE: {shown}{more}"]



@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_a_file_without_section_headers_is_checked_through_pt_gnu_sframe(tc_name, tmp_path, capsys):
    """With the section headers gone the SFrame data is read as the kernel reads it, through the
    PT_GNU_SFRAME segment, and the check says so.  That segment is ld's one merged section (only
    ld writes it): the zeros padding it past the section's data are not looked at as another
    section, and the segment it was found by is no missing one."""
    p = program("callchain", tc_name, Variant(static=False))
    data = bytearray(p.path.read_bytes())
    struct.pack_into("<Q", data, 0x28, 0)  # e_shoff
    struct.pack_into("<HHH", data, 0x3A, 0, 0, 0)  # e_shentsize, e_shnum, e_shstrndx
    path = tmp_path / "nosections"
    path.write_bytes(bytes(data))
    r = check_binary(path, expect_binutils=BINUTILS[tc_name])
    assert (r.via, r.version, r.pieces, r.findings) == ("PT_GNU_SFRAME", VERSION[tc_name], 1, [])
    assert not [n for n in r.notes if "after the SFrame data" in n], r.notes
    assert check_binary(p.path).via == "section"
    # the CFI reader finds .eh_frame by its section header: the structure is checked, the rules
    # are not compared, and that is no verdict, never a clean one
    _no_verdict(capsys, path, "no verdict: rules not compared: no section headers, by which .eh_frame is found")
    rc, out, _ = run_cli(capsys, "check", str(path))
    flags = ", ".join(SFrameTable.from_elf(p.path).header.flag_names())
    assert rc == 2 and out.splitlines()[0] == f"{path}: SFrame V{VERSION[tc_name]} ({flags}) via PT_GNU_SFRAME"


# ------------------------------------------------------------------------------ objects: where the functions lie

DATA_FUNCTION = """\
\t.text
\t.globl\tin_text
\t.type\tin_text, @function
in_text:
\t.cfi_startproc
\tret
\t.cfi_endproc
\t.size\tin_text, .-in_text
\t.section\t.rodata.fn,"a",@progbits
\t.globl\tin_rodata
\t.type\tin_rodata, @function
in_rodata:
\t.cfi_startproc
\tnop
\tret
\t.cfi_endproc
\t.size\tin_rodata, .-in_rodata
"""


def _assemble(tc_name: str, source: str, dest: Path) -> Path:
    tc = need(tc_name)
    outer, inner = tc.workdir("sframe-check-object")
    try:
        (outer / "f.s").write_text(source)
        tc.run(["as", "--gsframe", "f.s", "-o", "f.o"], cwd=inner)
        shutil.copy(outer / "f.o", dest)
    finally:
        shutil.rmtree(outer, ignore_errors=True)
    return dest


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_an_object_function_outside_its_executable_sections(tmp_path, tc_name):
    """gas describes a function in a section that is not executable (.rodata.fn): placed, its FDE
    lies outside every executable section -- the object's rule in place of PT_LOAD's."""
    from harness.unwind.sframe_check import check_file, load
    path = _assemble(tc_name, DATA_FUNCTION, tmp_path / "f.o")
    table, image = load(path)
    syms = {s.name: s["st_value"] for s in image.elf.get_section_by_name(".symtab").iter_symbols()}
    (text,) = table.text_ranges
    (r,) = check_file(path).checks
    assert not r.linked
    assert [(f.kind, f.fde, f.addr, f.end, f.message) for f in r.findings] == [
        ("fde-outside-text", 1, syms["in_rodata"], syms["in_rodata"] + 2,
         f"FDE 1 [{syms['in_rodata']:#x}, {syms['in_rodata'] + 2:#x}) in .rodata.fn (in_rodata) is not inside an "
         f"executable section (as placed) (those: [{text[0]:#x}, {text[1]:#x}))")]


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_an_object_without_an_executable_section_is_noted_not_placed(tmp_path, tc_name):
    """The same object with SHF_EXECINSTR cleared on .text: no executable section at all, so where
    the functions lie is not checked, and a note says so."""
    from harness.unwind.sframe_check import check_file
    path = _assemble(tc_name, DATA_FUNCTION, tmp_path / "f.o")
    data = bytearray(path.read_bytes())
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for i, s in enumerate(elf.iter_sections()):
            if s["sh_flags"] & 0x4:  # SHF_EXECINSTR
                struct.pack_into("<Q", data, elf["e_shoff"] + i * elf["e_shentsize"] + 8, s["sh_flags"] & ~0x4)
    path.write_bytes(bytes(data))
    (r,) = check_file(path).checks
    assert not r.of_kind("fde-outside-text")
    assert "an object without an executable section: where the functions lie is not checked" in r.notes


DESCENDING_FUNCTIONS = """\
\t.section\t.text.low,"ax",@progbits
\t.section\t.text.high,"ax",@progbits
\t.globl\thigh
\t.type\thigh, @function
high:
\t.cfi_startproc
\tret
\t.cfi_endproc
\t.size\thigh, .-high
\t.section\t.text.low,"ax",@progbits
\t.globl\tlow
\t.type\tlow, @function
low:
\t.cfi_startproc
\tnop
\tret
\t.cfi_endproc
\t.size\tlow, .-low
"""


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_an_objects_fdes_need_not_ascend(tmp_path, tc_name):
    """FDE order is a rule of linked outputs (the linker sorts): gas writes an object's FDEs in
    the order of the source, here `high` (in .text.high) before `low` (in .text.low, a section
    made first, so placed below): the FDEs descend, and that is no finding."""
    from harness.unwind.sframe_check import check_file, load
    path = _assemble(tc_name, DESCENDING_FUNCTIONS, tmp_path / "f.o")
    table, _ = load(path)
    assert [f.func_size for f in table.fdes] == [1, 2] and table.fdes[0].func_start > table.fdes[1].func_start
    (r,) = check_file(path).checks
    assert not r.linked and r.clean, [f.message for f in r.findings]


SPANNING_FUNCTION = """\
\t.text
\t.globl\talias
\t.type\talias, @function
\t.globl\touter
\t.type\touter, @function
alias:
outer:
\t.cfi_startproc
\tnop
\tret
\t.cfi_endproc
inner:
\t.cfi_startproc
\tret
\t.cfi_endproc
\t.size\touter, .-outer
\t.size\talias, 0
"""


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_an_fde_inside_the_lowest_function_symbol_is_found_inside_it(tmp_path, tc_name):
    """`outer`'s symbol spans two FDEs, `inner`'s starting 2 bytes in: the search below that
    start reaches the object's first (lowest) function symbol, and of the two there (a 0-byte
    `alias` first in .symtab, then `outer`) names the sized one.  `outer`'s own FDE, 2 bytes of
    its 3, differs from it too."""
    from harness.unwind.sframe_check import check_file, load
    path = _assemble(tc_name, SPANNING_FUNCTION, tmp_path / "f.o")
    table, image = load(path)
    funcs = [(s.name, s["st_value"], s["st_size"]) for s in image.elf.get_section_by_name(".symtab").iter_symbols()
             if s["st_info"]["type"] == "STT_FUNC"]
    lo = table.fdes[0].func_start
    assert funcs == [("alias", lo, 0), ("outer", lo, 3)], funcs
    (r,) = check_file(path).checks
    assert [(f.kind, f.fde, f.addr, f.end, f.message) for f in r.findings] == [
        ("fde-symbol", 0, lo, lo + 2, f"FDE 0 [{lo:#x}, {lo + 2:#x}) in .text (outer): 2 bytes, the function "
                                      f"symbol at its start says otherwise: outer (3 bytes)"),
        # where it lies is named by the nearest symbol, as objdump does: the local label `inner`
        ("fde-symbol", 1, lo + 2, lo + 3,
         f"FDE 1 [{lo + 2:#x}, {lo + 3:#x}) in .text (inner) starts inside outer [{lo:#x}, {lo + 3:#x}) at +0x2, "
         f"not at a function start")]


def test_a_pcmask_fde_of_one_block_covers_what_its_pcinc_reading_does(copy, capsys):
    """A short function (4 FREs, at most 16 bytes) made PCMASK with a 16-byte block: its one block
    is the whole function, each FRE covers up to the next one's start, as in PCINC, and every
    address of it agrees with .eh_frame."""
    fde = copy.fde_with(lambda f, fres: len(fres) >= 3 and f.func_size <= 16 and not f.pcmask)
    if copy.sec.header.version == 3:
        copy.data[copy.off + fde.attr_offset + 2] |= 0x10  # info: PCTYPE_MASK
        copy.data[copy.off + fde.attr_offset + 4] = 16  # rep_size
    else:
        copy.data[copy.off + fde.offset + 16] |= 0x10
        if copy.sec.header.version == 2:
            copy.data[copy.off + fde.offset + 17] = 16
    path = copy.write()
    table = SFrameTable.from_elf(path, strict=False)
    assert table.section.fdes[fde.index].pcmask and table.section.fdes[fde.index].rep_size == 16
    r = _check_clean(path)
    assert r.fres_checked == r.num_fres


def _set_symbol(copy: Copy, name: str, value: int, size: int) -> None:
    struct.pack_into("<QQ", copy.data, _symbol_entry(copy, name) + 8, value, size)  # st_value, st_size


def test_function_symbols_sharing_an_address(copy, capsys):
    """crtbegin's frame_dummy (0 bytes) moved to the first FDE's function with 5 bytes: two
    function symbols start there.  The FDE's size may be either one's; a size of neither names
    both; an FDE starting inside them is inside the larger."""
    first, second = copy.sec.fdes[0], copy.sec.fdes[1]
    fn = next(s.name for s in _symbols(Path(copy.table.source)).values()
              if s["st_value"] == first.func_start and s["st_info"]["type"] == "STT_FUNC")
    _set_symbol(copy, "frame_dummy", first.func_start, 5)
    copy.set_size(first, 5)
    assert "fde-symbol" not in _kinds(check_binary(copy.write()))
    copy.set_size(first, first.func_size - 1)
    r = check_binary(copy.write())
    assert [f.message for f in r.of_kind("fde-symbol")] == [
        f"FDE 0 [{first.func_start:#x}, {first.func_end - 1:#x}) {_in(copy.path, first.func_start)}: "
        f"{first.func_size - 1} bytes, the function symbol at its start says otherwise: frame_dummy (5 bytes), {fn} "
        f"({first.func_size} bytes)"]
    copy.set_size(first, first.func_size)
    copy.set_start(second.offset, first.func_start + 8)
    r = check_binary(copy.write())
    assert [f.message for f in r.of_kind("fde-symbol")] == [
        f"FDE 1 [{first.func_start + 8:#x}, {first.func_start + 8 + second.func_size:#x}) "
        f"{_in(copy.path, first.func_start + 8)} starts inside {fn} [{first.func_start:#x}, {first.func_end:#x}) at "
        f"+0x8, not at a function start"]


# ------------------------------------------------------------------------------ input that cannot be checked


def test_an_unreadable_file_is_bad_input(monkeypatch, tmp_path, capsys):
    import errno
    good = program("callchain", "host", Variant()).path

    def denied(self):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(SFrameError) as e:
        check_binary(good)
    assert e.value.field == "file" and str(e.value) == f"file: {good}: cannot read: Permission denied"


def test_elf_structures_that_do_not_decode_are_bad_input(copy, capsys):
    """.symtab's sh_offset past the end of the file: the SFrame section reads, the symbols do not."""
    with open(copy.table.source, "rb") as f:
        elf = ELFFile(f)
        shdr = elf["e_shoff"] + elf.get_section_index(".symtab") * elf["e_shentsize"]
    struct.pack_into("<Q", copy.data, shdr + 0x18, len(copy.data) + 0x100000)  # Elf64_Shdr.sh_offset
    path = copy.write()
    with pytest.raises(SFrameError) as e:
        check_binary(path)
    assert e.value.field == "file" and str(e.value).startswith(f"file: {path}: ELF structures do not decode: "), e.value
    cause = e.value.__cause__  # what pyelftools raised, named by its type and its words
    assert str(e.value) == f"file: {path}: ELF structures do not decode: {type(cause).__name__}: {cause}", e.value
    rc, out, err = run_cli(capsys, "check", str(path))
    assert rc == 2 and out == "" and "ELF structures do not decode" in err


def test_an_archive_member_that_is_not_a_readable_elf_file_is_an_error_of_that_member(tmp_path):
    """An ELF member whose section headers lie past its end: not checked, one line of the archive's
    errors naming it; the other member is checked."""
    from harness.unwind.sframe_check import check_file
    good = _assemble("host", DATA_FUNCTION, tmp_path / "good.o")
    bad = bytearray(good.read_bytes())
    struct.pack_into("<Q", bad, 0x28, len(bad) + 0x1000)  # Elf64_Ehdr.e_shoff
    (tmp_path / "bad.o").write_bytes(bytes(bad))
    need("host").run(["ar", "rcS", "lib.a", "good.o", "bad.o"], cwd=str(tmp_path))
    fc = check_file(tmp_path / "lib.a")
    assert fc.members == 2 and [c.path for c in fc.checks] == [f"{tmp_path / 'lib.a'}(good.o)"]
    assert len(fc.errors) == 1 and fc.errors[0].startswith(
        f"{tmp_path / 'lib.a'}(bad.o): file: not a readable ELF file: ELFParseError: Reading section 0 at offset "
        f"{len(bad) + 0x1000} past EOF {len(bad)}"), fc.errors


def test_a_path_that_is_no_readable_file_is_bad_input_of_the_file(tmp_path):
    """Each reader of a path -- load, check_binary, check_file, load_members (dump's of an archive)
    -- says the same of a path that does not exist and of a directory: an SFrameError of the
    ``file`` field naming the path and what it is."""
    from harness.unwind.sframe_check import check_file, load, load_members
    for path, what in ((tmp_path / "missing", "no such file"), (tmp_path, "not a regular file")):
        for read in (load, check_binary, check_file, load_members):
            with pytest.raises(SFrameError) as e:
                read(path)
            assert (e.value.field, str(e.value)) == ("file", f"file: {path}: {what}"), read


def test_a_file_that_is_not_elf_is_bad_input_naming_what_the_elf_reader_said(tmp_path):
    """Bytes that are not ELF (a text file): load and check_file say so under the file's name,
    with the type and the words of the error the ELF reader raised."""
    from harness.unwind.sframe_check import check_file, load
    text = tmp_path / "text"
    text.write_text("not ELF\n")
    for read in (load, check_file):
        with pytest.raises(SFrameError) as e:
            read(text)
        assert e.value.field == "file" and str(e.value) == (
            f"file: {text}: not a readable ELF file: MapsError: maps line 0 does not parse: "
            f"'{text}: not an ELF file (Magic number does not match)'"), e.value


def test_a_finding_is_of_a_known_kind():
    """Every kind of KINDS makes a Finding; any other is a ValueError naming it."""
    from harness.unwind.sframe_check import KINDS, Finding
    assert [Finding(k, "m").kind for k in KINDS] == list(KINDS)
    with pytest.raises(ValueError, match=r"^unknown finding kind 'fde-sorted'$"):
        Finding("fde-sorted", "m")


# ------------------------------------------------------------------------------ when the rules are not compared


def _rename_section(copy: Copy, name: str, other: str) -> None:
    """Give section ``name`` the name of ``other`` without its first character (".comment" ->
    "comment"): a name no reader looks for."""
    with open(copy.table.source, "rb") as f:
        elf = ELFFile(f)
        at = elf["e_shoff"] + elf.get_section_index(name) * elf["e_shentsize"]
        struct.pack_into("<I", copy.data, at, elf.get_section_by_name(other)["sh_name"] + 1)  # Elf64_Shdr.sh_name


def _no_verdict(capsys, path: Path, reason: str):
    """``path`` checks with no finding but is no verdict for ``reason`` (its start, where the
    reason ends in "(": what pyelftools raised, whose words vary) -- never clean: the CLI exits 2
    and its summary says why, beside the counts (0 FREs checked, 0 addresses)."""
    r = check_binary(path)
    assert not r.clean and not r.findings, [f.message for f in r.findings]
    assert r.no_verdict == reason or reason.endswith("(") and r.no_verdict.startswith(reason), r.no_verdict
    rc, out, err = run_cli(capsys, "check", str(path))
    assert rc == 2 and err == "", err
    summary = out.splitlines()[-1]
    assert summary.startswith(f"  {r.num_fdes} FDEs, {r.num_fres} FREs, {r.fres_checked} FREs checked against "
                              f".eh_frame ({r.addresses_compared} addresses): {reason}"), out
    assert "clean" not in out
    return r


def test_without_eh_frame_the_rules_are_not_compared(copy, capsys):
    _rename_section(copy, ".eh_frame", ".comment")
    r = _no_verdict(capsys, copy.write(), "no verdict: rules not compared: no .eh_frame or .debug_frame FDEs")
    assert r.fres_checked == 0 and r.addresses_compared == 0 and r.cfi_without_sframe == 0 and r.num_fres > 0
    assert [n for n in r.notes if n.startswith("rules not compared")] == [
        "rules not compared: no .eh_frame or .debug_frame FDEs"]


def test_an_eh_frame_that_does_not_decode_is_noted_and_not_compared(copy, capsys):
    with open(copy.table.source, "rb") as f:
        eh = ELFFile(f).get_section_by_name(".eh_frame")["sh_offset"]
    struct.pack_into("<I", copy.data, eh, 0xFFFFFF00)  # the first CIE's length
    path = copy.write()
    r = check_binary(path)
    assert r.fres_checked == 0 and r.addresses_compared == 0
    notes = [n for n in r.notes if n.startswith("rules not compared")]
    # the .eh_frame reader (harness/unwind/ehframe.py) says which entry and why
    assert len(notes) == 1 and notes[0].startswith(
        f"rules not compared: {path}: .eh_frame does not decode (EhFrameError: the entry at +0x0 claims 4294967040 "
        f"bytes"), notes
    # bad input for the comparison: no verdict, whose reason is the note's
    _no_verdict(capsys, path, "no verdict: " + notes[0])


def test_a_debug_frame_that_does_not_decode_beside_eh_frame_is_noted_and_not_compared(copy, capsys):
    """.debug_aranges renamed .debug_frame (its name overwritten in .shstrtab): .eh_frame decodes,
    .debug_frame does not -- the CFI is then not half trusted: the rules are compared with neither,
    and no .eh_frame FDE is counted as without an SFrame FDE."""
    with open(copy.table.source, "rb") as f:
        elf = ELFFile(f)
        shstrtab = elf.get_section(elf["e_shstrndx"])["sh_offset"]
        at = shstrtab + elf.get_section_by_name(".debug_aranges")["sh_name"]
    assert bytes(copy.data[at:at + 15]) == b".debug_aranges\0"
    copy.data[at:at + 13] = b".debug_frame\0"
    path = copy.write()
    r = check_binary(path)
    assert r.fres_checked == 0 and r.addresses_compared == 0 and r.cfi_without_sframe == 0
    notes = [n for n in r.notes if n.startswith("rules not compared")]
    assert len(notes) == 1 and notes[0].startswith(f"rules not compared: {path}: .debug_frame does not decode ("), notes
    _no_verdict(capsys, path, f"no verdict: rules not compared: {path}: .debug_frame does not decode (")


def test_a_section_of_another_abi_is_checked_but_for_its_rules(copy, capsys):
    """The header's ABI made AArch64 (little-endian, the same byte order): the FDE table and FREs
    are checked as they are, the rules (modelled for AMD64 only) not, nor AMD64's fixed offsets."""
    copy.put("B", 4, F.ABI_AARCH64_ENDIAN_LITTLE)
    copy.put("b", 6, 0)  # AArch64 has no fixed RA offset
    r = _no_verdict(capsys, copy.write(),
                    "no verdict: rules not compared: frame rules are modelled for AMD64 only, not aarch64-le")
    assert r.fres_checked == 0 and r.addresses_compared == 0 and r.cfi_without_sframe == 0
    assert "rules not compared: frame rules are modelled for AMD64 only, not aarch64-le" in r.notes


# What mutating real binaries found (issue 34): of 1,500 copies of host-built callchains with 1-8
# random bytes changed, 55 were "clean" with 0 FREs checked -- each one of the shapes below,
# rebuilt here from the catalog's binaries.  None is clean now: each is no verdict (exit 2).


def _eh_frame_cie(copy: Copy) -> int:
    """The file offset of the first .eh_frame CIE of ``copy``: gcc's "zR" CIE (length, id,
    version 1, "zR", code alignment 1, data alignment -8, RA column 16, augmentation length 1, R)."""
    with open(copy.table.source, "rb") as f:
        eh = ELFFile(f).get_section_by_name(".eh_frame")["sh_offset"]
    assert bytes(copy.data[eh + 8:eh + 16]) == b"\x01zR\x00\x01\x78\x10\x01", bytes(copy.data[eh:eh + 16]).hex()
    return eh


def test_a_cie_whose_augmentation_runs_past_it_leaves_no_verdict(copy, capsys):
    """The CIE's augmentation length made 65 (a mutant's shape): .eh_frame does not decode, every
    rule is uncompared -- bad input for the comparison, not a clean section."""
    eh = _eh_frame_cie(copy)
    copy.data[eh + 15] = 65
    path = copy.write()
    r = _no_verdict(capsys, path, f"no verdict: rules not compared: {path}: .eh_frame does not decode (")
    assert "has 65 bytes of augmentation data, past its end" in r.no_verdict
    assert r.fres_checked == 0 and r.num_fres > 0


def test_a_cie_naming_another_return_address_column_leaves_no_fre_compared(copy, capsys):
    """The return address column of the CIEs of the functions SFrame describes made 17 (a mutant's
    shape): .eh_frame decodes, but no row has a rule for that column, so no FRE is compared --
    each address noted, and the check is no verdict, not "clean" over 0 FREs."""
    with open(copy.table.source, "rb") as f:
        eh = ELFFile(f).get_section_by_name(".eh_frame")
        entries = parse_eh_frame(eh.data(), eh["sh_addr"])
        base = eh["sh_offset"]
    cies = {e.cie.offset for e in entries if isinstance(e, EhFDE)
            and any(fde.func_start <= e["initial_location"] < fde.func_end for fde in copy.sec.fdes)}
    for cie in cies:  # version 1, augmentation, code alignment 1, data alignment -8, RA column 16
        nul = copy.data.index(0, base + cie + 9)
        assert copy.data[base + cie + 8] == 1 and bytes(copy.data[nul + 1:nul + 4]) == b"\x01\x78\x10"
        copy.data[nul + 3] = 17
    r = _no_verdict(capsys, copy.write(), "no verdict: no FRE compared with .eh_frame (see the notes)")
    assert r.fres_checked == 0 and r.num_fres > 0 and r.addresses_compared == 0
    assert r.rules_not_compared is None and r.fres_cfi_undecodable == 0
    assert all(n.endswith(" not compared: no rule for the return address") for n in r.notes
               if " not compared: " in n)


def test_an_fde_whose_instructions_do_not_decode_leaves_its_fres_uncompared_and_no_verdict(copy, capsys):
    """One function's .eh_frame FDE with its first instruction made a DW_CFA_def_cfa_expression of
    127 bytes, past the FDE's end (a mutant's shape): that FDE does not decode, its function's FREs
    are not compared, every other FRE is -- a partly corrupted .eh_frame is bad input for the
    comparison too: no verdict, with the counts it rests on."""
    fde = copy.fde_with(lambda f, fres: len(fres) >= 2 and not f.pcmask)
    fres = copy.sec.fres(fde)
    off, length = _eh_frame_fde(copy, fde.func_start)
    insns = off + 4 + 4 + 4 + 4 + 1  # length, CIE pointer, pc_begin, pc_range (sdata4), augmentation length 0
    assert copy.data[off + 16] == 0 and length - 13 >= 2
    copy.data[insns:insns + 2] = bytes([0x0F, 0x7F])  # DW_CFA_def_cfa_expression, 127 bytes
    r = _no_verdict(capsys, copy.write(),
                    f"no verdict: {len(fres)} FREs not compared, their .eh_frame FDE does not decode")
    assert r.fres_cfi_undecodable == len(fres) and r.fres_checked == r.num_fres - len(fres) > 0
    assert r.rules_not_compared is None
    assert any(n.startswith(f"FDE {fde.index} [") and " does not decode (" in n for n in r.notes), r.notes


DRAP_ONLY = """\
\t.text
\t.globl\tdrap
\t.type\tdrap, @function
drap:
\t.cfi_startproc
\tleaq\t8(%rsp), %r10
\t.cfi_def_cfa 10, 0
\tandq\t$-64, %rsp
\tpushq\t-8(%r10)
\tleaq\t-8(%r10), %rsp
\t.cfi_def_cfa 7, 8
\tret
\t.cfi_endproc
\t.size\tdrap, .-drap
"""


def test_a_section_gas_left_without_fdes_has_nothing_to_check(tmp_path, capsys):
    """gas 2.44 skips a function whose CFA it cannot express (a DRAP register) and, that being the
    object's only function, writes a well-formed .sframe with no FDE: nothing to check, said so
    beside the counts (0 FDEs, 0 FREs), exit 2 -- never "clean"."""
    path = _assemble("trixie", DRAP_ONLY, tmp_path / "drap.o")
    from harness.unwind.sframe_check import check_file
    fc = check_file(path)
    (r,) = fc.checks
    assert (r.version, r.num_fdes, r.num_fres, r.findings, r.cfi_without_sframe) == (2, 0, 0, [], 1)
    assert fc.no_verdict == ["nothing to check: the section has no FDE"] and not fc.clean
    rc, out, err = run_cli(capsys, "check", str(path))
    assert rc == 2 and err == ""
    assert out.splitlines()[-1] == ("  0 FDEs, 0 FREs, 0 FREs checked against .eh_frame (0 addresses): nothing to "
                                    "check: the section has no FDE")
    # in an archive, beside a member that is checked: the member has no verdict, and so has the archive
    good = _assemble("trixie", DATA_FUNCTION, tmp_path / "good.o")
    need("host").run(["ar", "rcS", "lib.a", good.name, path.name], cwd=str(tmp_path))
    lib = check_file(tmp_path / "lib.a")
    assert lib.no_verdict == [f"{tmp_path / 'lib.a'}(drap.o): nothing to check: the section has no FDE"]
    rc, out, _ = run_cli(capsys, "check", str(tmp_path / "lib.a"))
    assert rc == 2 and out.splitlines()[-1].startswith(
        f"{tmp_path / 'lib.a'}: archive of 2 members: 2 with .sframe checked (1 with findings, 1 with no verdict), "
        f"0 without, 0 unreadable; ")
    assert out.splitlines()[-1].endswith(": no verdict")


EMPTY_ONLY = """\
\t.text
\t.globl\tempty
\t.type\tempty, @function
empty:
\t.cfi_startproc
\t.cfi_endproc
\t.size\tempty, .-empty
"""


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_a_section_whose_fres_cover_no_address_has_nothing_to_check(tmp_path, capsys, tc_name):
    """An object whose one function has 0 bytes: gas writes its FDE and one FRE at 0, which
    covers no address -- there is nothing to compare, said so, exit 2, not "clean" (and not
    "see the notes": there are none to see)."""
    path = _assemble(tc_name, EMPTY_ONLY, tmp_path / "empty.o")
    from harness.unwind.sframe_check import check_file
    (r,) = check_file(path).checks
    assert (r.num_fdes, r.num_fres, r.fres_covering, r.fres_checked, r.findings) == (1, 1, 0, 0, [])
    assert r.no_verdict == "nothing to check: no FRE covers an address" and not r.clean
    rc, out, _ = run_cli(capsys, "check", str(path))
    assert rc == 2 and out.splitlines()[-1] == ("  1 FDEs, 1 FREs, 0 FREs checked against .eh_frame (0 addresses): "
                                                "nothing to check: no FRE covers an address")


def test_an_archive_without_sframe_data_has_nothing_to_check(tmp_path, capsys):
    """An archive whose members have no .sframe section (gas without --gsframe): nothing to
    check, exit 2, as an ELF file without one is bad input -- not "clean" over no member."""
    tc = need("host")
    (tmp_path / "f.s").write_text(DATA_FUNCTION)
    tc.run(["as", "f.s", "-o", "f.o"], cwd=str(tmp_path))
    tc.run(["ar", "rcS", "lib.a", "f.o"], cwd=str(tmp_path))
    from harness.unwind.sframe_check import check_file
    fc = check_file(tmp_path / "lib.a")
    assert (fc.members, fc.checks, fc.without_sframe) == (1, [], ["f.o"])
    assert fc.no_verdict == ["nothing to check: no member has a .sframe section"] and not fc.clean
    rc, out, _ = run_cli(capsys, "check", str(tmp_path / "lib.a"))
    assert rc == 2 and out == (f"{tmp_path / 'lib.a'}: archive of 1 members: 0 with .sframe checked (0 with findings, "
                               f"0 with no verdict), 1 without, 0 unreadable; 0 FDEs, 0 FREs, 0 FREs checked against "
                               f".eh_frame (0 addresses): nothing to check: no member has a .sframe section\n")


def _patch_symbol(copy: Copy, name: str, **fields) -> None:
    """Set Elf64_Sym fields (st_info, st_value, st_size) of the .symtab symbol ``name``."""
    at = _symbol_entry(copy, name)
    for field_name, (off, fmt) in {"st_info": (4, "B"), "st_value": (8, "Q"), "st_size": (16, "Q")}.items():
        if field_name in fields:
            struct.pack_into("<" + fmt, copy.data, at + off, fields[field_name])


def test_only_function_symbols_speak_for_a_function(copy, capsys):
    """A data object (STT_OBJECT) moved to a function's start with the FDE's new size: not a
    function symbol, so the function's own symbol still says the FDE's size is wrong."""
    fde = copy.fde_with(lambda f, fres: fres[-1].start < f.func_size - 1)
    fn = _symbol_at(Path(copy.table.source), fde.func_start)
    obj = next(s.name for s in _symbols(Path(copy.table.source)).values()
               if s["st_info"]["type"] == "STT_OBJECT" and s["st_value"] and s["st_shndx"] != "SHN_UNDEF")
    _patch_symbol(copy, obj, st_value=fde.func_start, st_size=fde.func_size - 1)
    copy.set_size(fde, fde.func_size - 1)
    r = check_binary(copy.write())
    # and where it lies is the function's name too: objdump prefers a function to an object
    assert [f.message for f in r.of_kind("fde-symbol")] == [
        f"FDE {fde.index} [{fde.func_start:#x}, {fde.func_end - 1:#x}) in .text ({fn}): {fde.func_size - 1} bytes, "
        f"the function symbol at its start says otherwise: {fn} ({fde.func_size} bytes)"]


def test_an_ifunc_symbol_speaks_for_its_function(copy, capsys):
    """The function's symbol made STT_GNU_IFUNC (global): its size is still the function's."""
    fde = copy.fde_with(lambda f, fres: fres[-1].start < f.func_size - 1)
    fn = _symbol_at(Path(copy.table.source), fde.func_start)
    _patch_symbol(copy, fn, st_info=(1 << 4) | 10)  # STB_GLOBAL, STT_GNU_IFUNC
    copy.set_size(fde, fde.func_size - 1)
    r = check_binary(copy.write())
    assert [f.fde for f in r.of_kind("fde-symbol")] == [fde.index]
    assert r.of_kind("fde-symbol")[0].message.endswith(f"says otherwise: {fn} ({fde.func_size} bytes)")


def test_a_function_symbol_at_0_is_not_a_function(copy, capsys):
    """crtbegin's deregister_tm_clones moved to address 0 (where no function is): it is passed
    over, and the symbols after it in .symtab still speak (the FDE's size against its symbol)."""
    fde = copy.fde_with(lambda f, fres: fres[-1].start < f.func_size - 1)
    _patch_symbol(copy, "deregister_tm_clones", st_value=0, st_size=0x1000)
    copy.set_size(fde, fde.func_size - 1)
    r = check_binary(copy.write())
    assert [f.fde for f in r.findings] == [fde.index] and r.findings[0].kind == "fde-symbol"


def test_a_stripped_shared_object_is_checked_against_its_dynamic_symbols(tmp_path, capsys):
    """A shared object built with -Wa,--gsframe and stripped: no .symtab, its exported functions
    in .dynsym, which speak for their sizes as .symtab's would."""
    tc = need("host")
    outer, inner = tc.workdir("sframe-check-so")
    try:
        (outer / "lib.c").write_text("int twice(int x) { return 2 * x; }\n"
                                     "int thrice(int x) { return twice(x) + x; }\n")
        tc.run(["gcc", "-O2", "-shared", "-fPIC", "-Wa,--gsframe", "lib.c", "-o", "lib.so"], cwd=inner)
        tc.run(["strip", "lib.so"], cwd=inner)
        shutil.copy(outer / "lib.so", tmp_path / "lib.so")
    finally:
        shutil.rmtree(outer, ignore_errors=True)
    with open(tmp_path / "lib.so", "rb") as f:
        elf = ELFFile(f)
        assert elf.get_section_by_name(".symtab") is None
        dyn = {s.name: s for s in elf.get_section_by_name(".dynsym").iter_symbols()}
    assert check_binary(tmp_path / "lib.so").clean
    c = Copy(tmp_path / "lib.so", tmp_path / "corrupt.so")
    fde = next(f for f in c.sec.fdes if f.func_start == dyn["thrice"]["st_value"])
    c.set_size(fde, fde.func_size - 1)
    r = check_binary(c.write())
    assert [f.message for f in r.of_kind("fde-symbol")] == [
        f"FDE {fde.index} [{fde.func_start:#x}, {fde.func_end - 1:#x}) in .text (thrice): {fde.func_size - 1} bytes, "
        f"the function symbol at its start says otherwise: thrice ({fde.func_size} bytes)"]


def test_an_archive_of_members_of_every_kind(tmp_path):
    """A text member, an object that names ".sframe" in its data but has no such section (gas
    without --gsframe), an object checked, and one whose symbol table lies past its end: each
    member is looked at in turn, whatever the ones before it were."""
    from harness.unwind.sframe_check import check_file, load_members
    tc = need("host")
    good = _assemble("host", DATA_FUNCTION, tmp_path / "good.o")
    bad = bytearray(good.read_bytes())
    with open(good, "rb") as f:
        elf = ELFFile(f)
        shdr = elf["e_shoff"] + elf.get_section_index(".symtab") * elf["e_shentsize"]
    struct.pack_into("<Q", bad, shdr + 0x18, len(bad) + 0x1000)  # Elf64_Shdr.sh_offset
    (tmp_path / "badsym.o").write_bytes(bytes(bad))
    (tmp_path / "named.s").write_text('\t.section .rodata\n\t.ascii ".sframe"\n')
    tc.run(["as", "named.s", "-o", "named.o"], cwd=str(tmp_path))
    (tmp_path / "notes.txt").write_text("not ELF\n")
    tc.run(["ar", "rcS", "lib.a", "notes.txt", "named.o", "good.o", "badsym.o"], cwd=str(tmp_path))
    lib = tmp_path / "lib.a"
    fc = check_file(lib)
    assert fc.archive and fc.members == 4 and fc.without_sframe == ["notes.txt", "named.o"]
    assert [c.path for c in fc.checks] == [f"{lib}(good.o)"] and not fc.clean
    # its error names it already (placing it reads its relocations): not named twice
    assert len(fc.errors) == 1 and fc.errors[0].startswith(f"relocation: {lib}(badsym.o): "), fc.errors
    # what `dump` reads of it: the ELF members, and the SFrame table of those with one
    members = load_members(lib)
    assert [(name, t is not None) for name, t in members] == [("named.o", False), ("good.o", True), ("badsym.o", True)]
    assert members[1][1].source == f"{lib}(good.o)" and len(members[1][1].fdes) == 2


def test_an_archive_member_whose_one_section_is_named_sframe_is_read_for_it(tmp_path):
    """Whether a member has a .sframe section is what its section table says, however few entries
    it has: an object cut to one section header, the null entry, made a string table holding
    ".sframe" and named by it (e_shstrndx 0), has one: its bytes are read as SFrame (bad magic, an
    error of that member), not listed as a member without .sframe."""
    from harness.unwind.sframe_check import check_file
    good = _assemble("host", DATA_FUNCTION, tmp_path / "good.o")
    one = bytearray(good.read_bytes())
    shoff = ELFFile(io.BytesIO(bytes(one)))["e_shoff"]
    name = one.find(b".sframe\0")  # .shstrtab's ".rela.sframe" ends so
    struct.pack_into("<HH", one, 0x3C, 1, 0)  # Elf64_Ehdr.e_shnum, e_shstrndx
    struct.pack_into("<IIQQQQIIQQ", one, shoff, 0, 3, 0, 0, name, 8, 0, 0, 1, 0)  # Elf64_Shdr 0: SHT_STRTAB
    (tmp_path / "one.o").write_bytes(bytes(one))
    assert [s.name for s in ELFFile(io.BytesIO(bytes(one))).iter_sections()] == [".sframe"]
    need("host").run(["ar", "rcS", "lib.a", "one.o", "good.o"], cwd=str(tmp_path))
    lib = tmp_path / "lib.a"
    fc = check_file(lib)
    assert fc.members == 2 and fc.without_sframe == [] and [c.path for c in fc.checks] == [f"{lib}(good.o)"]
    assert fc.errors == [f"{lib}(one.o): magic at byte 0x0: bad magic 2e 73 (want 0xdee2 in either byte order)"]

def test_an_fre_without_an_ra_but_with_a_cfa_is_not_the_outermost_frame(copy, capsys):
    """The header's fixed RA offset made invalid (0): an FRE of one data word (the CFA's) then has
    its RA undefined (AMD64 FREs carry no RA word) but still a CFA, which is compared: such an
    FRE's CFA offset changed is found beside the RA findings."""
    fde = copy.fde_with(lambda f, fres: len(fres) >= 2 and fres[1].cfa is not None and len(fres[1].datawords) == 1)
    fres = copy.sec.fres(fde)
    fre = fres[1]
    wsize = F.DATAWORD_SIZE[F.fre_info_dataword_size_code(fre.info)]
    copy.put({1: "b", 2: "h", 4: "i"}[wsize], fre.offset + F.FRE_START_ADDR_SIZE[fde.fre_type] + 1, fre.cfa.offset + 8)
    copy.put("b", 6, 0)  # cfa_fixed_ra_offset: none
    r = check_binary(copy.write())
    assert [f.message for f in r.of_kind("header")] == ["CFA fixed RA offset is 0, AMD64 keeps the RA at CFA-8"]
    assert any(f.fde == fde.index and f.fre == 1 and f.sframe.ra.base == UNDEFINED for f in r.of_kind("ra"))
    end = fde.func_start + fres[2].start if len(fres) > 2 else fde.func_end
    assert _where(r.of_kind("cfa")) == [(fde.index, 1, fde.func_start + fre.start, end)]


def test_an_fre_not_marked_as_the_signal_frame_eh_frame_says_it_is(tmp_path, capsys):
    """sframe_odd's signal trampoline (V3: marked a signal frame, as its CIE's 'S' says) with the
    mark cleared: the other way round from test_signal_frame_mark_differs_from_the_cie."""
    c = Copy(program("sframe_odd", "sid", Variant()).path, tmp_path / "unsignal")
    fde = c.fde_with(lambda f, fres: f.signal_frame)
    c.data[c.off + fde.attr_offset + 2] &= ~0x80  # SFRAME_V3_FDE_SIGNAL_P
    r = _check(capsys, c.write(), "signal", r"SFrame says not a signal frame, \.eh_frame does \(CIE augmentation 'S'\)$")
    assert _kinds(r) == {"signal"} and {f.fde for f in r.findings} == {fde.index}


def test_an_fre_is_compared_where_eh_frame_begins_inside_it(copy, capsys):
    """The .eh_frame FDE of a function made to start one byte later (pc_begin + 1, pc_range - 1):
    FRE 0's first byte has no CFI row, the rest of it has; with FRE 0's CFA offset also changed,
    FRE 0 is no-cfi at that byte and a CFA disagreement from the next on.  (The CFI's later rows
    moved one byte too: what the other FREs say of them is not this test's.)"""
    fde = copy.fde_with(lambda f, fres: len(fres) >= 2 and fres[1].start >= 2 and len(fres[0].datawords) == 1)
    fres = copy.sec.fres(fde)
    off, _ = _eh_frame_fde(copy, fde.func_start)
    (begin, size) = struct.unpack_from("<iI", copy.data, off + 8)  # pc_begin (pcrel sdata4), pc_range
    struct.pack_into("<iI", copy.data, off + 8, begin + 1, size - 1)
    wsize = F.DATAWORD_SIZE[F.fre_info_dataword_size_code(fres[0].info)]
    copy.put({1: "b", 2: "h", 4: "i"}[wsize], fres[0].offset + F.FRE_START_ADDR_SIZE[fde.fre_type] + 1,
             fres[0].cfa.offset + 8)
    r = check_binary(copy.write())
    lo, nxt = fde.func_start, fde.func_start + fres[1].start
    assert [(f.kind, f.fde, f.fre, f.addr, f.end) for f in r.findings if f.fre == 0] == [
        ("no-cfi", fde.index, 0, lo, lo + 1), ("cfa", fde.index, 0, lo + 1, nxt)]


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_every_address_of_a_pcmask_fde_the_model_cannot_read_is_noted(tmp_path, capsys, tc_name):
    """The PLT entries' CFA expression (ld's: SP + 8, + 8 more from +11 of each entry) with its
    final DW_OP_plus made DW_OP_nop, an op the model does not evaluate.  Every address of the
    PCMASK FDE is then noted as not compared, each on its own, and none of its FREs counted as
    checked."""
    c = Copy(program("callchain", tc_name, Variant(static=False)).path, tmp_path / "plt")
    fde = c.fde_with(lambda f, fres: f.pcmask and f.rep_size == 16)
    expr = bytes.fromhex("0f0b770880003f1a3b2a332422")  # DW_CFA_def_cfa_expression, 11 bytes of ops
    at = bytes(c.data).index(expr)
    c.data[at + len(expr) - 1] = 0x96  # DW_OP_nop
    r = check_binary(c.write())
    skipped = [n for n in r.notes if n.startswith(f"FDE {fde.index} ") and " not compared: " in n]
    assert len(skipped) == fde.func_size, skipped[:3]
    assert all(re.search(r": FRE \d at 0x[0-9a-f]+ not compared: CFA expression: op DW_OP_nop$", n) for n in skipped)
    assert r.fres_checked == r.num_fres - len(c.sec.fres(fde))
    assert not [f for f in r.findings if f.fde == fde.index]
