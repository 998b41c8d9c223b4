"""``harness sframe dump`` and ``check`` of gas output: objects and archives, V1, V2 and V3.

The sources are ours (guest_programs/sframe_cases/*.s: a plain frame, 2-byte offsets, a signal
trampoline, the outermost frame, ``.cfi_remember_state`` at entry, a function of 0 bytes, a CFA
SFrame cannot express, a function in a text section of its own, DRAP stack realignment, every
flexible form of V3 (flex.s); and the guest programs callchain.c and sframe_odd.c compiled with -ffunction-sections); each
toolchain root's own ``as --gsframe`` assembles them and its own ``ar`` archives them, and its
own ``objdump --sframe`` is the oracle: our dump equals its text byte for byte.  The checker
reads the same objects placed (each section at an address of its own, relocations applied):
every FDE lands on its function's symbol, and the findings are the ones each gas really has.
"""

from __future__ import annotations

import io
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from harness.cli import main
from harness.images.programs import SOURCES
from harness.images.toolchain import Toolchain
from harness.rule import UNDEFINED, ValueRule
from harness.sframe import SFrameError
from harness.sframe import format as F
from harness.sframe.ar import iter_members
from harness.unwind.sframe_check import check_file, load, load_data
from tests.support.toolchains import need

CASES_DIR = Path(__file__).resolve().parents[3] / "guest_programs" / "sframe_cases"
CASES = sorted(p.stem for p in CASES_DIR.glob("*.s"))
# guest programs compiled as objects too: sframe_odd.c's inline asm (a signal trampoline, DRAP,
# the outermost frame), callchain.c; -ffunction-sections puts each function in a section of its own
C_SOURCES = ("callchain", "sframe_odd")
TOOLCHAINS = ("host", "trixie", "sid")
VERSION = {"host": 1, "trixie": 2, "sid": 3}


@dataclass
class Built:
    dir: Path  # the objects, the archive and objdump's text of each
    warnings: dict[str, str]  # case -> what gas printed on stderr

    def objdump(self, name: str) -> str:
        return (self.dir / f"{name}.objdump").read_text()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    made: dict[str, Built] = {}

    def get(tc_name: str) -> Built:
        if tc_name not in made:
            made[tc_name] = _build(need(tc_name), tmp_path_factory.mktemp(f"sframe-cases-{tc_name}"))
        return made[tc_name]

    return get


def _build(tc: Toolchain, dest: Path) -> Built:
    """Assemble every case with the root's ``as --gsframe`` (and frames.s without, as a member
    with no .sframe), archive them with its ``ar``, and keep its ``objdump --sframe`` of each."""
    outer, inner = tc.workdir("sframe-cases")
    warnings = {}
    try:
        for case in CASES:
            shutil.copy(CASES_DIR / f"{case}.s", outer / f"{case}.s")
            warnings[case] = tc.run(["as", "--gsframe", f"{case}.s", "-o", f"{case}.o"], cwd=inner).stderr
        for src in C_SOURCES:  # C with inline asm, compiled by the root's gcc, one section a function
            for f in (SOURCES / f"{src}.c", *SOURCES.glob("*.h")):
                shutil.copy(f, outer / f.name)
            tc.run(["gcc", "-O2", "-fomit-frame-pointer", "-ffunction-sections", "-Wa,--gsframe", "-c", f"{src}.c",
                    "-o", f"{src}.o"], cwd=inner)
        tc.run(["as", "frames.s", "-o", "nosframe.o"], cwd=inner)
        tc.run(["ar", "rc", "libcases.a", *[f"{c}.o" for c in CASES], "nosframe.o"], cwd=inner)
        for name in [*(f"{c}.o" for c in (*CASES, *C_SOURCES)), "libcases.a"]:
            # objdump exits 1 for an archive with a member without .sframe: keep its text anyway
            tc.run(["sh", "-c", f"objdump --sframe {name} > {name.rsplit('.', 1)[0]}.objdump 2>/dev/null; true"],
                   cwd=inner)
        for f in outer.iterdir():
            if f.suffix in (".o", ".a", ".objdump"):
                shutil.copy(f, dest / f.name)
    finally:
        shutil.rmtree(outer, ignore_errors=True)
    return Built(dest, warnings)


def our_dump(capsys, monkeypatch, where: Path, name: str) -> str:
    monkeypatch.chdir(where)  # objdump prints the name as given on its command line
    capsys.readouterr()
    rc = main(["sframe", "dump", name])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "", err
    return out


