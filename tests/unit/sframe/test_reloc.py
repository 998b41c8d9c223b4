"""harness/sframe/reloc.py: the relocations of a real object's ``.rela.sframe``, applied.

gas output of each root (host 2.40: R_X86_64_PC32 into V1's 32-bit start fields; sid 2.46+:
R_X86_64_PC64 into V3's 64-bit ones) with its first relocation's symbol index rewritten: the
last symbol of the table is applied, the index one past it is an error naming the index and the
relocation's offset -- where sid's own bfd (``objdump --sframe``, which applies ``.rela.sframe``)
says "relocation 0 has invalid symbol index N" for the same index and not for the one before.
"""

from __future__ import annotations

import io
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from harness.sframe import SFrameError
from harness.sframe.reloc import PLACE_BASE, SHF_ALLOC, SHF_EXECINSTR, place_object, relocated_section
from harness.unwind.sframe_check import check_file, load
from tests.support.gating import require
from tests.support.toolchains import need

CASES_DIR = Path(__file__).resolve().parents[3] / "guest_programs" / "sframe_cases"
RELOC_TYPE = {"host": 2, "sid": 24}  # R_X86_64_PC32, R_X86_64_PC64


@pytest.fixture(scope="module")
def frames_o(tmp_path_factory):
    made = {}

    def get(tc_name: str) -> bytes:
        if tc_name not in made:
            tc = need(tc_name)
            outer, inner = tc.workdir("sframe-reloc")
            try:
                shutil.copy(CASES_DIR / "frames.s", outer / "frames.s")
                tc.run(["as", "--gsframe", "frames.s", "-o", "frames.o"], cwd=inner)
                made[tc_name] = (outer / "frames.o").read_bytes()
            finally:
                shutil.rmtree(outer, ignore_errors=True)
        return made[tc_name]

    return get


def _first_relocation(data: bytes) -> tuple[int, int, int, int]:
    """(file offset of .rela.sframe's first entry, its r_offset, r_addend, the symbol count)."""
    elf = ELFFile(io.BytesIO(data))
    rel = elf.get_section_by_name(".rela.sframe")
    first = next(rel.iter_relocations())
    return rel["sh_offset"], first["r_offset"], first["r_addend"], elf.get_section(rel["sh_link"]).num_symbols()


def _with_symbol(data: bytes, sym: int) -> bytes:
    at = _first_relocation(data)[0] + 8  # Elf64_Rela.r_info: symbol << 32 | type
    out = bytearray(data)
    info = struct.unpack_from("<Q", out, at)[0]
    struct.pack_into("<Q", out, at, sym << 32 | info & 0xFFFFFFFF)
    return bytes(out)


def _bfd_says(data: bytes) -> str:
    """What sid's ``objdump --sframe`` prints on stderr for the object ``data``."""
    tc = need("sid")
    outer, inner = tc.workdir("sframe-reloc-objdump")
    try:
        (outer / "m.o").write_bytes(data)
        return tc.run(["sh", "-c", "objdump --sframe m.o 2>&1 >/dev/null"], cwd=inner).stdout
    finally:
        shutil.rmtree(outer, ignore_errors=True)


