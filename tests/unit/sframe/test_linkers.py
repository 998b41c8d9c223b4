"""The four linkers Debian ships, on the same objects: what each does with their .sframe sections.

callchain.c (host gcc -O2 -S) and guest_programs/sframe_cases/drap.s are assembled twice --
SFrame V1 by the host's gas 2.40, V3 by sid's gas 2.47 (the same assembly: the objects link
against the host's glibc) -- and each pair is linked by the host's gcc with -fuse-ld=bfd, gold,
mold and lld.  ``sframe check`` names what each linker did as findings of their own kinds:

* ld.bfd 2.40 merges V1 inputs (sorted, FDE_SORTED, PT_GNU_SFRAME): clean.  It cannot read V3
  and says so ("error in ...(.sframe); no .sframe will be created"): its output then has the
  PLT's FDEs only.
* gold, mold and lld treat .sframe as any other section: the inputs' sections laid end to end
  (concatenated-not-merged), no FDE_SORTED (fdes-unsorted), no PT_GNU_SFRAME
  (no-pt-gnu-sframe), and -- V1 -- each start left as its relocated PC-relative value under a
  header that says section-relative (pcrel-starts-unflagged); V3 starts are PC-relative by their
  flag, so right.  gold also moves main's .text.startup before .text, which leaves the FDEs of
  the first section out of address order (fde-order).
* Read that way, every FRE of every linker's output agrees with its .eh_frame.
* ``sframe dump`` of each output equals the objdump --sframe of the binutils that writes its
  version (which reads the first of concatenated sections only).
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from harness.images.programs import SOURCES
from harness.sframe import format as F
from harness.sframe.parse import SFrameSection
from harness.unwind import sframe_check
from harness.unwind.sframe_check import BinaryCheck, check_binary
from tests.support.gating import require
from tests.support.toolchains import need

CASES_DIR = Path(__file__).resolve().parents[3] / "guest_programs" / "sframe_cases"
LINKERS = ("bfd", "gold", "mold", "lld")
LINKER_BINARY = {"bfd": "ld.bfd", "gold": "ld.gold", "mold": "mold", "lld": "ld.lld"}
GAS = {1: "host", 3: "sid"}

EXPECTED = {
    (1, "bfd"): set(),
    (1, "gold"): {"concatenated-not-merged", "pcrel-starts-unflagged", "fdes-unsorted", "no-pt-gnu-sframe",
                  "fde-order"},
    (1, "mold"): {"concatenated-not-merged", "pcrel-starts-unflagged", "fdes-unsorted", "no-pt-gnu-sframe"},
    (1, "lld"): {"concatenated-not-merged", "pcrel-starts-unflagged", "fdes-unsorted", "no-pt-gnu-sframe"},
    (3, "bfd"): set(),
    (3, "gold"): {"concatenated-not-merged", "fdes-unsorted", "no-pt-gnu-sframe", "fde-order"},
    (3, "mold"): {"concatenated-not-merged", "fdes-unsorted", "no-pt-gnu-sframe"},
    (3, "lld"): {"concatenated-not-merged", "fdes-unsorted", "no-pt-gnu-sframe"},
}


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """{version: [callchain.o, drap.o]}, built on first use."""
    made: dict[int, list[Path]] = {}
    asm = tmp_path_factory.mktemp("asm")

    def get(version: int) -> list[Path]:
        if version not in made:
            host = need("host")
            if not (asm / "callchain.s").exists():
                host.run(["gcc", "-O2", "-fno-omit-frame-pointer", "-S", str(SOURCES / "callchain.c"), "-o",
                          str(asm / "callchain.s")], cwd=str(asm))
            tc = need(GAS[version])
            outer, inner = tc.workdir(f"linkers-v{version}")
            dest = tmp_path_factory.mktemp(f"objects-v{version}")
            try:
                shutil.copy(asm / "callchain.s", outer / "callchain.s")
                shutil.copy(CASES_DIR / "drap.s", outer / "drap.s")
                for name in ("callchain", "drap"):
                    tc.run(["as", "--gsframe", f"{name}.s", "-o", f"{name}.o"], cwd=inner)
                    shutil.copy(outer / f"{name}.o", dest / f"{name}.o")
            finally:
                shutil.rmtree(outer, ignore_errors=True)
            made[version] = [dest / "callchain.o", dest / "drap.o"]
        return made[version]

    return get


def _objdump(tc_name: str, path: Path) -> str:
    """``objdump --sframe`` of the binutils that writes the section's version (2.47 cannot read
    a V1 section), run in its root on a copy named as ours is."""
    tc = need(tc_name)
    outer, inner = tc.workdir("linkers-objdump")
    try:
        shutil.copy(path, outer / path.name)
        return tc.run(["objdump", "--sframe", path.name], cwd=inner).stdout
    finally:
        shutil.rmtree(outer, ignore_errors=True)


def _our_dump(path: Path) -> str:
    from harness.report.sframe import objdump_sframe
    from harness.unwind.sframe_check import load

    table, _ = load(path, strict=False, place=False)
    table.section.decode_all()
    return objdump_sframe(table, path.name)


@pytest.mark.parametrize("version", sorted(GAS))
@pytest.mark.parametrize("linker", LINKERS)
def test_each_linker_is_named_for_what_it_did(objects, version, linker, tmp_path):
    require(shutil.which(LINKER_BINARY[linker]) is not None, f"{LINKER_BINARY[linker]} is not installed (./dev)")
    objs = objects(version)
    out = tmp_path / f"callchain-v{version}-{linker}"
    linked = need("host").run(["gcc", f"-fuse-ld={linker}", "-o", str(out), *map(str, objs)], cwd=str(tmp_path))
    r = check_binary(out)
    kinds = set(r.by_kind())
    assert kinds == EXPECTED[(version, linker)], [f.message for f in r.findings]
    assert r.fres_checked == r.num_fres, r.notes  # read as found, every FRE agrees with .eh_frame
    assert _our_dump(out) == _objdump(GAS[r.version], out)  # the first section, as objdump reads it
    if linker == "bfd":
        if version == 1:
            assert r.version == 1 and r.num_fdes >= 7 and r.pieces == 1
        else:
            assert "error in" in linked.stderr and "no .sframe will be created" in linked.stderr
            # what is left is the PLT's: every function of the inputs is without an FDE, and noted
            assert r.version == 1 and r.cfi_without_sframe >= 6
            assert any("have no SFrame FDE" in n and "main" in n for n in r.notes), r.notes
        return
    assert r.pieces == 2 and r.version == version
    _linker_messages(r, out, version)
    # each section's own findings say which section they are of: gold's out of order FDEs are the first's
    order = [f.message for f in r.of_kind("fde-order")]
    assert all(m.startswith("section 1/2 at +0x0: FDE ") for m in order) and bool(order) == (linker == "gold"), order


def _linker_messages(r, path: Path, version: int) -> None:
    """What each linker finding says of the two sections laid end to end (the second at the 8-byte
    boundary after the first's data, where gas aligned it), read here from the raw bytes."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        sec = elf.get_section_by_name(".sframe")
        data, vaddr = sec.data(), sec["sh_addr"]
        functions = {s["st_value"] for s in elf.get_section_by_name(".symtab").iter_symbols()
                     if s["st_info"]["type"] == "STT_FUNC" and s["st_value"]}
    first = SFrameSection.parse(data, vaddr, strict=False)
    off2 = (first.header.end + 7) // 8 * 8
    second = SFrameSection.parse(data[off2:], vaddr + off2, strict=False)
    assert off2 + second.header.end == len(data)
    counts = [first.header.num_fdes, second.header.num_fdes]
    assert (r.num_fdes, r.num_fres) == (sum(counts), first.header.num_fres + second.header.num_fres)
    (cat,) = r.of_kind("concatenated-not-merged")
    assert (cat.addr, cat.end, cat.message) == (vaddr, vaddr + len(data), (
        f"2 SFrame sections laid end to end in .sframe (at +0x0, +{off2:#x}; {counts[0]}, {counts[1]} FDEs), not "
        f"merged into one: the header at the start accounts for its own {counts[0]} FDEs, and a reader sees no "
        f"others"))
    (nopt,) = r.of_kind("no-pt-gnu-sframe")
    assert (nopt.addr, nopt.end, nopt.message) == (vaddr, vaddr + len(data), (
        f"a .sframe section at {vaddr:#x} ({len(data)} bytes) but no PT_GNU_SFRAME program header: the kernel "
        f"finds a module's SFrame data through that segment only, so its lookup sees none"))
    assert not [n for n in r.notes if "after the SFrame data" in n], r.notes  # two sections, nothing after them
    prefixes = ["section 1/2 at +0x0: ", f"section 2/2 at +{off2:#x}: "]
    assert [f.message for f in r.of_kind("fdes-unsorted")] == [
        f"{p}SFRAME_F_FDE_SORTED is not set: a linked section's FDEs must be sorted (ld sorts them and sets the flag)"
        for p in prefixes]
    if version != 1:
        assert not r.of_kind("pcrel-starts-unflagged")
        return
    expected = []
    for p, off, piece in zip(prefixes, (0, off2), (first, second), strict=True):
        fdes = piece.fdes
        field0 = vaddr + off + fdes[0].offset
        (raw0,) = struct.unpack_from("<i", data, off + fdes[0].offset)
        # read from its own field (S + A - P), each start lands on a function; from the section, none
        as_pcrel = [vaddr + off + f.offset + struct.unpack_from("<i", data, off + f.offset)[0] for f in fdes]
        assert all(a in functions for a in as_pcrel)
        assert not any(vaddr + off + struct.unpack_from("<i", data, off + f.offset)[0] in functions for f in fdes)
        expected.append((vaddr + off, vaddr + off + piece.header.end, (
            f"{p}the function starts are PC-relative -- read from their own fields, {len(fdes)} of {len(fdes)} FDEs "
            f"start at a function, read from the section as the header says (no SFRAME_F_FDE_FUNC_START_PCREL), 0 "
            f"do: FDE 0's field at {field0:#x} in .sframe holds {raw0:#x}, the input's relocated value, not "
            f"rewritten")))
    assert [(f.addr, f.end, f.message) for f in r.of_kind("pcrel-starts-unflagged")] == expected
    # the linker's findings lie in .sframe itself, where no symbol is
    assert {(f.section, f.symbol) for f in r.findings if f.kind in sframe_check.LINKER_KINDS and f.addr} == {
        (".sframe", None)}


def _linked(objects, tmp_path: Path, linker: str = "mold", version: int = 3) -> Path:
    require(shutil.which(LINKER_BINARY[linker]) is not None, f"{LINKER_BINARY[linker]} is not installed (./dev)")
    out = tmp_path / f"callchain-v{version}-{linker}"
    need("host").run(["gcc", f"-fuse-ld={linker}", "-o", str(out), *map(str, objects(version))], cwd=str(tmp_path))
    return out


def _sframe_shdr(path: Path) -> tuple[int, int, int, bytes]:
    """(file offset of .sframe's section header, of its data, its vaddr, its bytes)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        sec = elf.get_section_by_name(".sframe")
        shdr = elf["e_shoff"] + elf.get_section_index(".sframe") * elf["e_shentsize"]
        return shdr, sec["sh_offset"], sec["sh_addr"], sec.data()


def test_bytes_after_the_first_section_that_do_not_decode_are_noted(objects, tmp_path):
    """mold's two sections laid end to end, the second's magic broken: one section is checked,
    and a note says what follows it and why it is not another."""
    path = _linked(objects, tmp_path)
    _, off, vaddr, data = _sframe_shdr(path)
    first = SFrameSection.parse(data, vaddr, strict=False)
    off2 = (first.header.end + 7) // 8 * 8
    raw = bytearray(path.read_bytes())
    raw[off + off2] ^= 0xFF  # the second header's magic
    path.write_bytes(bytes(raw))
    r = check_binary(path)
    assert r.pieces == 1 and not r.of_kind("concatenated-not-merged") and r.num_fdes == first.header.num_fdes
    notes = [n for n in r.notes if "after the SFrame data" in n]
    assert len(notes) == 1 and notes[0].startswith(
        f"{len(data) - off2} bytes after the SFrame data at +{off2:#x} do not decode as another section: "), notes


def test_bytes_after_the_first_section_too_few_for_a_header_are_noted(objects, tmp_path):
    """.sframe's size cut to 10 bytes past the first section's 8-byte boundary: too few for another
    header, so they are noted as what they are."""
    path = _linked(objects, tmp_path)
    shdr, _, vaddr, data = _sframe_shdr(path)
    first = SFrameSection.parse(data, vaddr, strict=False)
    size = (first.header.end + 7) // 8 * 8 + 10
    raw = bytearray(path.read_bytes())
    struct.pack_into("<Q", raw, shdr + 0x20, size)  # Elf64_Shdr.sh_size
    path.write_bytes(bytes(raw))
    r = check_binary(path)
    assert r.pieces == 1 and not r.of_kind("concatenated-not-merged")
    assert f"{size - first.header.end} bytes after the SFrame data at +{first.header.end:#x}, not another section" \
        in r.notes, r.notes


def test_a_stripped_outputs_starts_are_found_by_its_eh_frame_fdes(objects, tmp_path):
    """mold's V1 output stripped of .symtab (an executable's .dynsym names none of its own
    functions): a start lands on a function where an .eh_frame FDE starts at it, so the starts
    left PC-relative are found as they are with the symbols -- every FDE's read from its own field,
    none read from the section -- and the section read so agrees with .eh_frame."""
    path = _linked(objects, tmp_path, "mold", version=1)
    stripped = tmp_path / "stripped"
    shutil.copy(path, stripped)
    need("host").run(["strip", str(stripped)], cwd=str(tmp_path))
    with open(stripped, "rb") as f:
        assert ELFFile(f).get_section_by_name(".symtab") is None
    r, full = check_binary(stripped), check_binary(path)
    assert set(r.by_kind()) == EXPECTED[(1, "mold")]
    assert [(f.addr, f.end, f.message) for f in r.of_kind("pcrel-starts-unflagged")] == \
        [(f.addr, f.end, f.message) for f in full.of_kind("pcrel-starts-unflagged")]
    assert r.fres_checked == r.num_fres, r.notes


def _cut(path: Path, size: int, fill: int | None = None, at: int = 0) -> bytes:
    """Set .sframe's sh_size to ``size``; with ``fill``, its bytes from ``at`` on set to that
    byte.  Returns the section's bytes as they were."""
    shdr, off, _, data = _sframe_shdr(path)
    raw = bytearray(path.read_bytes())
    struct.pack_into("<Q", raw, shdr + 0x20, size)  # Elf64_Shdr.sh_size
    if fill is not None:
        raw[off + at:off + size] = bytes([fill]) * (size - at)
    path.write_bytes(bytes(raw))
    return data


