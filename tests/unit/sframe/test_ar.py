"""harness/sframe/ar.py against binutils' own ``ar``, in each toolchain root.

Archives are written by the root's ``ar`` from members of odd and even sizes (gas output and
text files, short and long names: the ``//`` table); ``ar t`` lists them, ``ar tO`` gives each
member's data offset and ``ar x`` extracts them, and the reader must say the same.  Where the
reader refuses an archive, ``ar`` refuses it too: a long-name offset at the end of the name
table is "malformed archive" to bfd (``index >= extended_names_size``), one before it is read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.images.errors import ImageError
from harness.sframe import SFrameError
from harness.sframe.ar import HEADER_SIZE, iter_members
from harness.unwind.sframe_check import check_file
from tests.support.gating import require
from tests.support.toolchains import need

CASES_DIR = Path(__file__).resolve().parents[3] / "guest_programs" / "sframe_cases"
TOOLCHAINS = ("host", "trixie", "sid")
LONG = "a_member_name_longer_than_fifteen.txt"
# (name, contents): odd sizes between the objects, so that every header after the first odd
# member sits where the padding byte put it; the last member odd too (padding at the very end)
TEXTS = {"odd.txt": b"abc", LONG: b"x", "even.txt": b"abcd", "tail.txt": b"12345"}
ORDER = ("odd.txt", "frames.o", LONG, "drap.o", "even.txt", "tail.txt")


@dataclass
class Archive:
    path: Path  # a copy on the host
    listed: list[str]  # `ar t`
    offsets: dict[str, int]  # `ar tO`: member name -> offset of its data
    extracted: dict[str, bytes]  # `ar x`: member name -> bytes


def _archive(tc_name: str, dest: Path, members: dict[str, bytes], order=ORDER) -> Archive:
    """``ar rc lib.a`` of ``members`` in ``order`` by the root's ``ar``, and what its ``ar t``,
    ``ar tO`` and ``ar x`` say of it."""
    tc = need(tc_name)
    outer, inner = tc.workdir("sframe-ar")
    try:
        for name in order:
            (outer / name).write_bytes(members[name])
        tc.run(["ar", "rc", "lib.a", *order], cwd=inner)
        listed = tc.run(["ar", "t", "lib.a"], cwd=inner).stdout.splitlines()
        offsets = {}
        for line in tc.run(["ar", "tO", "lib.a"], cwd=inner).stdout.splitlines():
            name, off = line.rsplit(" ", 1)
            offsets[name] = int(off, 16)
        (outer / "x").mkdir()
        tc.run(["sh", "-c", "cd x && ar x ../lib.a"], cwd=inner)
        extracted = {p.name: p.read_bytes() for p in (outer / "x").iterdir()}
        shutil.copy(outer / "lib.a", dest / "lib.a")
    finally:
        shutil.rmtree(outer, ignore_errors=True)
    return Archive(dest / "lib.a", listed, offsets, extracted)


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict[str, bytes]:
    """frames.o and drap.o as the host's gas writes them (SFrame V1), and the text members."""
    tc = need("host")
    d = tmp_path_factory.mktemp("ar-objects")
    for case in ("frames", "drap"):
        tc.run(["as", "--gsframe", str(CASES_DIR / f"{case}.s"), "-o", str(d / f"{case}.o")])
    return {**TEXTS, **{f"{c}.o": (d / f"{c}.o").read_bytes() for c in ("frames", "drap")}}


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_members_of_odd_size_are_read_whole_where_ar_put_them(objects, tc_name, tmp_path):
    """Each member's data starts on an even offset: after an odd-sized member ``ar`` writes a
    padding byte, which is no part of the member and not the next header.  Names, order, data
    offsets and bytes are what the root's ``ar t``, ``ar tO`` and ``ar x`` say."""
    assert any(len(objects[n]) % 2 for n in ORDER[:-1])  # the shape: odd members before others
    a = _archive(tc_name, tmp_path, objects)
    members = list(iter_members(a.path))
    assert [m.name for m in members] == a.listed == list(ORDER)
    assert {m.name: m.offset + HEADER_SIZE for m in members} == a.offsets
    assert {m.name: m.data for m in members} == a.extracted == {n: objects[n] for n in ORDER}
    # the checker reads the objects after the odd members, and only those
    fc = check_file(a.path)
    assert fc.errors == [] and fc.members == len(ORDER)
    assert [c.path for c in fc.checks] == [f"{a.path}(frames.o)", f"{a.path}(drap.o)"]
    assert fc.without_sframe == ["odd.txt", LONG, "even.txt", "tail.txt"]