# ------------------------------------------------------------------------------ dump = objdump


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
@pytest.mark.parametrize("name", [*(f"{c}.o" for c in (*CASES, *C_SOURCES)), "libcases.a"])
def test_dump_equals_the_toolchains_objdump(built, tc_name, name, capsys, monkeypatch):
    b = built(tc_name)
    theirs = b.objdump(name.rsplit(".", 1)[0])
    assert "Contents of the SFrame section .sframe:" in theirs
    assert our_dump(capsys, monkeypatch, b.dir, name) == theirs  # byte for byte


def test_v3_objdump_shows_relocated_starts_and_v1_v2_the_raw_field(built):
    """What the oracle itself does, so the equality above means something: binutils 2.46+ apply
    .rela.sframe (each function at its offset in its section), 2.40 and 2.44 print the field (0)."""
    starts = {tc: [line.split("pc = ")[1].split(",")[0] for line in built(tc).objdump("frames").splitlines()
                   if "func idx" in line] for tc in TOOLCHAINS}
    assert set(starts["host"]) == {"0x0"} and set(starts["trixie"]) == {"0x0"}
    assert starts["sid"] == ["0x0", "0xb", "0x1c", "0x25", "0x2d", "0x3a", "0x3a", "0x0"]


# flex.s's functions in order, and the rows of sid's objdump that show each one's flexible form
# (the CFA, FP and RA columns of an FRE, as printed).
FLEX_ROWS = {
    "ra_undefined_flex": ["r10+0     c-16      U", "RA undefined"],  # binutils' ra-undefined-flex-1
    "fp_in_reg": ["sp+8      r12+0     U"],
    "cfa_deref": ["(fp-8)    c-16      U"],
    "fp_at_reg": ["sp+16     (fp+0)    U"],
    "ra_in_reg": ["sp+0      u         r11+0"],
    "ra_at_cfa": ["sp+16     u         c-16"],
    "big_flex": ["r10+1000  u         f", "r10+100000u         f", "r10+100000c-100016  U"],
    "sig_flex": ["r12+8     u         f"],
}


def test_v3_objdump_prints_every_flex_form_the_dump_equals(built):
    """What binutils 2.47's objdump prints of flex.s, so that the byte-for-byte equality above
    covers every flexible form gas writes: each function a flexible FDE ("F"; the signal
    frame's "SF"); a register-based dereference bracketed, "(fp-8)", "(fp+0)"; a CFA-based FP
    or RA not, "c-16" -- where the dump printed "(c-16)" (issue 34) -- whatever its size of
    data word; "RA undefined" under a flex CFA, as in binutils' own test
    cfi-sframe-x86_64-ra-undefined-flex-1."""
    text = built("sid").objdump("flex")
    bodies = text.split("\n    func idx [")[1:]
    assert len(bodies) == len(FLEX_ROWS)
    for (name, rows), body in zip(FLEX_ROWS.items(), bodies, strict=True):
        head, _columns, *lines = body.splitlines()
        assert head.endswith(', attr = "SF"' if name == "sig_flex" else ', attr = "F"'), (name, head)
        got = [line[22:].rstrip() for line in lines if line.strip()]
        assert [r for r in rows if r not in got] == [], (name, got)
    assert "(c" not in text


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_flex_forms_check_clean_where_gas_describes_them(built, tc_name):
    """flex.s checked against its own .eh_frame: gas 2.47 describes every function, each FRE
    meeting its CFI row; 2.44 skips the CFAs and FPs it cannot express (a warning each) and
    writes the RA kept in r11 and the RA saved at CFA-16 as its fixed CFA-8 -- two ``ra``
    findings, its own fault; 2.40 skips none of them silently but four, describing the others
    with an SP-based CFA."""
    path = built(tc_name).dir / "flex.o"
    (r,) = check_file(path).checks
    _, image = load(path)
    funcs = [(s.name, s["st_value"], s["st_value"] + s["st_size"])
             for s in image.elf.get_section_by_name(".symtab").iter_symbols() if s["st_info"]["type"] == "STT_FUNC"]
    got = sorted({(f.kind, name) for f in r.findings for name, lo, hi in funcs if lo <= f.addr < hi})
    expected = {
        "sid": [],
        "trixie": [("ra", "ra_at_cfa"), ("ra", "ra_in_reg")],
        "host": [("cfa", "big_flex"), ("cfa", "ra_undefined_flex"), ("cfa", "sig_flex"), ("ra", "ra_at_cfa"),
                 ("ra", "ra_undefined_flex")],
    }[tc_name]
    assert got == expected, [f.message for f in r.findings]
    described = {"sid": 8, "trixie": 2, "host": 4}[tc_name]
    assert r.num_fdes == described and r.cfi_without_sframe == 8 - described
    assert r.fres_checked == r.num_fres, r.notes


