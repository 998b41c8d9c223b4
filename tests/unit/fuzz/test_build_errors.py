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

from harness.fuzz.build import BuildConfig, build_source
from harness.fuzz.finding import build_failed
from harness.fuzz.render import render
from harness.fuzz.shape import Func, Shape
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
