"""``sframe check --tree``: what is the input's fault and what is the checker's, kept apart.

A file whose check fails inside the checker (an exception that is not a typed error of the
input) is a *crash*: reported in the tree's results with the exception's type and text, printed
under "checker errors", never dropped and never counted as bad input.  Any crash a file alone
causes is a checker bug (fixed when found, as below), so the crash here comes from the caller:
``expect_binutils`` given as the number 2.45 instead of ``(2, 45)``, which the check of a V2
section without FDE_FUNC_START_PCREL -- gas 2.44's objects, alone and in an archive -- is the
only part to read; the V1 object beside them is checked as usual.

A file whose header offsets are past what a file offset holds is the input's fault: the cheap
header test (which reads the file, not its bytes in memory) met a ``ValueError`` from ``seek``
that the checker's in-memory read meets as ``OverflowError``; it was a crash until the fix.
"""

from __future__ import annotations

import io
import shutil
import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from harness.cli import main
from harness.report.sframe import format_tree
from harness.sframe import SFrameError
from harness.unwind.sframe_check import check_file
from harness.unwind.sframe_tree import check_one, check_tree
from tests.support.toolchains import need

CASES_DIR = Path(__file__).resolve().parents[3] / "guest_programs" / "sframe_cases"
CRASH = "TypeError: 'float' object is not iterable"


def _assemble(tc_name: str, dest: Path) -> None:
    """frames.o and drap.o by the root's ``as --gsframe``, and lib.a of both by its ``ar``."""
    tc = need(tc_name)
    outer, inner = tc.workdir("sframe-tree-faults")
    try:
        for case in ("frames", "drap"):
            shutil.copy(CASES_DIR / f"{case}.s", outer / f"{case}.s")
            tc.run(["as", "--gsframe", f"{case}.s", "-o", f"{case}.o"], cwd=inner)
        tc.run(["ar", "rc", "lib.a", "frames.o", "drap.o"], cwd=inner)
        dest.mkdir(parents=True)
        for name in ("frames.o", "lib.a"):
            shutil.copy(outer / name, dest / name)
    finally:
        shutil.rmtree(outer, ignore_errors=True)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    r = tmp_path_factory.mktemp("tree-faults")
    _assemble("host", r / "v1")  # SFrame V1: expect_binutils is not read
    _assemble("trixie", r / "v2")  # V2 without FDE_FUNC_START_PCREL: it is
    return r


def test_a_file_whose_check_fails_in_the_checker_is_reported_as_a_crash(root):
    rep = check_tree(root, jobs=2, timeout=300, expect_binutils=2.45)
    by = {r.path: r for r in rep.results}
    assert sorted(by) == ["/v1/frames.o", "/v1/lib.a", "/v2/frames.o", "/v2/lib.a"]
    for path in ("/v2/frames.o", "/v2/lib.a"):
        assert by[path].crash == CRASH and by[path].errors == [] and by[path].kinds == {}, path
    # an ELF file is known to have SFrame data before its check; an archive only by it
    assert by["/v2/frames.o"].has_sframe and not by["/v2/lib.a"].has_sframe
    for path in ("/v1/frames.o", "/v1/lib.a"):  # gas 2.40's own faults, checked beside the crashes
        assert by[path].crash is None and by[path].kinds == {"ra": 1, "cfa": 1}, path
    text = format_tree(rep).splitlines()
    assert "  checker errors: 2 files (not the input's fault)" in text
    assert [ln for ln in text if ln.endswith(CRASH)] == [f"    /v2/frames.o: {CRASH}", f"    /v2/lib.a: {CRASH}"]
    assert not [ln for ln in text if "unreadable" in ln]  # a crash is not bad input
    # the same files with the binutils named as the checker takes it: header findings, no crash
    named = {r.path: r for r in check_tree(root, jobs=2, timeout=300, expect_binutils=(2, 45)).results}
    assert [p for p, r in named.items() if r.crash] == []
    assert named["/v2/frames.o"].kinds["header"] == 1 and named["/v2/lib.a"].kinds["header"] == 2


def test_check_one_keeps_the_crash_apart_from_the_files_errors(root):
    r = check_one(str(root / "v2/lib.a"), True, str(root), 2.45)
    assert (r.path, r.archive, r.crash, r.errors, r.has_sframe) == ("/v2/lib.a", True, CRASH, [], False)
    r = check_one(str(root / "v2/frames.o"), False, str(root), 2.45)
    assert (r.path, r.archive, r.crash, r.errors, r.has_sframe) == ("/v2/frames.o", False, CRASH, [], True)


def _offset_past_a_file_offset(data: bytes, value: int) -> bytes:
    """``data`` with .shstrtab's sh_offset set to ``value`` (the section names unreadable)."""
    elf = ELFFile(io.BytesIO(data))
    out = bytearray(data)
    struct.pack_into("<Q", out, elf["e_shoff"] + elf["e_shstrndx"] * elf["e_shentsize"] + 24, value)
    return bytes(out)


@pytest.mark.parametrize("value", [1 << 63, (1 << 64) - 1])
def test_a_section_offset_past_what_a_file_offset_holds_is_bad_input_not_a_crash(root, value, tmp_path, capsys):
    (tmp_path / "usr").mkdir()
    bad = tmp_path / "usr/frames.o"
    bad.write_bytes(_offset_past_a_file_offset((root / "v1/frames.o").read_bytes(), value))
    r = check_one(str(bad), False, str(tmp_path))
    assert r.crash is None and r.errors == ["file: /usr/frames.o: not a readable ELF file: ValueError: cannot fit "
                                            "'int' into an offset-sized integer"]
    with pytest.raises(SFrameError, match="not a readable ELF file: OverflowError"):  # the bytes, read in memory
        check_file(bad)
    assert main(["sframe", "check", "--tree", str(tmp_path)]) == 2  # bad input, not a checker error (3)
    out = capsys.readouterr().out
    assert "  unreadable: 1 files (bad input, each its own)" in out and "checker errors" not in out