# ------------------------------------------------------------------------------ what gas emits


# The functions of frames.s each gas writes an FDE for, and what it says about the others.
FDES = {
    # 2.40 drops `remember` silently, and describes `inexpressible`'s rbx-based CFA as SP-based
    "host": ["plain", "leaf", "sigtramp", "outermost", "empty", "inexpressible", "own_section"],
    "trixie": ["plain", "leaf", "sigtramp", "outermost", "empty", "own_section"],
    "sid": ["plain", "leaf", "sigtramp", "outermost", "remember", "empty", "inexpressible", "own_section"],
}
WARNINGS = {
    "host": {"frames": [], "drap": []},
    "trixie": {"frames": ["skipping SFrame FDE; .cfi_remember_state without prior SFrame FRE state",
                          "skipping SFrame FDE; non-SP/FP register 3 in .cfi_def_cfa_register"],
               "drap": ["skipping SFrame FDE; non-SP/FP register 10 in .cfi_def_cfa"]},
    "sid": {"frames": [], "drap": []},
}


def _addresses(path: Path) -> dict[str, int]:
    """Symbol addresses in the placed image the checker reads."""
    _, image = load(path)
    return {s.name: s["st_value"] for s in image.elf.get_section_by_name(".symtab").iter_symbols()}


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_each_gas_warns_and_describes_what_it_does(built, tc_name):
    b = built(tc_name)
    for case, expected in WARNINGS[tc_name].items():
        got = [line.split("Warning: ", 1)[1] for line in b.warnings[case].splitlines() if "Warning: " in line]
        assert got == expected, b.warnings[case]
    table, image = load(b.dir / "frames.o")
    assert table.header.version == VERSION[tc_name]
    names = {}
    for s in image.elf.get_section_by_name(".symtab").iter_symbols():
        if s["st_info"]["type"] == "STT_FUNC":
            names.setdefault(s["st_value"], []).append(s.name)
    # every FDE starts at its function's symbol: the relocation placed it, in .text or .text.own
    got = []
    for fde in table.fdes:
        at = names.get(fde.func_start, [])
        got.append("empty" if "empty" in at and fde.func_size == 0 else next(n for n in at if n != "empty"))
    assert got == FDES[tc_name]
    own = table.fdes[-1]
    assert own.func_start != table.fdes[0].func_start  # two text sections, two places
    # what gas skipped, the checker notes (.eh_frame describes `empty`'s 0 bytes with no FDE)
    skipped = {"host": ["remember"], "trixie": ["remember", "inexpressible"], "sid": []}[tc_name]
    r = check_file(b.dir / "frames.o").checks[0]
    assert r.cfi_without_sframe == len(skipped)
    if skipped:
        assert f"{len(skipped)} of 7 .eh_frame FDEs have no SFrame FDE: {', '.join(skipped)}" in r.notes


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_objects_check_by_the_rules_of_objects(built, tc_name):
    """No FDE_SORTED, PT_LOAD or PT_GNU_SFRAME finding: those are rules of linked outputs.  The
    findings are gas's own: 2.40 and 2.44 ignore `.cfi_undefined rip` (RA at CFA-8 where the CFI
    says undefined); 2.40 takes `inexpressible`'s rbx-based CFA for SP-based."""
    b = built(tc_name)
    fc = check_file(b.dir / "frames.o")
    (r,) = fc.checks
    assert not r.linked and r.version == VERSION[tc_name]
    addr = _addresses(b.dir / "frames.o")
    got = sorted((f.kind, f.addr, getattr(f.sframe, f.kind), getattr(f.cfi, f.kind)) for f in r.findings)
    expected = []
    if tc_name in ("host", "trixie"):
        expected.append(("ra", addr["outermost"], ValueRule("cfa", -8, True), ValueRule(UNDEFINED)))
    if tc_name == "host":
        expected.append(("cfa", addr["inexpressible"] + 3, ValueRule("sp", 8), ValueRule("r3", 8)))
    assert got == sorted(expected), [f.message for f in r.findings]
    # every FRE met a CFI row but the 0-byte function's one, which covers no address
    assert r.fres_checked == r.num_fres - 1, r.notes
    drap = check_file(b.dir / "drap.o").checks[0]
    assert drap.clean and drap.fres_checked == drap.num_fres, [f.message for f in drap.findings]
    if tc_name == "sid":
        table, _ = load(b.dir / "drap.o")
        assert table.fdes[0].flex and table.section.rule_for(table.fdes[0].func_start + 30).cfa.deref


