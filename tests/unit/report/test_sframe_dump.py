"""``harness sframe dump`` against its oracle, the toolchain's own ``objdump --sframe``, byte for
byte (trailing blanks included), on every guest program the tests build: the host (binutils 2.40,
SFrame V1), trixie (2.44, V2) and sid (2.47, V3) toolchains, with and without frame pointers,
static and dynamic.  The objdump runs inside its toolchain root on copies of the same binaries,
once per toolchain for all of them (each file's text is the one objdump prints for it alone:
test_one_objdump_for_many_files_prints_each_as_alone), so the 168 comparisons cost 3 root runs.

Measured when this test was written: all 168 dumps equal objdump's text.  Where a dump differs,
the failure shows the first lines that differ, objdump's and ours.
"""

from __future__ import annotations

import difflib
import functools
import shutil

import pytest

from harness.cli import main
from harness.images.programs import SOURCES, Variant
from tests.support.tiers import unit_share
from tests.support.toolchains import need, program

TOOLCHAINS = ("host", "trixie", "sid")
VERSION = {"host": 1, "trixie": 2, "sid": 3}
PROGRAMS = sorted(p.stem for p in SOURCES.glob("*.c"))
VARIANTS = [Variant(frame_pointers=fp, static=st) for fp in (True, False) for st in (True, False)]
CASES = [(tc, prog, v) for tc in TOOLCHAINS for prog in PROGRAMS for v in VARIANTS]


def relative(prog: str, variant: Variant) -> str:
    """The name objdump and our dump are given: VARIANT/PROGRAM (a program's file name is the same
    in every variant)."""
    return f"{variant.tag}/{prog}"


def objdump_run(tc_name: str, files: dict[str, object]) -> str:
    """``objdump --sframe NAME...`` run by the toolchain's own binutils inside its root, on copies
    of ``files`` (relative name -> path) placed under their relative names."""
    tc = need(tc_name)
    outer, inner = tc.workdir(f"sframe-dump-objdump-{len(files)}")
    try:
        for name, path in files.items():
            (outer / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, outer / name)
        return tc.run(["objdump", "--sframe", *files], cwd=inner, timeout=600).stdout
    finally:
        shutil.rmtree(outer, ignore_errors=True)


@functools.cache
def objdump_texts(tc_name: str) -> dict[str, str]:
    """Relative name -> objdump's text for that file, for every program and variant, from one run."""
    files = {relative(prog, v): program(prog, tc_name, v).path for prog in PROGRAMS for v in VARIANTS}
    text = objdump_run(tc_name, files)
    heads = {name: text.find(f"\n{name}:     file format ") for name in files}
    assert all(at >= 0 for at in heads.values()), [n for n, at in heads.items() if at < 0]
    order = sorted(files, key=heads.get)
    ends = [heads[n] for n in order[1:]] + [len(text)]
    return {name: text[heads[name]:end] for name, end in zip(order, ends, strict=True)}


def first_difference(theirs: str, ours: str) -> str:
    diff = difflib.unified_diff(theirs.splitlines(keepends=True), ours.splitlines(keepends=True),
                                "objdump --sframe", "harness sframe dump", n=1)
    return "".join(list(diff)[:24])


# one binary in eight in the unit tier, all of them in the deep tier (tests/support/tiers.py)
@pytest.mark.parametrize("tc_name,prog,variant", unit_share(CASES, 8, [f"{t}-{p}-{v.tag}" for t, p, v in CASES]))
def test_dump_equals_the_toolchains_objdump(tc_name, prog, variant, tmp_path, capsys, monkeypatch):
    p = program(prog, tc_name, variant)
    name = relative(prog, variant)
    theirs = objdump_texts(tc_name)[name]
    assert f"Version: SFRAME_VERSION_{VERSION[tc_name]}\n" in theirs
    (tmp_path / name).parent.mkdir(parents=True)
    shutil.copy(p.path, tmp_path / name)
    monkeypatch.chdir(tmp_path)  # objdump prints the file name as given
    rc = main(["sframe", "dump", name])
    ours, err = capsys.readouterr()
    assert rc == 0 and err == ""
    assert ours == theirs, first_difference(theirs, ours)


@pytest.mark.parametrize("tc_name", TOOLCHAINS)
def test_one_objdump_for_many_files_prints_each_as_alone(tc_name):
    """What the test above relies on: two files' text from one objdump run is each file's text
    from a run of its own."""
    texts = objdump_texts(tc_name)
    for prog, variant in (("callchain", VARIANTS[0]), ("sframe_odd", VARIANTS[3])):
        name = relative(prog, variant)
        assert texts[name] == objdump_run(tc_name, {name: program(prog, tc_name, variant).path})