@pytest.mark.parametrize("tc_name", ["host", "sid"])
def test_a_relocation_against_the_last_symbol_is_applied_and_one_past_it_refused(frames_o, tc_name, tmp_path):
    data = frames_o(tc_name)
    _, r_offset, addend, nsyms = _first_relocation(data)
    elf = ELFFile(io.BytesIO(data))
    assert next(elf.get_section_by_name(".rela.sframe").iter_relocations())["r_info_type"] == RELOC_TYPE[tc_name]
    # the last symbol: applied, FDE 0 starts where that symbol is placed, plus the addend
    last = _with_symbol(data, nsyms - 1)
    assert "invalid symbol index" not in _bfd_says(last)
    path = tmp_path / "last.o"
    path.write_bytes(last)
    table, image = load(path)
    sym = image.elf.get_section_by_name(".symtab").get_symbol(nsyms - 1)
    assert table.fdes[0].func_start == sym["st_value"] + addend  # placed: st_value is its address
    assert sym["st_value"] >= PLACE_BASE
    # one past it: refused, as bfd refuses it
    for index in (nsyms, nsyms + 1):
        bad = _with_symbol(data, index)
        assert f"relocation 0 has invalid symbol index {index}" in _bfd_says(bad)
        path = tmp_path / f"sym{index}.o"
        path.write_bytes(bad)
        message = f"{path}: .rela.sframe: symbol index {index} past the symbol table"
        with pytest.raises(SFrameError) as placed:
            place_object(bad, str(path))
        with pytest.raises(SFrameError) as checked:
            check_file(path)
        for e in (placed, checked):
            assert str(e.value).endswith(message), e.value
            assert (e.value.field, e.value.offset) == ("relocation", r_offset)
        elf = ELFFile(io.BytesIO(bad))
        with pytest.raises(SFrameError, match=f"^relocation at byte {r_offset:#x}: m.o: .rela.sframe: symbol "
                                              f"index {index} past the symbol table$"):
            relocated_section(elf, elf.get_section_index(".sframe"), name="m.o")


def test_a_relocation_against_a_symbol_inside_its_section_adds_the_symbols_offset(frames_o, tmp_path):
    """The first relocation moved to `leaf`, a function symbol past its section's start: FDE 0 now
    starts at `leaf`'s placed address plus the addend (S is the section's base plus st_value)."""
    data = frames_o("sid")
    _, _, addend, _ = _first_relocation(data)
    elf = ELFFile(io.BytesIO(data))
    syms = list(elf.get_section_by_name(".symtab").iter_symbols())
    k = next(i for i, s in enumerate(syms) if s.name == "leaf")
    assert syms[k]["st_value"] > 0
    path = tmp_path / "leaf.o"
    path.write_bytes(_with_symbol(data, k))
    table, image = load(path)
    placed = image.elf.get_section_by_name(".symtab").get_symbol(k)
    assert table.fdes[0].func_start == placed["st_value"] + addend


# ------------------------------------------------------------------------------ relocated_section


def test_relocated_section_applies_what_place_object_applies(frames_o):
    """relocated_section with the placed layout's bases gives the placed image's bytes; a section
    the bases leave out is where its header puts it; a section without relocations is its bytes."""
    for tc_name in ("host", "sid"):
        data = frames_o(tc_name)
        elf = ELFFile(io.BytesIO(data))
        placed = place_object(data)
        for name in (".sframe", ".eh_frame"):
            i = elf.get_section_index(name)
            sec = elf.get_section(i)
            assert relocated_section(elf, i, placed.bases) == placed.data[sec["sh_offset"]:
                                                                          sec["sh_offset"] + sec["sh_size"]]
            text = {k: v for k, v in placed.bases.items() if k != i}
            assert relocated_section(elf, i, text) == relocated_section(elf, i, {**text, i: 0})
            assert relocated_section(elf, i, text) != relocated_section(elf, i, {**text, i: 0x40})
        own = elf.get_section_index(".text.own")  # no .rela.text.own
        assert relocated_section(elf, own) == elf.get_section(own).data()