def test_a_v2_object_without_pcrel_is_not_noted(built):
    """The note on a V2 section without FDE_FUNC_START_PCREL (the layout of binutils 2.41-2.44)
    is of linked outputs: an object's starts are relocations the linker rewrites."""
    (r,) = check_file(built("trixie").dir / "frames.o").checks
    assert r.version == 2 and "SFRAME_F_FDE_FUNC_START_PCREL" not in r.flags
    assert not [n for n in r.notes if "FDE_FUNC_START_PCREL" in n], r.notes


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_an_archive_is_checked_member_by_member(built, tc_name, capsys):
    b = built(tc_name)
    lib = b.dir / "libcases.a"
    fc = check_file(lib)
    assert fc.archive and fc.members == len(CASES) + 1 and fc.without_sframe == ["nosframe.o"]
    assert [r.path for r in fc.checks] == [f"{lib}({c}.o)" for c in CASES]
    for case, r in zip(CASES, fc.checks, strict=False):
        alone = check_file(b.dir / f"{case}.o").checks[0]
        assert [f.message for f in r.findings] == [f.message for f in alone.findings]
    rc = main(["sframe", "check", str(lib)])
    out, _ = capsys.readouterr()
    assert rc == (0 if tc_name == "sid" else 1)
    # gas 2.40's and 2.44's own faults: frames.o's outermost RA, flex.o's CFI they misread
    with_findings = {"host": 2, "trixie": 2, "sid": 0}[tc_name]
    assert [r.path for r in fc.checks if not r.clean] == [f"{lib}({c}.o)" for c in CASES
                                                          if c in ("frames", "flex")][:with_findings]
    checks = fc.checks
    assert out.rstrip().endswith(
        f"{lib}: archive of {len(CASES) + 1} members: {len(CASES)} with .sframe checked ({with_findings} with "
        f"findings, 0 with no verdict), 1 without, 0 unreadable; {sum(r.num_fdes for r in checks)} FDEs, "
        f"{sum(r.num_fres for r in checks)} FREs, {sum(r.fres_checked for r in checks)} FREs checked against "
        f".eh_frame ({sum(r.addresses_compared for r in checks)} addresses): "
        f"{'findings' if with_findings else 'clean'}")


def test_an_elf_file_is_one_check_of_itself_not_an_archive(built):
    """check_file of an ELF file: the file's own path, not an archive, no members (the count is of
    an archive's), and one check, of the file."""
    path = built("host").dir / "frames.o"
    fc = check_file(path)
    assert (fc.path, fc.archive, fc.members, fc.without_sframe, fc.errors) == (str(path), False, 0, [], [])
    assert [c.path for c in fc.checks] == [str(path)]


def test_check_file_checks_the_bytes_it_is_given(built, tmp_path):
    """With ``data``, check_file checks those bytes, named by the path (an empty archive there):
    the archive's members are the bytes', not read again from the file."""
    lib = built("host").dir / "libcases.a"
    there = tmp_path / "there.a"
    there.write_bytes(b"!<arch>\n")
    fc = check_file(there, data=lib.read_bytes())
    assert fc.archive and fc.members == len(CASES) + 1 and fc.without_sframe == ["nosframe.o"]
    assert [r.path for r in fc.checks] == [f"{there}({c}.o)" for c in CASES]


