"""What a failed build's signature keeps of the compiler's or the linker's words: the first error
line without its numbers and paths, so that one defect met at another line, size or directory is
one signature, and two defects are two.

The builds are real: generated programs with one line more, compiled and linked by the host's
and sid's gcc and ld.bfd; the signatures are the campaign's (``build_failed``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from harness.fuzz.build import BuildConfig, MatrixError, build, build_source, toolchain
from harness.fuzz.finding import build_failed
from harness.fuzz.render import render
from harness.fuzz.shape import Func, Shape
from harness.images.programs import cflags
from tests.support.toolchains import need

SHAPES = (Shape((Func(),)), Shape((Func("fp", callees=(1,)), Func("nofp")), ))  # two lengths: two line numbers


def _failed(tc: str, shape: Shape, extra: str, dest: Path):
    need(tc)
    built = build_source(shape, render(shape) + extra, "prog.c", BuildConfig(tc, "-O1", True, True, False, "bfd"),
                         dest)
    assert not built.ok and (dest / "build-error.txt").is_file()
    (f,) = build_failed(built)
    return built, f.signature


@pytest.mark.parametrize("tc", ["host", "sid"])
def test_one_compile_error_at_other_lines_and_sizes_is_one_signature_without_numbers(tc, tmp_path):
    sigs = []
    for i, (shape, n) in enumerate(zip(SHAPES, (3, 24), strict=True)):
        built, sig = _failed(tc, shape, f"\nint fz_bad __attribute__((aligned({n}))) = 1;\n", tmp_path / str(i))
        text = (tmp_path / str(i) / "build-error.txt").read_text()
        assert f"requested alignment ‘{n}’ is not a positive power of 2" in text, text  # what gcc said
        sigs.append(sig)
    assert sigs[0] == sigs[1]
    assert sigs[0].kind == "build-failed" and sigs[0].detail == "requested alignment ‘#’ is not a positive power of #"
    assert not re.search(r"\d", sigs[0].detail)


@pytest.mark.parametrize("tc", ["host", "sid"])
def test_a_missing_header_anywhere_is_one_signature_and_another_defect_another(tc, tmp_path):
    sigs = [_failed(tc, SHAPES[0], f'\n#include "{where}/fz.h"\n', tmp_path / str(i))[1]
            for i, where in enumerate(("/nowhere/dir42", "/elsewhere/3/x.y"))]
    assert sigs[0] == sigs[1] and sigs[0].detail == "#: No such file or directory"
    link = _failed(tc, SHAPES[0], "\nextern int fz_missing_7(void); int fz_use(void) { return fz_missing_7(); }\n",
                   tmp_path / "link")[1]
    assert link.detail == "ld returned # exit status" and link != sigs[0]  # collect2's line: the first "error"


@pytest.mark.parametrize("tc", ["host", "sid"])
def test_the_first_error_line_is_kept_whole_and_cut_at_160_characters(tc, tmp_path):
    """#error's own text (no number, no path): what follows the line's first "error" is kept,
    a later "error" in it too; a long one is cut to 160 characters."""
    words = "fz_error_x is an error of X"
    _, sig = _failed(tc, SHAPES[0], f"\n#error {words}\n", tmp_path / "short")
    assert sig.detail == f"#error {words}"
    long = "fz " + "y" * 300
    _, sig = _failed(tc, SHAPES[0], f"\n#error {long}\n", tmp_path / "long")
    assert sig.detail == f"#error {long}"[:160]


@pytest.mark.parametrize("field, value, message", [
    ("toolchain", "buster", "unknown toolchain 'buster'; known: host, trixie, sid, sid-gcc11, sid-gcc12, sid-gcc13, "
                          "sid-gcc14, sid-gcc15, sid-clang22, sid-clang23, sid-clang22-gas, sid-clang23-gas"),
    ("opt", "-Og", "unknown optimisation '-Og'; known: -O0, -O1, -O2, -O3, -Os"),
    ("linker", "ld.gold", "unknown linker 'ld.gold'; known: bfd, gold, mold, lld"),
])
def test_a_build_the_matrix_does_not_know_is_bad_usage_naming_the_known_ones(field, value, message):
    with pytest.raises(MatrixError) as e:
        BuildConfig(**{field: value})
    assert str(e.value) == message and e.value.exit_code == 2


@pytest.mark.parametrize("tc, static", [("host", True), ("sid", False), ("trixie", True)])
def test_a_build_records_what_it_ran_and_links_as_its_flags_say(tc, static, tmp_path):
    """The compile step gets the compile flags, the link step the link flags (-static, -Wl,...);
    the commands recorded are the ones run, each in the root named; the Built names the program's
    shape, source, toolchain versions; its directory is made with its parents."""
    need(tc)
    shape = SHAPES[1]
    config = BuildConfig(tc, "-O2", True, True, static, "bfd")
    dest = tmp_path / "a" / "b"
    built = build(shape, config, dest)
    assert built.ok, built.error
    root = toolchain(tc)
    assert (built.shape, built.config, built.source, built.source_name) == (shape, config, render(shape), "prog.c")
    assert (built.binutils, built.gcc, built.link_toolchain) == (root.binutils_version, root.gcc_version, tc)
    assert (dest / "prog.c").read_text() == built.source and built.binary == dest / "prog"
    flags = cflags(root, config.variant)
    link = [f for f in flags if f == "-static" or f.startswith("-Wl,")]
    compile_flags = [f for f in flags if f not in link]
    assert built.commands == [f"[{tc}] gcc {' '.join(compile_flags)} -c prog.c -o prog.o",
                              f"[{tc}] gcc {' '.join(compile_flags + link)} -fuse-ld=bfd -pthread -o prog prog.o"]
    assert ("-static" in link) == static and "-O2" in compile_flags
    with open(built.binary, "rb") as f:
        interp = [s for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_INTERP"]
        if static:
            assert interp == []
        else:
            assert interp[0].get_interp_name() == next(f for f in link if "--dynamic-linker=" in f).split("=", 1)[1]


def test_gas_s_own_error_line_is_the_signature_not_the_drivers(tmp_path):
    """clang with gas (``-fno-integrated-as``): gas's "Error: unassigned file number 1" comes
    before the driver's "assembler command failed"; the signature keeps gas's (the bigframe
    shape's clang defect, docs/findings.md row 9)."""
    from tests.unit.fuzz.test_build import BIG_SHAPE
    need("sid-clang22-gas")
    built = build(BIG_SHAPE, BuildConfig("sid-clang22-gas", "-O0", True, True, False, "bfd"), tmp_path)
    assert not built.ok and built.error == "unassigned file number #", built.error