def test_relocation_errors_name_the_object_the_section_and_the_offset(frames_o):
    """Each error of a relocation that cannot be applied: a symbol past the table, a type this
    reader does not apply, a field past the section's end; the object named (``<object>`` when
    the caller gives no name)."""
    data = frames_o("sid")
    elf = ELFFile(io.BytesIO(data))
    rela = elf.get_section_by_name(".rela.sframe")
    sframe = elf.get_section_by_name(".sframe")
    at, r_offset, _, nsyms = _first_relocation(data)

    def entry(**change) -> bytes:
        out = bytearray(data)
        r_info = struct.unpack_from("<Q", out, at + 8)[0]
        sym, rtype = change.get("sym", r_info >> 32), change.get("type", r_info & 0xFFFFFFFF)
        struct.pack_into("<QQ", out, at, change.get("offset", r_offset), sym << 32 | rtype)
        return bytes(out)

    size = sframe["sh_size"]
    cases = [
        (entry(sym=nsyms), r_offset, f".rela.sframe: symbol index {nsyms} past the symbol table"),
        (entry(type=3), r_offset, f".rela.sframe: relocation type 3 at {r_offset:#x} is not one this reader "
                                  "applies (1, 2, 10, 11, 24)"),
        (entry(offset=size - 7), size - 7, f".rela.sframe: relocation at {size - 7:#x} runs past .sframe "
                                           f"({size} bytes)"),
    ]
    for bad, offset, what in cases:
        belf = ELFFile(io.BytesIO(bad))
        for name, call in (("m.o", lambda b=bad: place_object(b, "m.o")),
                           ("<object>", lambda b=bad: place_object(b)),
                           ("<object>", lambda e=belf: relocated_section(e, e.get_section_index(".sframe")))):
            with pytest.raises(SFrameError) as e:
                call()
            assert str(e.value) == f"relocation at byte {offset:#x}: {name}: {what}"
            assert (e.value.field, e.value.offset) == ("relocation", offset)
    # a PC64 field ending on the section's last byte is applied; R_X86_64_NONE is skipped, the
    # relocations after it applied
    last = relocated_section(ELFFile(io.BytesIO(entry(offset=size - 8))), elf.get_section_index(".sframe"))
    assert len(last) == size and last[size - 8:] != sframe.data()[size - 8:]
    none = place_object(entry(type=0))
    whole = place_object(data)
    off = sframe["sh_offset"]
    assert none.data[off + r_offset:off + r_offset + 8] == sframe.data()[r_offset:r_offset + 8]  # untouched
    assert none.data[off + r_offset + 8:off + size] == whole.data[off + r_offset + 8:off + size]
    assert rela.num_relocations() > 1


def _shdr_at(data: bytes, name: str) -> int:
    elf = ELFFile(io.BytesIO(data))
    return elf["e_shoff"] + elf.get_section_index(name) * elf["e_shentsize"]


def test_relocation_sections_the_reader_cannot_apply_are_errors(frames_o, tmp_path):
    """SHT_REL where x86-64 uses SHT_RELA; a symbol table link to a section that is no symbol
    table; an i386 object's .rel.eh_frame and an x32 (ELF32 x86-64) object's .rela.eh_frame."""
    data = frames_o("host")
    rel = bytearray(data)
    struct.pack_into("<I", rel, _shdr_at(data, ".rela.sframe") + 4, 9)  # sh_type SHT_REL
    struct.pack_into("<Q", rel, _shdr_at(data, ".rela.sframe") + 56, 16)  # sh_entsize: an Elf64_Rel's
    with pytest.raises(SFrameError) as e:
        place_object(bytes(rel), "m.o")
    assert str(e.value) == "relocation: m.o: .rela.sframe is SHT_REL; x86-64 uses SHT_RELA"
    link = bytearray(data)
    struct.pack_into("<I", link, _shdr_at(data, ".rela.sframe") + 40, 1)  # sh_link: .text
    with pytest.raises(SFrameError) as e:
        place_object(bytes(link), "m.o")
    assert str(e.value).startswith("relocation: m.o: .rela.sframe does not decode: ")
    tc = need("host")
    (tmp_path / "h.s").write_text("\t.text\n\t.globl h\nh:\n\t.cfi_startproc\n\tnop\n\tret\n\t.cfi_endproc\n")
    for flag, machine in (("--32", "EM_386 (ELF32)"), ("--x32", "EM_X86_64 (ELF32)")):
        obj = tmp_path / f"h{flag}.o"
        tc.run(["as", flag, "h.s", "-o", obj.name], cwd=str(tmp_path))
        with pytest.raises(SFrameError) as e:
            place_object(obj.read_bytes(), "m.o")
        assert str(e.value) == (f"relocation: m.o: relocations of .eh_frame are applied for x86-64 objects only, "
                                f"not {machine}"), flag


