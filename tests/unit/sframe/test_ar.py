"""harness/sframe/ar.py against binutils' own ``ar``, in each toolchain root.

Archives are written by the root's ``ar`` from members of odd and even sizes (gas output and
text files, short and long names: the ``//`` table); ``ar t`` lists them, ``ar tO`` gives each
member's data offset and ``ar x`` extracts them, and the reader must say the same.  Where the
reader refuses an archive, ``ar`` refuses it too: a long-name offset at the end of the name
table is "malformed archive" to bfd (``index >= extended_names_size``), one before it is read.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.images.errors import ImageError
from harness.sframe import SFrameError
from harness.sframe.ar import HEADER_SIZE, iter_members
from harness.unwind.sframe_check import check_file
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


def _raw_members(data: bytes) -> list[tuple[str, int]]:
    """(raw name, size) of each header, walked by the format's own rule (independently of ar.py)."""
    out, pos = [], 8
    while pos + HEADER_SIZE <= len(data):
        name, size = data[pos:pos + 16].decode().rstrip(" "), int(data[pos + 48:pos + 58])
        out.append((name, size))
        pos += HEADER_SIZE + size + (size & 1)
    return out