def test_the_binutils_named_for_an_archive_holds_for_each_member(built):
    """trixie's V2 objects (gas 2.44: no FDE_FUNC_START_PCREL) in its archive: with binutils 2.45
    named, each member with .sframe is a header finding; with 2.44 named, none is."""
    lib = built("trixie").dir / "libcases.a"
    named, older = check_file(lib, expect_binutils=(2, 45)), check_file(lib, expect_binutils=(2, 44))
    assert len(named.checks) == len(older.checks) == len(CASES)
    for r, o in zip(named.checks, older.checks, strict=True):
        assert [f.message for f in r.of_kind("header")] == [
            "SFRAME_F_FDE_FUNC_START_PCREL is not set, but binutils 2.45 writes V2 with it (from 2.45 on)"], r.path
        assert not o.of_kind("header"), o.path


def _fre_1_moved_back(obj: Path) -> tuple[bytes, int, int]:
    """``obj``'s bytes with `plain`'s (FDE 0's) FRE 1 moved back onto FRE 0: its start field
    rewritten (.rela.sframe touches only the FDEs' starts); and FRE 0's start, FRE 1's section offset."""
    table, _ = load(obj)
    fde = table.fdes[0]  # plain: 4 FREs, the first at +0
    first, second = table.section.fres(fde)[:2]
    assert first.start < second.start
    data = bytearray(obj.read_bytes())
    at = ELFFile(io.BytesIO(data)).get_section_by_name(".sframe")["sh_offset"] + second.offset
    size = F.FRE_START_ADDR_SIZE[fde.fre_type]
    assert int.from_bytes(data[at:at + size], "little") == second.start
    data[at:at + size] = first.start.to_bytes(size, "little")
    return bytes(data), first.start, second.offset


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_an_object_loaded_strictly_refuses_an_fre_not_after_the_previous(built, tc_name, tmp_path):
    """``strict`` reaches an object's section, placed or not: `plain`'s FRE 1 moved back onto FRE 0
    is an SFrameError naming both when read strictly (the unwinder's reader), and decodes unstrict
    (the checker's reading, the default), where it is an ``fre-start`` finding of that FRE."""
    data, start, offset = _fre_1_moved_back(built(tc_name).dir / "frames.o")
    bad = tmp_path / "frames.o"
    bad.write_bytes(data)
    for place in (True, False):
        loose, _ = load(bad, place=place)
        assert [f.start for f in loose.section.fres(loose.fdes[0])][:2] == [start, start]
    (r,) = check_file(bad).checks
    assert [(f.fde, f.fre) for f in r.of_kind("fre-start")] == [(0, 1)], [f.message for f in r.findings]
    for strict in (load(bad, strict=True)[0], load(bad, strict=True, place=False)[0],
                   load_data(data, str(bad), strict=True)[0]):
        with pytest.raises(SFrameError, match=rf": FDE 0: FRE 1 starts at {start:#x}, not after FRE 0 "
                                              rf"\({start:#x}\)$") as e:
            strict.section.fres(strict.fdes[0])
        assert (e.value.field, e.value.offset) == ("fre.start", offset)


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_dump_shows_an_archive_members_fres_out_of_order_as_objdump_does(built, tc_name, tmp_path, capsys,
                                                                          monkeypatch):
    """``dump`` shows a faulty section as it is, an archive's members too (read unstrict): frames.o
    with FRE 1 moved back onto FRE 0, archived beside drap.o by the toolchain's own ``ar``: our
    dump equals its ``objdump --sframe`` byte for byte."""
    tc = need(tc_name)
    b = built(tc_name)
    data, start, _ = _fre_1_moved_back(b.dir / "frames.o")
    outer, inner = tc.workdir("sframe-fre-moved-back")
    try:
        (outer / "frames.o").write_bytes(data)
        shutil.copy(b.dir / "drap.o", outer / "drap.o")
        tc.run(["ar", "rcS", "lib.a", "frames.o", "drap.o"], cwd=inner)
        theirs = tc.run(["objdump", "--sframe", "lib.a"], cwd=inner).stdout
        shutil.copy(outer / "lib.a", tmp_path / "lib.a")
    finally:
        shutil.rmtree(outer, ignore_errors=True)
    assert "In archive lib.a:" in theirs and "Contents of the SFrame section .sframe:" in theirs
    assert our_dump(capsys, monkeypatch, tmp_path, "lib.a") == theirs