def _with_long_name_offset(a: Archive, offset: int) -> bytes:
    """``a``'s bytes with the long-named member's ``/N`` name field set to ``/offset``."""
    data = bytearray(a.path.read_bytes())
    header = a.offsets[LONG] - HEADER_SIZE
    assert data[header:header + 3] == b"/0 "  # the first entry of the // table
    data[header:header + 16] = f"/{offset}".ljust(16).encode()
    return bytes(data)


def _ar_t(tc_name: str, data: bytes) -> str | None:
    """``ar t`` of ``data`` by the root's ``ar``: its listing, or None when it refuses the archive."""
    tc = need(tc_name)
    outer, inner = tc.workdir("sframe-ar-t")
    try:
        (outer / "lib.a").write_bytes(data)
        try:
            return tc.run(["ar", "t", "lib.a"], cwd=inner).stdout
        except ImageError as exc:
            assert "malformed archive" in str(exc), exc
            return None
    finally:
        shutil.rmtree(outer, ignore_errors=True)


@pytest.mark.parametrize("tc_name", ["host", "sid"])
def test_a_long_name_offset_at_the_end_of_the_name_table_is_refused_as_ar_refuses_it(objects, tc_name, tmp_path):
    a = _archive(tc_name, tmp_path, objects)
    table = next(m for m in _raw_members(a.path.read_bytes()) if m[0] == "//")
    size = table[1]
    assert size > len(LONG)
    # the table's last byte: inside it, read by both (the name it gives is the empty one)
    inside = _with_long_name_offset(a, size - 1)
    assert _ar_t(tc_name, inside) is not None
    (tmp_path / "inside.a").write_bytes(inside)
    assert [m.name for m in iter_members(tmp_path / "inside.a")][2] == ""
    # its end and past it: refused by both, the offset and the table's size named
    for offset in (size, size + 1):
        bad = _with_long_name_offset(a, offset)
        assert _ar_t(tc_name, bad) is None
        (tmp_path / "bad.a").write_bytes(bad)
        with pytest.raises(SFrameError) as e:
            list(iter_members(tmp_path / "bad.a"))
        header = a.offsets[LONG] - HEADER_SIZE
        assert str(e.value) == (f"archive at byte {header:#x}: {tmp_path / 'bad.a'}: member at {header:#x}: long "
                                f"name offset {offset} is past the name table ({size} bytes)")
        assert (e.value.field, e.value.offset) == ("archive", header)


def _raw_members(data: bytes, thin: bool = False) -> list[tuple[str, int, int]]:
    """(raw name, size, header offset) of each header, walked by the format's own rule
    (independently of ar.py; a thin archive holds the data of its name table and index only)."""
    out, pos = [], 8
    while pos + HEADER_SIZE <= len(data):
        name, size = data[pos:pos + 16].decode().rstrip(" "), int(data[pos + 48:pos + 58])
        out.append((name, size, pos))
        pos += HEADER_SIZE + (size if not thin or name in ("/", "//") else 0)
        pos += pos & 1
    return out


# ------------------------------------------------------------------------------ malformed archives


@pytest.fixture(scope="module")
def gnu(objects, tmp_path_factory) -> Archive:
    """The host ar's archive of ORDER (a // table, odd members)."""
    return _archive("host", tmp_path_factory.mktemp("ar-gnu"), objects)


def _header(a: Archive, name: str) -> int:
    return a.offsets[name] - HEADER_SIZE