@pytest.mark.parametrize("fill,cut", [(0, True), (0x58, True), (0x58, False)],
                         ids=["zeros-to-the-boundary", "X-to-the-boundary", "X-before-the-second"])
def test_only_zeros_pad_a_section_to_the_next_8_byte_boundary(objects, tmp_path, fill, cut):
    """Between the end of one section's data and the next 8-byte boundary only zeros are padding:
    .sframe ending at that boundary is one section and nothing more; any other byte there (here
    'X') ends the search for another section, noted as what it is, whether a section follows it or not."""
    path = _linked(objects, tmp_path, version=1)
    _, _, vaddr, data = _sframe_shdr(path)
    end = SFrameSection.parse(data, vaddr, strict=False).header.end
    off2 = (end + 7) // 8 * 8
    assert off2 > end and not data[end:off2].strip(b"\0")  # gas pads the first section
    _cut(path, off2 if cut else len(data), fill, at=end)
    if fill:
        raw = path.read_bytes()
        _, off, _, _ = _sframe_shdr(path)
        assert raw[off + end:off + off2] == b"X" * (off2 - end)
    r = check_binary(path)
    assert r.pieces == 1 and not r.of_kind("concatenated-not-merged")
    notes = [n for n in r.notes if "after the SFrame data" in n]
    size = off2 if cut else len(data)
    assert notes == ([f"{size - end} bytes after the SFrame data at +{end:#x}, not another section"] if fill else [])


