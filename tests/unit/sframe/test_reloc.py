"""harness/sframe/reloc.py: the relocations of a real object's ``.rela.sframe``, applied.

gas output of each root (host 2.40: R_X86_64_PC32 into V1's 32-bit start fields; sid 2.46+:
R_X86_64_PC64 into V3's 64-bit ones) with its first relocation's symbol index rewritten: the
last symbol of the table is applied, the index one past it is an error naming the index and the
relocation's offset -- where sid's own bfd (``objdump --sframe``, which applies ``.rela.sframe``)
says "relocation 0 has invalid symbol index N" for the same index and not for the one before.
"""

from __future__ import annotations

import io
import shutil
import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from harness.sframe import SFrameError
from harness.sframe.reloc import PLACE_BASE, place_object, relocated_section
from harness.unwind.sframe_check import check_file, load
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