def _error_of(data: bytes, where: Path) -> SFrameError:
    where.write_bytes(data)
    with pytest.raises(SFrameError) as e:
        list(iter_members(where))
    assert e.value.field == "archive"
    return e.value


def _set(data: bytes, at: int, field: bytes, width: int) -> bytes:
    out = bytearray(data)
    out[at:at + width] = field.ljust(width)
    return bytes(out)


def test_an_archive_without_the_magic_is_refused(gnu, tmp_path):
    p = tmp_path / "lib.a"
    e = _error_of(b"!<arch>x" + gnu.path.read_bytes()[8:], p)
    assert str(e) == f"archive at byte 0x0: {p}: not an ar archive (no !<arch> magic)" and e.offset == 0


def test_a_header_cut_short_is_refused_where_it_starts(gnu, tmp_path):
    data = gnu.path.read_bytes()
    h = _header(gnu, LONG)
    p = tmp_path / "lib.a"
    e = _error_of(data[:h + 30], p)
    assert str(e) == f"archive at byte {h:#x}: {p}: member header at {h:#x} runs past the end ({h + 30:#x})"


def test_a_header_without_its_terminator_is_refused_at_the_terminator(gnu, tmp_path):
    h = _header(gnu, LONG)
    p = tmp_path / "lib.a"
    e = _error_of(_set(gnu.path.read_bytes(), h + 58, b"x\n", 2), p)
    assert str(e) == f"archive at byte {h + 58:#x}: {p}: member header at {h:#x} lacks its `\\n terminator"
    assert _ar_t("host", _set(gnu.path.read_bytes(), h + 58, b"x\n", 2)) is None  # bfd: malformed archive


# bfd refuses the blank and the negative size too; it reads "3x", "+3" and "1_0" by sscanf's
# prefix (3, 3, 1): this reader takes decimal digits only
@pytest.mark.parametrize("size", [b"3x", b"3X", b"3\t", b"", b"-60", b"-1000", b"+3", b"1_0", b"3 3", b"\xb3"])
def test_a_size_that_is_not_decimal_digits_is_refused(gnu, tmp_path, size):
    """A size of -60 kept the reader on one header for ever: a signed size is no size."""
    h = _header(gnu, LONG)
    data = _set(gnu.path.read_bytes(), h + 48, size, 10)
    p = tmp_path / "lib.a"
    e = _error_of(data, p)
    assert str(e) == (f"archive at byte {h + 48:#x}: {p}: member header at {h:#x}: size {size.ljust(10)!r} is not "
                      f"a number")
    if size in (b"", b"-60"):
        assert _ar_t("host", data) is None


def test_a_member_past_the_end_is_refused_at_its_size(gnu, tmp_path):
    data = gnu.path.read_bytes()
    h = _header(gnu, LONG)
    p = tmp_path / "lib.a"
    e = _error_of(_set(data, h + 48, b"999999", 10), p)
    assert str(e) == (f"archive at byte {h + 48:#x}: {p}: member at {h:#x} of 999999 bytes runs past the end "
                      f"({len(data):#x})")


def test_a_long_name_in_an_archive_without_a_name_table_is_refused(objects, tmp_path):
    a = _archive("host", tmp_path, objects, order=("odd.txt", "even.txt"))
    assert not [m for m in _raw_members(a.path.read_bytes()) if m[0] == "//"]
    h = _header(a, "odd.txt")
    p = tmp_path / "named.a"
    e = _error_of(_set(a.path.read_bytes(), h, b"/0", 16), p)
    assert str(e) == f"archive at byte {h:#x}: {p}: member at {h:#x}: long name offset 0 is past the name table (0 bytes)"


@pytest.mark.parametrize("tail", [b"\n", b"\n\n\n"])
def test_newlines_after_the_last_member_are_padding(gnu, tmp_path, tail):
    p = tmp_path / "lib.a"
    p.write_bytes(gnu.path.read_bytes() + tail)
    assert [m.name for m in iter_members(p)] == list(ORDER)