def test_a_headers_worth_of_bytes_after_the_boundary_is_read_as_a_header(objects, tmp_path):
    """.sframe cut to exactly one header's size past the first section's 8-byte boundary: that is
    enough for another header, so it is read as one (and, its FDEs cut off, does not decode)."""
    path = _linked(objects, tmp_path, version=1)
    _, _, vaddr, data = _sframe_shdr(path)
    off2 = (SFrameSection.parse(data, vaddr, strict=False).header.end + 7) // 8 * 8
    _cut(path, off2 + F.HEADER_SIZE)
    r = check_binary(path)
    assert r.pieces == 1
    notes = [n for n in r.notes if "after the SFrame data" in n]
    assert len(notes) == 1 and notes[0].startswith(
        f"{F.HEADER_SIZE} bytes after the SFrame data at +{off2:#x} do not decode as another section: "), notes


def test_a_section_ending_on_an_8_byte_boundary_is_followed_by_the_next_at_once(objects, tmp_path):
    """The next header is looked for at the first 8-byte boundary at or after a section's end: a
    section whose data ends on one (mold's second, laid twice) has the next right after it."""
    path = _linked(objects, tmp_path, version=1)
    _, _, vaddr, data = _sframe_shdr(path)
    off2 = (SFrameSection.parse(data, vaddr, strict=False).header.end + 7) // 8 * 8
    second = data[off2:]
    assert len(second) % 8 == 0 and SFrameSection.parse(second, vaddr, strict=False).header.end == len(second)
    out = BinaryCheck(str(path), 1, [], "section", 0, 0)
    pieces = sframe_check._pieces(SFrameSection.parse(second * 2, vaddr, strict=False), out)
    assert [off for off, _ in pieces] == [0, len(second)] and out.notes == []
    assert [p.section_vaddr for _, p in pieces] == [vaddr, vaddr + len(second)]