def test_what_is_no_relocatable_object_is_refused(tmp_path):
    linked = Path("/bin/true").read_bytes()
    with pytest.raises(SFrameError) as e:
        place_object(linked, "true")
    assert str(e.value) == "file: true: not a relocatable object (ET_DYN)"
    with pytest.raises(SFrameError) as e:
        place_object(b"\x7fELF" + bytes(60))
    assert str(e.value).startswith("file: <object>: not a readable ELF file: ") and e.value.field == "file"


# ------------------------------------------------------------------------------ the placement


GEN = """\
	.text
	.globl	f, f2
f:
	.byte 1, 2, 3
f2:
	.byte 4
	.section .text.b,"ax",@progbits
	.p2align 4
	.globl	g
	.byte 9, 9
g:
	.byte 4
	.section .rodata.x,"a",@progbits
	.p2align 5
	.globl	r
	.byte 5
r:
	.byte 6, 7
	.data
	.p2align 3
	.globl	d, absval
	.set absval, 0x42
d:
	.byte 8
	.long undefined_sym
	.section .odd1,"a",@progbits
	.p2align 0
	.byte 1, 2, 3
	.section .odd2,"a",@progbits
	.p2align 0
	.byte 4
"""


def _readelf(path: Path, what: str) -> list[list[str]]:
    out = subprocess.run(["readelf", "-W", what, str(path)], capture_output=True, text=True, check=True, timeout=60)
    return [line.split() for line in out.stdout.splitlines()]


def _addresses(path: Path) -> dict[int, int]:
    """section index -> address, as readelf -S reads them."""
    out = {}
    for line in subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True, check=True,
                               timeout=60).stdout.splitlines():
        m = re.match(r"\s*\[\s*(\d+)\]\s+\S*\s+[A-Z_]+\s+([0-9a-f]{8,16})\s", line)
        if m:
            out[int(m.group(1))] = int(m.group(2), 16)
    return out


def _symbols(path: Path) -> dict[str, tuple[int, str]]:
    """name -> (value, section index), as readelf -s reads them."""
    return {f[7]: (int(f[1], 16), f[6]) for f in _readelf(path, "-s")
            if len(f) == 8 and f[0].endswith(":") and f[0] != "Num:"}


@pytest.mark.parametrize("target", ["x86_64", "i386", "ppc64", "mips"])
def test_each_allocated_section_is_laid_where_its_alignment_allows_in_any_class_and_byte_order(target, tmp_path):
    """An object of each ELF class and byte order (llvm-mc: x86-64 and i386 little-endian, ppc64
    and MIPS big-endian; ELF64 and ELF32), placed; what readelf reads of the placed bytes: every
    SHF_ALLOC section at the next address its alignment allows from PLACE_BASE, in section
    order, the others left at 0; every symbol of a placed section at its section's address plus
    its value; absolute and undefined symbols as they were."""
    require(shutil.which("llvm-mc") is not None, "llvm-mc is not installed (llvm)")
    (tmp_path / "gen.s").write_text(GEN)
    obj = tmp_path / "gen.o"
    subprocess.run(["llvm-mc", f"-triple={target}-unknown-linux-gnu", "-filetype=obj", "gen.s", "-o", "gen.o"],
                   cwd=tmp_path, check=True, timeout=60)
    placed = place_object(obj.read_bytes(), "gen.o")
    (tmp_path / "placed.o").write_bytes(placed.data)
    secs = list(ELFFile(io.BytesIO(obj.read_bytes())).iter_sections())
    addr, want = PLACE_BASE, {}
    for i, s in enumerate(secs):
        if s["sh_flags"] & SHF_ALLOC:
            align = max(s["sh_addralign"], 1)
            addr = (addr + align - 1) // align * align
            want[i] = addr
            addr += s["sh_size"]
    index = {s.name: i for i, s in enumerate(secs)}
    assert len({want[index[n]] for n in (".text", ".text.b", ".rodata.x", ".data")}) == 4
    assert want[index[".odd2"]] == want[index[".odd1"]] + 3  # byte-aligned: right after, at an odd address
    assert _addresses(tmp_path / "placed.o") == {i: want.get(i, 0) for i in range(len(secs))}
    assert placed.bases == want
    assert placed.text == [(want[i], want[i] + s["sh_size"]) for i, s in enumerate(secs)
                           if s["sh_flags"] & SHF_EXECINSTR]
    old, new = _symbols(obj), _symbols(tmp_path / "placed.o")
    for sym, (value, ndx) in old.items():
        moved = value + want[int(ndx)] if ndx.isdigit() and int(ndx) in want else value
        assert new[sym] == (moved, ndx), sym
    assert new["f2"][0] == want[index[".text"]] + 3 and new["g"][0] == want[index[".text.b"]] + 2
    assert new["absval"] == (0x42, "ABS") and new["undefined_sym"] == (0, "UND")
    assert placed.relocated == []