@pytest.mark.parametrize("tail", [b"\nX", b" \n", b"X"])
def test_other_bytes_after_the_last_member_are_a_header_cut_short(gnu, tmp_path, tail):
    """(bfd ignores whatever is shorter than a header at the end; this reader names it.)"""
    data = gnu.path.read_bytes()
    p = tmp_path / "lib.a"
    e = _error_of(data + tail, p)
    assert str(e) == (f"archive at byte {len(data):#x}: {p}: member header at {len(data):#x} runs past the end "
                      f"({len(data) + len(tail):#x})")


@pytest.mark.parametrize("name", [b"o12", b"a1\t", b"bX"])
def test_a_short_name_without_the_gnu_slash_is_the_name_as_it_stands(objects, tmp_path, name):
    """Other ar's write a short name without GNU's slash: bfd reads it up to the padding."""
    a = _archive("host", tmp_path, objects, order=("odd.txt", "even.txt"))
    data = _set(a.path.read_bytes(), _header(a, "odd.txt"), name, 16)
    p = tmp_path / "named.a"
    p.write_bytes(data)
    assert [m.name for m in iter_members(p)] == _ar_t("host", data).splitlines() == [name.decode(), "even.txt"]
    assert [m.data for m in iter_members(p)] == [b"abc", b"abcd"]


def test_a_long_name_ends_at_its_newline_or_at_the_tables_end(objects, tmp_path):
    a = _archive("host", tmp_path, objects, order=("odd.txt", LONG, "even.txt"))
    data = a.path.read_bytes()
    start = data.index(b"//") + HEADER_SIZE  # the // table's first byte
    assert data[start:start + len(LONG) + 2] == LONG.encode() + b"/\n"
    # its terminator "/\n" and the table's padding overwritten: the name runs to the table's end
    size = int(data[start - HEADER_SIZE + 48:start - HEADER_SIZE + 58])
    cut = bytearray(data)
    cut[start + len(LONG):start + size] = b"Z" * (size - len(LONG))
    p = tmp_path / "cut.a"
    p.write_bytes(bytes(cut))
    assert [m.name for m in iter_members(p)][1] == LONG + "Z" * (size - len(LONG))
    # a table whose first byte is its first entry's newline: the name at 0 is empty
    empty = bytearray(data)
    empty[start] = ord("\n")
    p.write_bytes(bytes(empty))
    assert [m.name for m in iter_members(p)][1] == ""


# ------------------------------------------------------------------------------ BSD names, thin archives


def _listing(argv: list[str], cwd: Path) -> list[str]:
    """The member names a tool lists, its bytes decoded as the reader decodes names."""
    out = subprocess.run(argv, cwd=cwd, check=True, timeout=60, capture_output=True).stdout
    return out.decode("utf-8", "replace").splitlines()


def _llvm_ar_bsd(files: dict[bytes, bytes], where: Path) -> tuple[Path, list[str]]:
    """``llvm-ar rc --format=bsd`` of ``files`` (names as bytes) and its ``llvm-ar t``."""
    require(shutil.which("llvm-ar") is not None, "llvm-ar is not installed (llvm)")
    where.mkdir()
    for name, data in files.items():
        (where / os.fsdecode(name)).write_bytes(data)
    names = [os.fsdecode(n) for n in files]
    subprocess.run(["llvm-ar", "rc", "--format=bsd", "lib.a", *names], cwd=where, check=True, timeout=60)
    return where / "lib.a", _listing(["llvm-ar", "t", "lib.a"], where)


