"""Every exit code inside 0-3 (cli.contract_code, shell --batch's script_exit), a batch script
compiled before any boot, and inputs refused before a run directory is made."""

from __future__ import annotations

import pytest

from harness.cli import contract_code, main
from harness.commands.shell import compile_batch, script_exit


@pytest.mark.parametrize("value, code", [
    (None, 0), (0, 0), (1, 1), (2, 2), (3, 3), (False, 0), (True, 1),
    (7, 1), (-9, 1), (255, 1), (4, 1), ("a message", 1), (3.0, 1),
])
def test_contract_code(value, code):
    assert contract_code(value) == code


@pytest.mark.parametrize("value, code", [(None, 0), (0, 0), (7, 1), (2, 1), (3, 1), (1, 1), ("bye", 1)])
def test_a_batch_script_s_exit_maps_to_0_or_1(value, code, capsys):
    assert script_exit(value) == code
    assert capsys.readouterr().err == ("bye\n" if value == "bye" else "")  # printed as Python does


def test_a_command_s_own_sys_exit_stays_inside_the_contract(monkeypatch, capsys):
    from harness.commands import load

    def exits(args):
        raise SystemExit(7)

    monkeypatch.setattr(load()["doctor"], "func", exits)
    assert main(["doctor"]) == 1
    monkeypatch.setattr(load()["doctor"], "func", lambda args: 42)
    assert main(["doctor"]) == 1


def test_a_syntax_error_in_a_batch_script_is_exit_2_before_any_boot(tmp_path, capsys, monkeypatch):
    script = tmp_path / "bad.py"
    script.write_text("print('x'\n")

    def no_boot(*a, **k):
        raise AssertionError("a guest was booted for a script that does not compile")

    monkeypatch.setattr("harness.commands.shell.Session", no_boot)
    assert main(["shell", "--batch", str(script)]) == 2
    err = capsys.readouterr().err
    assert "SyntaxError" in err and "bad.py" in err and "Traceback" not in err
    good = tmp_path / "good.py"
    good.write_text("x = 1\n")
    assert compile_batch(str(good)).co_filename == str(good)


@pytest.mark.parametrize("argv", [
    ["run", "fp-spin", "--kernel", "no-such-kernel"],
    ["run", "fp-spin", "--kernel-path", "/nonexistent/bzImage"],
    ["run", "fp-spin", "--smp", "99"],
    ["run", "fp-spin", "--mem", "1"],
    ["run", "fp-spin", "--junit-xml", "/nonexistent/dir/junit.xml"],
    ["run", "fp-spin", "--junit-xml", "."],
    ["run", "--program", "/bin/true", "--kernel-path", "/nonexistent/bzImage"],
    ["run", "fp-spin", "--kernel-diff", "--smp", "99"],
])
def test_an_input_error_leaves_no_run_directory(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # runs/TIMESTAMP would go here
    monkeypatch.setattr("harness.commands.run.Session", lambda *a, **k: pytest.fail("booted for bad input"))
    assert main(argv) == 2
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