def test_an_objects_eh_frame_that_does_not_decode_is_noted_under_the_objects_name(built, tmp_path):
    """The placed image is the object's, named by its path: the CFI's error (the first CIE's length
    made absurd) says whose .eh_frame it is, and the rules are not compared."""
    data = bytearray((built("host").dir / "frames.o").read_bytes())
    eh = ELFFile(io.BytesIO(data)).get_section_by_name(".eh_frame")["sh_offset"]
    struct.pack_into("<I", data, eh, 0xFFFFFF00)  # the first CIE's length
    path = tmp_path / "frames.o"
    path.write_bytes(bytes(data))
    fc = check_file(path)
    (r,) = fc.checks
    assert not r.findings and r.fres_checked == 0 and r.addresses_compared == 0, [f.message for f in r.findings]
    notes = [n for n in r.notes if n.startswith("rules not compared")]
    assert notes[0].startswith(f"rules not compared: {path}: .eh_frame does not decode (EhFrameError: the entry "
                               f"at +0x0 claims 4294967040 bytes"), notes
    # no verdict on the object, never a clean one
    assert not r.clean and not fc.clean and fc.no_verdict == [r.no_verdict] == ["no verdict: " + notes[0]]


# ------------------------------------------------------------------------------ the ar reader


def test_ar_reader_agrees_with_ar_t_on_long_and_thin_archives(built, tmp_path):
    """GNU long names (over 15 characters: the // table) and thin archives (!<thin>, members
    named, not copied), listed by binutils' own `ar t`."""
    tc = need("host")
    b = built("host")
    long_name = "a_member_name_longer_than_fifteen.o"
    shutil.copy(b.dir / "frames.o", tmp_path / long_name)
    shutil.copy(b.dir / "drap.o", tmp_path / "drap.o")
    tc.run(["ar", "rc", "long.a", long_name, "drap.o"], cwd=str(tmp_path))
    tc.run(["ar", "rcT", "thin.a", long_name, "drap.o"], cwd=str(tmp_path))
    for lib in ("long.a", "thin.a"):
        listed = tc.run(["ar", "t", lib], cwd=str(tmp_path)).stdout.split()
        members = list(iter_members(tmp_path / lib))
        assert [m.name for m in members] == listed == [long_name, "drap.o"]
        assert members[0].data == (tmp_path / long_name).read_bytes()
        assert len(check_file(tmp_path / lib).checks) == 2


def test_bad_archives_are_typed_errors(built, tmp_path):
    good = (built("host").dir / "libcases.a").read_bytes()
    cut = tmp_path / "cut.a"
    cut.write_bytes(good[:len(good) // 2])
    with pytest.raises(SFrameError) as e:
        check_file(cut)
    assert e.value.field == "archive" and "runs past the end" in str(e.value)
    bad = bytearray(good)
    bad[8 + 58] = ord("x")  # the first member header's `\n terminator
    (tmp_path / "bad.a").write_bytes(bytes(bad))
    with pytest.raises(SFrameError, match="terminator"):
        check_file(tmp_path / "bad.a")
    # a member whose .sframe does not decode is an error of that member, the others are checked
    lib = bytearray(good)
    first = next(iter_members(tmp_path / "libcases.a", good))
    off = ELFFile(io.BytesIO(first.data)).get_section_by_name(".sframe")["sh_offset"]
    lib[first.offset + 60 + off] ^= 0xFF  # the magic
    (tmp_path / "one-bad.a").write_bytes(bytes(lib))
    fc = check_file(tmp_path / "one-bad.a")
    assert len(fc.errors) == 1 and "bad magic" in fc.errors[0] and len(fc.checks) == len(CASES) - 1


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_compiled_objects_check_clean_but_for_gas_own_fault(built, tc_name):
    """callchain.o and sframe_odd.o, one text section a function: every FDE placed at its own
    function, every FRE met a CFI row; the one finding is gas 2.40/2.44 ignoring sframe_odd's
    `.cfi_undefined rip` (after its one-byte nop)."""
    b = built(tc_name)
    for src in C_SOURCES:
        (r,) = check_file(b.dir / f"{src}.o").checks
        assert r.num_fdes >= 4 and r.fres_checked == r.num_fres, r.notes
        got = [(f.kind, f.addr, getattr(f.sframe, f.kind), getattr(f.cfi, f.kind)) for f in r.findings]
        expected = []
        if src == "sframe_odd" and tc_name != "sid":
            expected = [("ra", _addresses(b.dir / f"{src}.o")["outermost"] + 1, ValueRule("cfa", -8, True),
                         ValueRule(UNDEFINED))]
        assert got == expected, [f.message for f in r.findings]