def test_bsd_names_are_read_as_llvm_ar_and_ar_list_them(objects, tmp_path):
    files = {b"odd.txt": b"abc", b"notes.X": b"x", b"caf\xe9.txt": b"12345", b"frames.o": objects["frames.o"],
             LONG.encode(): b"abcd", b"empty": b""}  # the last: a member that is its name alone
    lib, listed = _llvm_ar_bsd(files, tmp_path / "bsd")
    assert all(h.startswith("#1/") for h, _, _ in _raw_members(lib.read_bytes()))  # every name in the data
    need("host")
    members = list(iter_members(lib))
    assert [m.name for m in members] == listed == ["odd.txt", "notes.X", "caf\ufffd.txt", "frames.o", LONG, "empty"]
    assert int(_raw_members(lib.read_bytes())[-1][0][3:]) == _raw_members(lib.read_bytes())[-1][1]
    # its symbol index (frames.o has symbols) is "#1/12" and "__.SYMDEF" in the data: no member to
    # llvm-ar, which wrote it; bfd lists it as one
    assert _listing(["ar", "t", "lib.a"], lib.parent) == ["__.SYMDEF", *listed]
    assert [m.data for m in members] == list(files.values())
    (r,) = check_file(lib).checks
    assert r.path == f"{lib}(frames.o)"


@pytest.mark.parametrize("name", [b"#1/x", b"#1/-3", b"#1/ 1", b"#1/999"])
def test_a_bsd_name_that_is_no_length_within_the_member_is_refused(tmp_path, name):
    lib, _ = _llvm_ar_bsd({b"odd.txt": b"abc", b"even.txt": b"abcd"}, tmp_path / "bsd")
    data = lib.read_bytes()
    h = data.index(b"#1/", 8 + HEADER_SIZE)  # the second member's header
    e = _error_of(_set(data, h, name, 16), tmp_path / "bad.a")
    assert str(e) == f"archive at byte {h:#x}: {tmp_path / 'bad.a'}: member at {h:#x}: bad BSD name {name.decode()!r}"


def test_a_gnu_long_name_that_is_not_utf8_is_read_with_replacement(objects, tmp_path):
    name = b"a_long_name_caf\xe9_more_than_15.txt"
    (tmp_path / os.fsdecode(name)).write_bytes(b"abc")
    (tmp_path / "even.txt").write_bytes(b"abcd")
    need("host")
    subprocess.run(["ar", "rc", "lib.a", os.fsdecode(name), "even.txt"], cwd=tmp_path, check=True, timeout=60)
    assert [m.name for m in iter_members(tmp_path / "lib.a")] == _listing(["ar", "t", "lib.a"], tmp_path) == [
        "a_long_name_caf\ufffd_more_than_15.txt", "even.txt"]


def test_a_thin_archive_s_missing_member_and_a_bsd_name_in_one_are_refused(objects, tmp_path):
    tc = need("host")
    for name in ("odd.txt", "even.txt"):
        (tmp_path / name).write_bytes(objects[name])
    tc.run(["ar", "rcT", "thin.a", "odd.txt", "even.txt"], cwd=str(tmp_path))
    thin = tmp_path / "thin.a"
    assert [m.data for m in iter_members(thin)] == [b"abc", b"abcd"]
    data = thin.read_bytes()
    h = _raw_members(data, thin=True)[-1][2]
    (tmp_path / "even.txt").unlink()
    e = _error_of(data, thin)
    assert str(e) == f"archive at byte {h:#x}: {thin}: thin member even.txt: No such file or directory"
    # a BSD name (llvm-ar has no thin BSD form): its name would be in data a thin archive lacks
    e = _error_of(_set(data, h, b"#1/8", 16), tmp_path / "bsd-thin.a")
    assert str(e) == f"archive at byte {h:#x}: {tmp_path / 'bsd-thin.a'}: member at {h:#x}: BSD name '#1/8' in a thin archive"


def test_a_name_of_a_slash_and_a_latin1_digit_is_a_name_not_a_long_name_offset(objects, tmp_path):
    """'/²': Latin-1 has digits that str.isdigit() takes and int() refuses (it raised ValueError, a
    crash of ``sframe check --tree``); only ASCII digits make a long-name offset."""
    a = _archive("host", tmp_path, objects, order=("odd.txt", "even.txt"))
    p = tmp_path / "named.a"
    p.write_bytes(_set(a.path.read_bytes(), _header(a, "odd.txt"), b"/\xb2", 16))
    assert [(m.name, m.data) for m in iter_members(p)] == [("/\xb2", b"abc"), ("even.txt", b"abcd")]
