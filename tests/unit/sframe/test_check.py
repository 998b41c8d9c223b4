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
from harness.unwind.sframe_check import check_binary
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


@pytest.mark.parametrize("tc_name,prog,variant", CASES, ids=[f"{c[0]}-{c[1]}-{c[2].tag}" for c in CASES])
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
    assert re.search(r"^  ra: FDE 1 \[0x[0-9a-f]+, 0x[0-9a-f]+\): FRE 1 at \[0x[0-9a-f]+, 0x[0-9a-f]+\): "
                     r"RA sframe \*\(cfa-8\), eh_frame undefined$", out, re.MULTILINE), out
    assert re.search(r"\n  5 FDEs, (\d+) FREs, \1 FREs checked against \.eh_frame \(\d+ addresses\): 1 ra\n$", out), out


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
    r = _check(capsys, c.write(), "header", r"^SFRAME_F_FDE_FUNC_START_PCREL is not set: every V3")
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


def test_two_fdes_overlap(copy, capsys):
    a, b = copy.sec.fdes[-2], copy.sec.fdes[-1]
    copy.set_start(b.offset, b.func_start - 4)  # b now starts 4 bytes inside a
    copy.set_size(b, b.func_size + 4)
    r = _check(capsys, copy.write(), "fde-overlap",
               rf"^FDE {b.index} \[{b.func_start - 4:#x}, {b.func_end:#x}\) overlaps FDE {a.index} .* by 4 bytes$")
    # b's start is no longer a function's: the symbol check says so too; its rules shift by 4 bytes
    assert r.of_kind("fde-symbol") and _kinds(r) <= {"fde-overlap", "fde-symbol", "cfa", "fp", "ra"}


def test_fde_outside_the_text(copy, capsys):
    last = copy.sec.fdes[-1]
    far = max(hi for _, hi in copy.table.text_ranges) + 0x100000
    copy.set_start(last.offset, far)
    r = _check(capsys, copy.write(), "fde-outside-text",
               rf"^FDE {last.index} \[{far:#x}, .*\) is not inside an executable PT_LOAD segment")
    assert _kinds(r) == {"fde-outside-text"}


def test_fde_size_differs_from_its_symbol(copy, capsys):
    fde = copy.fde_with(lambda f, fres: fres[-1].start < f.func_size - 1)
    copy.set_size(fde, fde.func_size - 1)
    r = _check(capsys, copy.write(), "fde-symbol",
               rf"^FDE {fde.index} .*: {fde.func_size - 1} bytes, the function symbol at its start says "
               rf"otherwise: \w+ \({fde.func_size} bytes\)$")
    assert _kinds(r) == {"fde-symbol"}


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
               rf"^FDE 0 \[{fde.func_start:#x}, {fde.func_end:#x}\): FRE 0 describes \[{fde.func_start:#x}, ")
    assert _kinds(r) == {"no-cfi"} and r.fres_checked == r.num_fres - len(copy.sec.fres(fde))


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
    assert overlaps[c.index] == (f"FDE {c.index} [{c.func_start:#x}, {c.func_end:#x}) overlaps FDE {a.index} "
                                 f"[{a.func_start:#x}, {c.func_end:#x}) by {c.func_size} bytes")


def test_a_rule_change_inside_an_fre_is_compared(copy, capsys):
    """An FRE's start moved one byte later: the FRE before it now covers the address where the
    .eh_frame's rule changes, and that address is compared too, not only the FRE's start
    (mutation testing found a comparison at each FRE's start only; issue 21)."""
    fde = copy.fde_with(lambda f, fres: f.fre_type == F.FRE_TYPE_ADDR1 and len(fres) >= 3
                        and fres[2].start - fres[1].start >= 2 and fres[0].cfa != fres[1].cfa)
    fres = copy.sec.fres(fde)
    moved = fde.func_start + fres[1].start  # where the CFI row (and SFrame's FRE 1) starts
    copy.put("B", fres[1].offset, fres[1].start + 1)
    r = _check(capsys, copy.write(), "cfa", rf"^FDE {fde.index} .*: FRE 0 at \[{moved:#x}, {moved + 1:#x}\): CFA ")
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
