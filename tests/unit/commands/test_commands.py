"""harness.commands: the registry the subcommands register in, and the parser built from it."""

from __future__ import annotations

import argparse

import pytest

from harness.cli import main
from harness.commands import COMMANDS, build_parser, command, load, positive_float, positive_int

# The subcommands the exit-code contract of harness/cli.py speaks for.
TOP = {"run", "report", "check", "shell", "boot", "images", "doctor", "bench", "perf", "kernel-diff", "sframe",
       "fuzz", "matrix", "kernel"}
NESTED = {"images build", "sframe check", "sframe dump", "kernel config", "kernel build"}


def test_every_subcommand_is_registered_by_its_own_module():
    load()
    assert {c.key for c in COMMANDS.values() if c.parent is None} == TOP
    assert {c.key for c in COMMANDS.values() if c.parent is not None} == NESTED
    for cmd in COMMANDS.values():
        if cmd.func is None:  # a group: only its subcommands run
            assert any(c.parent == cmd.name for c in COMMANDS.values()), cmd.key
            continue
        module = cmd.func.__module__
        assert module.startswith("harness.commands.") and not module.split(".")[-1].startswith("_"), (cmd.key, module)


@pytest.mark.parametrize("key", sorted(TOP | NESTED))
def test_each_command_has_its_help(key, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*key.split(), "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: harness {key}"), out


def test_the_top_help_lists_every_command_with_its_help(capsys):
    load()
    with pytest.raises(SystemExit):
        build_parser("the harness").parse_args(["--help"])
    out = capsys.readouterr().out
    for cmd in COMMANDS.values():
        if cmd.parent is None:
            assert f"    {cmd.name}" in out and cmd.help.split()[0] in out, cmd.name


def test_a_name_is_registered_once():
    load()
    before = dict(COMMANDS)
    with pytest.raises(ValueError, match="'doctor' registered twice"):
        command("doctor", help="a second doctor")(lambda args: 0)
    assert COMMANDS == before


def test_a_group_without_its_subcommand_is_bad_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sframe"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness sframe: ") and "see harness sframe --help" in err[0]


@pytest.mark.parametrize("text, ok", [("1", 1), ("300", 300), ("0", None), ("-3", None), ("2.5", None), ("x", None)])
def test_positive_int(text, ok):
    if ok is None:
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(text)
    else:
        assert positive_int(text) == ok


@pytest.mark.parametrize("text, ok", [("0.5", 0.5), ("2", 2.0), ("0", None), ("-1", None), ("inf", None),
                                      ("nan", None), ("x", None)])
def test_positive_float(text, ok):
    if ok is None:
        with pytest.raises(argparse.ArgumentTypeError):
            positive_float(text)
    else:
        assert positive_float(text) == ok


def test_a_bad_option_value_exits_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["kernel-diff", "--requests", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["harness kernel-diff: argument --requests: 0 is not a positive integer "
                   "(see harness kernel-diff --help)"]


# What a command's work needs, and its parser does not: the session and transports, the engine,
# the oracles and causes (Capstone, the CFI tables), the fuzzer (hypothesis), the reports (jinja2).
HEAVY = ("harness.session", "harness.transport.rsp", "harness.transport.mi", "harness.scenarios.engine",
         "harness.verdicts.causes", "harness.oracles.base", "harness.fuzz.build", "harness.lockstep.driver",
         "harness.perf.capture", "hypothesis", "capstone", "jinja2", "pygdbmi")


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["fuzz", "--help"], ["kernel-diff", "--help"],
                                  ["perf", "--help"], ["bench", "--help"]])
def test_the_parser_loads_none_of_the_commands_work(argv):
    """Every command module imports at its top only what its parser needs (its options' defaults:
    harness.perf.spec, harness.lockstep.defaults, harness.fuzz.defaults, ...), the rest where it is
    used: `harness --help` and the light commands do not pay for the guest's and the fuzzer's
    modules (about 0.5 s of CPU a start when they were all loaded)."""
    import subprocess
    import sys

    code = ("import sys\nfrom harness.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                       timeout=60)
    assert "usage: harness" in r.stdout, r.stderr
    assert r.stderr.strip() == "", f"{' '.join(argv)} loaded {r.stderr.strip()}"
