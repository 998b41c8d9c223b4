"""``sframe check --tree``: what is the input's fault and what is the checker's, kept apart; what
the walk takes and leaves; a file's figures; packages; the run's bound.

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
import multiprocessing
import os
import shutil
import struct
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from harness.cli import main
from harness.report.sframe import format_tree
from harness.sframe import SFrameError
from harness.unwind.sframe_check import check_file
from harness.unwind.sframe_tree import NO_PACKAGE, candidates, check_one, check_tree, dpkg_packages
from tests.support.gating import require
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


def test_a_section_offset_the_file_system_refuses_to_seek_to_is_an_error_of_the_file(root, tmp_path):
    """2**63 - 1 fits a file offset, and the kernel's seek says EINVAL: an OSError, the file's error."""
    (tmp_path / "usr").mkdir()
    bad = tmp_path / "usr/frames.o"
    bad.write_bytes(_offset_past_a_file_offset((root / "v1/frames.o").read_bytes(), (1 << 63) - 1))
    r = check_one(str(bad), False, str(tmp_path))
    assert r.crash is None and r.errors == ["/usr/frames.o: OSError: [Errno 22] Invalid argument"]


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


# ------------------------------------------------------------------------------ a file's figures


def test_a_files_figures_are_the_sums_of_its_checks(root, tmp_path):
    """An archive's result: its members, the members checked, and each figure summed over their
    checks (the checker's own numbers, member by member)."""
    fc = check_file(root / "v1/lib.a")
    assert len(fc.checks) == 2
    r = check_one(str(root / "v1/lib.a"), True, str(root))
    assert (r.members, r.checked_members, r.has_sframe, r.errors, r.crash) == (2, 2, True, [], None)
    assert r.versions == [1, 1]
    assert r.fdes == sum(c.num_fdes for c in fc.checks) > max(c.num_fdes for c in fc.checks)
    assert r.fres == sum(c.num_fres for c in fc.checks) > max(c.num_fres for c in fc.checks)
    assert r.cfi_without_sframe == sum(c.cfi_without_sframe for c in fc.checks) == 2  # gas 2.40 skips `remember`
    assert r.kinds == dict(sum((c.by_kind() for c in fc.checks), Counter())) == {"ra": 1, "cfa": 1}
    # two members of one kind each: their findings summed, kind by kind
    tc = need("host")
    twice = tmp_path
    shutil.copy(root / "v1/frames.o", twice / "frames.o")
    tc.run(["ar", "q", "twice.a", "frames.o", "frames.o"], cwd=str(twice))
    r = check_one(str(twice / "twice.a"), True, str(twice))
    assert (r.members, r.checked_members, r.kinds) == (2, 2, {"ra": 2, "cfa": 2})
    (one,) = check_file(root / "v1/frames.o").checks
    r = check_one(str(root / "v1/frames.o"), False, str(root))
    assert (r.members, r.checked_members, r.versions, r.fdes, r.fres, r.kinds) == (
        0, 1, [1], one.num_fdes, one.num_fres, {"ra": 1, "cfa": 1})


def test_an_elf_file_with_segments_and_no_sframe_is_dropped_unchecked(tmp_path):
    """/bin/true: program headers (PT_LOAD, ...), no .sframe, no PT_GNU_SFRAME."""
    shutil.copy("/bin/true", tmp_path / "true")
    r = check_one(str(tmp_path / "true"), False, str(tmp_path))
    assert (r.has_sframe, r.errors, r.crash, r.kinds) == (False, [], None, {})


def test_the_trees_figures_count_files_and_findings_by_kind(root):
    rep = check_tree(root, jobs=1, timeout=300)
    assert (rep.files, rep.elf_files, rep.archives, rep.jobs, rep.timed_out) == (4, 2, 2, 1, 0)
    findings, files = rep.by_kind()
    # frames.o alone and in lib.a: gas 2.40 and 2.44 ignore `outermost`'s undefined RA (ra), and
    # 2.40 takes `inexpressible`'s rbx-based CFA for an SP-based one (cfa)
    assert findings == Counter(ra=4, cfa=2) and files == Counter(ra=4, cfa=2)
    pk = rep.by_package()
    assert list(pk) == [NO_PACKAGE]  # no dpkg lists: every file is of no package
    assert pk[NO_PACKAGE]["versions"] == Counter({1: 3, 2: 3})  # a section each: 1 + 2 members, twice
    assert sorted(pk[NO_PACKAGE]["files"]) == ["/v1/frames.o", "/v1/lib.a", "/v2/frames.o", "/v2/lib.a"]
    assert 0 < rep.wall < 300
    assert check_tree(root, timeout=300).jobs == os.cpu_count()  # by default: the cores


def test_a_root_that_is_not_a_directory_is_bad_input(root):
    for where in (root / "v1/frames.o", root / "nowhere"):
        with pytest.raises(SFrameError) as e:
            check_tree(where)
        assert str(e.value) == f"file: {where}: not a directory" and e.value.field == "file"


# ------------------------------------------------------------------------------ the walk


def test_the_walk_takes_regular_elf_files_and_archives_and_counts_every_regular_file(root, tmp_path):
    """Symbolic links and small files beside the candidates, in one directory (each once before and
    once after them in creation order): none ends the directory's walk.  An empty archive is its
    8 bytes of magic: a candidate."""
    d = tmp_path / "d"
    d.mkdir()
    elf = (root / "v1/frames.o").read_bytes()
    for i in range(3):
        (d / f"link{i}").symlink_to(root / "v1/frames.o")
        (d / f"small{i}").write_bytes(b"\x7fELF")
        (d / f"obj{i}.o").write_bytes(elf)
    (d / "empty.a").write_bytes(b"!<arch>\n")
    (d / "text").write_bytes(b"not an ELF file\n")
    walked, found = candidates(tmp_path)
    assert walked == 3 + 3 + 1 + 1  # the regular files: small*, obj*, empty.a, text
    assert sorted((os.path.basename(p), a) for p, a in found) == [
        ("empty.a", True), ("obj0.o", False), ("obj1.o", False), ("obj2.o", False)]
    rep = check_tree(tmp_path, jobs=1, timeout=300)
    assert (rep.files, rep.elf_files, rep.archives) == (8, 3, 1)


def test_the_walk_stays_on_the_roots_file_system(root):
    """/dev/shm is a file system of its own inside /dev: an ELF file there is not walked from /dev."""
    require(os.stat("/dev").st_dev != os.stat("/dev/shm").st_dev, "/dev/shm is not a mount of its own")
    fd, path = tempfile.mkstemp(dir="/dev/shm", suffix=".o")
    try:
        os.write(fd, (root / "v1/frames.o").read_bytes())
        os.close(fd)
        assert (path, False) in candidates(Path("/dev/shm"))[1]
        assert [p for p, _ in candidates(Path("/dev"))[1] if p.startswith("/dev/shm/")] == []
    finally:
        os.unlink(path)


# ------------------------------------------------------------------------------ packages


def test_packages_are_found_through_every_usrmerge_link(tmp_path):
    """Each of the six top-level links, relative or absolute; a list whose file names are not
    UTF-8 (dpkg lists bytes); a directory named like a list, read by no one."""
    r = tmp_path
    for top, target in (("bin", "usr/bin"), ("sbin", "/usr/sbin"), ("lib", "usr/lib"), ("lib32", "usr/lib32"),
                        ("lib64", "/usr/lib64"), ("libx32", "usr/libx32")):
        (r / "usr" / top).mkdir(parents=True)
        (r / top).symlink_to(target)
    info = r / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    (info / "a-directory.list").mkdir()  # sorted first: the lists after it are still read
    (info / "pkg.list").write_text("".join(f"/{top}/f-{top}\n" for top in
                                           ("bin", "sbin", "lib", "lib32", "lib64", "libx32")) + "/lib\n")
    (info / "latin.list").write_bytes(b"/usr/lib/caf\xe9.so\n")
    got = dpkg_packages(r)
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        assert got[f"/{top}/f-{top}"] == got[f"/usr/{top}/f-{top}"] == "pkg", top
    assert got["/usr/lib/caf\ufffd.so"] == "latin"
    assert "/usr/lib/" not in got and not [k for k in got if not k.startswith("/")]


# ------------------------------------------------------------------------------ the bound


def test_files_not_done_within_the_bound_are_counted_and_the_run_ends_at_it(root, tmp_path):
    """Every candidate is a result or timed out, never both, never neither.  An archive of 3,000
    members (a minute of checking on a loaded 2-core machine) under a bound of one second: the run
    ends within seconds of it -- its worker ended, its queued files cancelled."""
    tc = need("host")
    shutil.copy(root / "v1/frames.o", tmp_path / "frames.o")
    tc.run(["sh", "-c", "yes frames.o | head -3000 | xargs ar q big.a"], cwd=str(tmp_path))
    for i in range(6):
        shutil.copy(root / "v1/frames.o", tmp_path / f"f{i}.o")
    (tmp_path / "frames.o").unlink()
    rep = check_tree(tmp_path, jobs=1, timeout=1.0)
    assert rep.timed_out >= 1 and rep.timed_out + len(rep.results) == 7
    assert not [r for r in rep.results if r.crash or r.errors]
    assert rep.wall < 1.0 + 15  # the biggest file first: it alone takes far longer
    # and no worker is left on it (it would hold the interpreter's exit until it is done)
    for _ in range(100):
        if not multiprocessing.active_children():
            break
        time.sleep(0.1)
    assert multiprocessing.active_children() == []
    text = format_tree(rep)
    assert f"  timed out: {rep.timed_out} files not checked within the bound" in text.splitlines()