@pytest.mark.parametrize("version,which", [(1, 0), (3, 0), (3, 1)], ids=["v1-first", "v3-first", "v3-second"])
def test_each_laid_end_to_end_sections_fres_are_checked_as_one_sections(objects, tmp_path, version, which):
    """An FRE starting where the previous one does, in either of mold's two sections (V1's second,
    drap.o's, is one FDE of one FRE: gas 2.40 cannot describe the rest): an FRE start not after
    the previous (fre-start, the section named), as in a section of its own -- not FRE data that
    does not decode, whichever way the section's starts are read."""
    path = _linked(objects, tmp_path, version=version)
    _, off, vaddr, data = _sframe_shdr(path)
    off2 = (SFrameSection.parse(data, vaddr, strict=False).header.end + 7) // 8 * 8
    at = (0, off2)[which]
    piece = SFrameSection.parse(data[at:], vaddr + at, strict=False)
    fde = next(f for f in piece.fdes if not f.pcmask and len(piece.fres(f)) >= 2)
    fres = piece.fres(fde)
    raw = bytearray(path.read_bytes())
    fmt = {1: "<B", 2: "<H", 4: "<I"}[F.FRE_START_ADDR_SIZE[fde.fre_type]]
    struct.pack_into(fmt, raw, off + at + fres[1].offset, fres[0].start)
    path.write_bytes(bytes(raw))
    r = check_binary(path)
    assert not r.of_kind("fre-decode"), [f.message for f in r.of_kind("fre-decode")]
    (f,) = r.of_kind("fre-start")
    assert (f.fde, f.fre) == (fde.index, 1)
    assert f.message.startswith(f"section {which + 1}/2 at +{at:#x}: FDE {fde.index} ")
    assert f.message.endswith(f": FRE 1 starts at +{fres[0].start:#x}, not after FRE 0 (+{fres[0].start:#x})")


def test_a_section_is_read_the_way_that_lands_more_of_its_starts_on_functions(objects, tmp_path):
    """mold's V1 output stripped (its functions known by .eh_frame only), the first section's FDEs
    but FDE 0 given section-relative starts, as the header says: read so, all but one land on a
    function, read from their own fields one does -- the section is read as the header says
    (only the second, left as mold wrote it, is pcrel-starts-unflagged)."""
    path = _linked(objects, tmp_path, "mold", version=1)
    need("host").run(["strip", str(path)], cwd=str(tmp_path))
    _, off, vaddr, data = _sframe_shdr(path)
    first = SFrameSection.parse(data, vaddr, strict=False, pcrel=True)
    assert len(first.fdes) >= 3
    raw = bytearray(path.read_bytes())
    for f in first.fdes[1:]:
        struct.pack_into("<i", raw, off + f.offset, f.func_start - vaddr)
    path.write_bytes(bytes(raw))
    r = check_binary(path)
    off2 = (first.header.end + 7) // 8 * 8
    assert [f.message.split(": ")[0] for f in r.of_kind("pcrel-starts-unflagged")] == [f"section 2/2 at +{off2:#x}"]