DEBUG_FRAME = """\
	.cfi_sections .debug_frame
	.text
	.globl	a
	.type	a, @function
a:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	popq	%rbp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size	a, .-a
	.section .text.b,"ax",@progbits
	.globl	b
	.type	b, @function
	nop
b:
	.cfi_startproc
	nop
	ret
	.cfi_endproc
	.size	b, .-b
"""


def test_a_debug_frame_is_relocated_with_its_absolute_relocations(tmp_path):
    """.debug_frame (not allocated: at 0) has absolute relocations: R_X86_64_32 for each FDE's CIE
    pointer (against .debug_frame itself) and R_X86_64_64 for its initial location.  readelf of the
    placed bytes: each FDE points at CIE 0 and covers its function where the symbols say it is."""
    tc = need("host")
    (tmp_path / "df.s").write_text(DEBUG_FRAME)
    tc.run(["as", "df.s", "-o", "df.o"], cwd=str(tmp_path))
    types = {f[2] for f in _readelf(tmp_path / "df.o", "-r") if len(f) > 2 and f[2].startswith("R_X86_64")}
    assert types == {"R_X86_64_32", "R_X86_64_64"}
    placed = place_object((tmp_path / "df.o").read_bytes(), "df.o")
    assert placed.relocated == [".debug_frame"]
    (tmp_path / "placed.o").write_bytes(placed.data)
    syms = _symbols(tmp_path / "placed.o")
    fdes = [f for f in _readelf(tmp_path / "placed.o", "--debug-dump=frames") if "FDE" in f]
    assert [(f[4], f[5]) for f in fdes] == [
        ("cie=00000000", f"pc={syms[s][0]:016x}..{syms[s][0] + size:016x}") for s, size in (("a", 3), ("b", 2))]
    text_b = ELFFile(io.BytesIO(placed.data)).get_section_index(".text.b")
    assert syms["b"][0] == _addresses(tmp_path / "placed.o")[text_b] + 1
    # a PC-relative relocation there (R_X86_64_64 made PC64): relative to address 0, where the
    # section lies, as relocated_section reads it with the same layout
    data = bytearray((tmp_path / "df.o").read_bytes())
    elf = ELFFile(io.BytesIO(bytes(data)))
    rela = elf.get_section_by_name(".rela.debug_frame")
    k = next(i for i, r in enumerate(rela.iter_relocations()) if r["r_info_type"] == 1)
    at = rela["sh_offset"] + k * 24 + 8
    struct.pack_into("<Q", data, at, struct.unpack_from("<Q", data, at)[0] & ~0xFFFFFFFF | 24)
    pc = place_object(bytes(data))
    elf = ELFFile(io.BytesIO(bytes(data)))
    i = elf.get_section_index(".debug_frame")
    sec = elf.get_section(i)
    assert i not in pc.bases
    assert pc.data[sec["sh_offset"]:sec["sh_offset"] + sec["sh_size"]] == relocated_section(elf, i, pc.bases) != \
        placed.data[sec["sh_offset"]:sec["sh_offset"] + sec["sh_size"]]


