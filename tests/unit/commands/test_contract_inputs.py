"""Every exit code inside 0-3 (cli.contract_code, shell --batch's script_exit), a batch script
compiled before any boot, and inputs refused before a run directory is made."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.cli import contract_code, main
from harness.commands.shell import ScriptOsExit, compile_batch, mapped_os_exit, os_exit_code, script_exit
from tests.support.paths import REPO


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


@pytest.mark.parametrize("value, code", [(0, 0), (1, 1), (2, 1), (3, 1), (7, 1), (255, 1), (-1, 1)])
def test_a_batch_script_s_os_exit_maps_to_0_or_1(value, code, capsys):
    assert os_exit_code(value) == code
    err = capsys.readouterr().err
    assert (err == "") == (value == code), err
    if value != code:
        assert f"the script called os._exit({value}): exit {code}" in err


def test_os_exit_in_the_harness_s_thread_is_raised_and_restored():
    real = os._exit
    with mapped_os_exit() as state:
        with pytest.raises(ScriptOsExit) as e:
            os._exit(42)
        assert e.value.code == 42 and state["called"] == 42
        assert isinstance(e.value, SystemExit)  # the REPL lets it through as it lets exit() through
    assert os._exit is real


# What a process that runs a script under mapped_os_exit() exits with: run in a child process of
# its own (a real os._exit ends the process that calls it).
CHILD = """
import os, sys, threading
from harness.commands.shell import ScriptOsExit, mapped_os_exit, os_exit_code
how, n = sys.argv[1], int(sys.argv[2])
with mapped_os_exit() as state:
    try:
        if how == "main":
            os._exit(n)
        elif how == "thread":
            t = threading.Thread(target=os._exit, args=(n,))
            t.start()
            t.join()
            print("not reached: the thread's os._exit ends the process", flush=True)
        elif how == "fork":
            pid = os.fork()
            if pid == 0:
                os._exit(n)  # a child of the script's: os._exit itself, its own status
            print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
        elif how == "caught":
            try:
                os._exit(n)
            except SystemExit:
                pass
    except ScriptOsExit as exc:
        sys.exit(os_exit_code(exc.code))
if state["called"] is not None:
    sys.exit(os_exit_code(state["called"]))
sys.exit(0)
"""


@pytest.mark.parametrize("how, n, code, out", [
    ("main", 9, 1, ""), ("main", 0, 0, ""), ("thread", 9, 1, ""), ("thread", 0, 0, ""),
    ("fork", 9, 0, "child 9\n"), ("caught", 5, 1, ""),
])
def test_os_exit_is_mapped_in_each_thread_and_left_alone_in_children(how, n, code, out):
    r = subprocess.run([sys.executable, "-c", CHILD, how, str(n)], capture_output=True, text=True, timeout=60,
                       cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == code, (r.stdout, r.stderr)
    assert r.stdout == out
    assert ("the script called os._exit" in r.stderr) == (n != 0 and how != "fork"), r.stderr


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

    monkeypatch.setattr("harness.session.Session", no_boot)  # imported by the command when it runs
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
    monkeypatch.setattr("harness.session.Session", lambda *a, **k: pytest.fail("booted for bad input"))
    assert main(argv) == 2
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err


def test_a_kernel_without_btf_is_refused_in_one_line_before_any_boot(tmp_path, capsys, monkeypatch):
    """A user's --kernel-path built without CONFIG_DEBUG_INFO_BTF: the default kernel's vmlinux
    with its .BTF section removed (binutils' objcopy), refused before the KVM probe and the boot."""
    import shutil
    import subprocess

    from harness.images.errors import ImageError
    from harness.images.kernel import get_kernel
    from tests.support.gating import require

    require(shutil.which("objcopy") is not None, "objcopy is not installed (binutils)")
    try:
        vmlinux = get_kernel("default").vmlinux
    except ImageError as exc:
        require(False, f"the default kernel cannot be had: {exc}")
    stripped = tmp_path / "vmlinux-nobtf"
    subprocess.run(["objcopy", "--remove-section", ".BTF", str(vmlinux), str(stripped)], check=True, timeout=120)

    def no_boot(*a, **k):
        raise AssertionError("a guest was probed or booted for a kernel without BTF")

    monkeypatch.setattr("harness.session.resolve_accel", no_boot)
    monkeypatch.setattr("harness.session.Machine", no_boot)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "fp-spin", "--kernel-path", str(stripped), "--samples", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"harness run: {stripped}: no .BTF section (kernel built without "
                       "CONFIG_DEBUG_INFO_BTF?)"), err
    assert list((tmp_path / "runs").iterdir()) == []  # no run directory left for the refused kernel
