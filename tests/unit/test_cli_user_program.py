"""harness run --program: arguments that cannot work exit 2 at once, before any boot (no guest
is started here: each case fails before the session would)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.cli import main
from tests.support.gating import require


def _run(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("argv, text", [
    (["run", "--args", "-1", "--smp", "2"], "--args goes after --program"),
    (["run", "--lib", "/usr/lib/x86_64-linux-gnu/libz.so.1"], "--lib goes with --program"),
    (["run", "--program", "/usr/bin/xz", "--smp", "17"], "--smp 17: between 1 and 16"),
    (["run", "--program", "/usr/bin/xz", "--mem", "64"], "--mem 64: at least 128"),
    (["run", "--program", "/lib/x86_64-linux-gnu/libc.so.6"], "a shared library (DT_SONAME libc.so.6)"),
    (["run", "--program", "/nonexistent/prog"], "no such file"),
])
def test_arguments_that_cannot_work_exit_2_in_one_line(argv, text, capsys):
    rc, err = _run(argv, capsys)
    assert rc == 2 and text in err and len(err.strip().splitlines()) == 1, err


def test_an_object_file_is_not_a_program(tmp_path, capsys):
    require(shutil.which("gcc") is not None, "gcc is not installed")
    (tmp_path / "x.c").write_text("int main(void) { return 0; }\n")
    subprocess.run(["gcc", "-c", "-o", str(tmp_path / "x.o"), str(tmp_path / "x.c")], check=True)
    rc, err = _run(["run", "--program", str(tmp_path / "x.o")], capsys)
    assert rc == 2 and "an object file (ET_REL), not a program" in err