def test_an_undefined_symbol_a_relocation_names_is_0_in_the_placed_image(tmp_path):
    """g++'s .eh_frame (non-PIC) points at __gxx_personality_v0, undefined in the object: placed
    alone it is 0; the LSDA pointer is .gcc_except_table's placed address (readelf of the placed
    bytes)."""
    tc = need("host")
    (tmp_path / "p.cc").write_text("int g(int);\nint f(int x) { try { return g(x); } catch (...) { return -1; } }\n")
    tc.run(["g++", "-O1", "-fno-pic", "-c", "p.cc", "-o", "p.o"], cwd=str(tmp_path))
    data = bytearray((tmp_path / "p.o").read_bytes())
    elf = ELFFile(io.BytesIO(bytes(data)))
    symtab = elf.get_section_by_name(".symtab")
    k = next(i for i, s in enumerate(symtab.iter_symbols()) if s.name == "__gxx_personality_v0")
    assert symtab.get_symbol(k)["st_shndx"] == "SHN_UNDEF"
    struct.pack_into("<Q", data, symtab["sh_offset"] + k * 24 + 8, 0x77)  # its st_value: not read
    placed = place_object(bytes(data), "p.o")
    (tmp_path / "placed.o").write_bytes(placed.data)
    frames = [" ".join(f) for f in _readelf(tmp_path / "placed.o", "--debug-dump=frames")]
    lsda = _addresses(tmp_path / "placed.o")[ELFFile(io.BytesIO(placed.data)).get_section_index(".gcc_except_table")]
    aug = [line.split(": ", 1)[1] for line in frames if line.startswith("Augmentation data:")]
    assert aug[0].startswith("03 00 00 00 00 ")  # zPLR: personality udata4, 0
    assert aug[1] == " ".join(f"{b:02x}" for b in lsda.to_bytes(4, "little"))


def _without(data: bytes, section: str, sh_type: int | None = None, sh_info: int | None = None) -> bytes:
    out = bytearray(data)
    at = _shdr_at(data, section)
    if sh_type is not None:
        struct.pack_into("<I", out, at + 4, sh_type)
    if sh_info is not None:
        struct.pack_into("<I", out, at + 44, sh_info)
    return bytes(out)


def test_a_section_without_relocations_does_not_stop_the_next_ones(frames_o):
    """.rela.eh_frame pointed at no section: .eh_frame (before .sframe) has none; .sframe's are
    still applied, the same as in the whole object."""
    data = frames_o("sid")
    placed = place_object(_without(data, ".rela.eh_frame", sh_info=0))
    whole = place_object(data)
    assert placed.relocated == [".sframe"] and whole.relocated == [".eh_frame", ".sframe"]
    sec = ELFFile(io.BytesIO(data)).get_section_by_name(".sframe")
    lo, hi = sec["sh_offset"], sec["sh_offset"] + sec["sh_size"]
    assert placed.data[lo:hi] == whole.data[lo:hi] != data[lo:hi]


def test_an_sframe_section_of_no_bytes_is_not_relocated(frames_o):
    """.sframe's sh_type made SHT_NOBITS: it holds no bytes in the file, and nothing is written
    where its sh_offset points."""
    data = frames_o("sid")
    nobits = _without(data, ".sframe", sh_type=8)
    placed = place_object(nobits)
    assert placed.relocated == [".eh_frame"]
    sec = ELFFile(io.BytesIO(data)).get_section_by_name(".sframe")
    lo, hi = sec["sh_offset"], sec["sh_offset"] + sec["sh_size"]
    assert placed.data[lo:hi] == data[lo:hi]
