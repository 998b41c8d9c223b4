"""The subcommands of ``harness``: one module each, registered by a decorator with its arguments.

A module of this package declares its command and the command's arguments next to the function
that runs it (the pattern of drgn's ``drgn/commands``)::

    @command("doctor", help="what is installed and cached")
    def cmd_doctor(args) -> int: ...

    @command("check", help="...", args=[arg("log", metavar="LOG", help="...")])
    def cmd_check(args) -> int: ...

A command with subcommands is a :func:`group`; its subcommands name it as ``parent``
(``harness images build``, ``harness sframe check``).  :func:`load` imports every module of the
package (``pkgutil``), which fills :data:`COMMANDS`; :func:`build_parser` turns the registry into
the argparse tree that ``harness.cli`` parses and dispatches.

A command module imports at its top only what its parser needs (its options' defaults come from
modules that import nothing: :mod:`harness.perf.spec`, :mod:`harness.lockstep.defaults`,
:mod:`harness.fuzz.defaults`, :mod:`harness.soak.spec`), and the rest inside the functions that
use it: :func:`load` imports every command module, and ``harness --help`` or ``harness check``
should not pay for the session, the transports, the oracles and the fuzzer (0.6 s of CPU a start
when they were loaded, 0.13 s without; ``tests/unit/commands/test_commands.py`` holds it).

This package is the only one that parses arguments, prints for the user and chooses exit codes
(the ``EXIT_*`` constants of :mod:`harness.errors`, and the ``exit_code`` of the error classes).
Everything below it returns data and logs.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import EXIT_USAGE, HarnessError

__all__ = ["COMMANDS", "Command", "Parser", "UsageError", "arg", "build_parser", "command", "group", "load",
           "positive_float", "positive_int", "sample_count"]


class UsageError(HarnessError):
    """Bad usage found after parsing (an unknown scenario, an option without the one it needs):
    exit 2 with one line."""

    exit_code = EXIT_USAGE


class Parser(argparse.ArgumentParser):
    """argparse with the exit-code contract's one line for bad usage (exit 2), not the usage block."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a bad value exits 2 with one line, as argparse does)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def sample_count(text: str) -> int:
    """argparse type of ``--samples``: a positive integer no larger than the engine's
    :data:`~harness.scenarios.engine.MAX_SAMPLES` (which says where the bound comes from: the
    kernel's per-CPU cookie counter).  The engine is imported here, when the option is parsed,
    not when the commands are listed: every command that takes --samples runs it anyway."""
    value = positive_int(text)
    from ..scenarios.engine import MAX_REQUESTS_PER_SAMPLE, MAX_SAMPLES
    if value > MAX_SAMPLES:
        raise argparse.ArgumentTypeError(
            f"{value} is more than {MAX_SAMPLES:,}, the most a run can ask for: up to {MAX_REQUESTS_PER_SAMPLE} "
            f"requests a sample must fit in the 2^31 cookies a CPU's counter gives before they repeat")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


@dataclass(frozen=True)
class Arg:
    """One ``add_argument`` call, kept until the parser is built."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        # A default computed when the parser is built (a choice read from the environment).
        kwargs = {k: (v() if k == "help" and callable(v) else v) for k, v in self.kwargs.items()}
        parser.add_argument(*self.flags, **kwargs)


def arg(*flags: str, **kwargs: Any) -> Arg:
    """An argument of a command: the arguments of :meth:`argparse.ArgumentParser.add_argument`
    (``help`` may be a function of no arguments, called when the parser is built)."""
    return Arg(flags, kwargs)


def cluster_args() -> list[Arg]:
    """``--scheduler`` and ``--workers``: where a campaign's tasks run (harness.campaign)."""
    return [arg("--scheduler", metavar="ADDRESS",
                help="run the tasks on this Dask cluster (tcp://HOST:PORT; workers started "
                     "`dask worker ADDRESS --nthreads 1`); default: a LocalCluster on this machine"),
            arg("--workers", type=positive_int, metavar="N",
                help="the LocalCluster's workers (default: one per core; live work: one guest each)")]


@dataclass
class Command:
    """A registered subcommand: ``func(args) -> exit code`` (None for a group, which only holds
    subcommands)."""

    name: str
    help: str
    func: Callable[[argparse.Namespace], int | None] | None
    args: Sequence[Arg] = ()
    description: str | None = None
    parent: str | None = None
    defaults: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.parent} {self.name}" if self.parent else self.name


#: Every registered command by its full name ("run", "images build", "sframe check"), in the
#: order of registration.
COMMANDS: dict[str, Command] = {}

#: The order of the subcommands in ``harness --help`` (the rest follow in the order they load).
ORDER = ("images", "boot", "shell", "doctor", "run", "matrix", "bench", "report", "check", "perf", "kernel-diff",
         "sframe", "fuzz")


def _register(cmd: Command) -> None:
    if cmd.key in COMMANDS:
        raise ValueError(f"harness command {cmd.key!r} registered twice")
    COMMANDS[cmd.key] = cmd


def command(name: str, *, help: str, args: Iterable[Arg] = (), description: str | None = None,
            parent: str | None = None, defaults: dict[str, Any] | None = None):
    """Register the decorated function as ``harness [PARENT] NAME`` with these arguments."""

    def register(func):
        _register(Command(name, help, func, tuple(args), description, parent, dict(defaults or {})))
        return func

    return register


def group(name: str, *, help: str, description: str | None = None) -> None:
    """Register a command that only holds subcommands (``harness images build``)."""
    _register(Command(name, help, None, (), description))


def load() -> dict[str, Command]:
    """Import every module of this package (each registers its commands) and return the registry."""
    for info in pkgutil.iter_modules(__path__, __name__ + "."):
        importlib.import_module(info.name)
    return COMMANDS


def _subparser(sub, cmd: Command) -> argparse.ArgumentParser:
    kwargs = {"help": cmd.help}
    if cmd.description is not None:
        kwargs["description"] = cmd.description
    p = sub.add_parser(cmd.name, **kwargs)
    for a in cmd.args:
        a.add_to(p)
    p.set_defaults(**cmd.defaults)
    if cmd.func is not None:
        p.set_defaults(command=cmd)
    return p


def build_parser(description: str) -> Parser:
    """The whole argparse tree of ``harness`` from the registry (:func:`load` first)."""
    ap = Parser(prog="harness", description=description)
    ap.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = ap.add_subparsers(dest="cmd", required=True)
    top = [c for c in COMMANDS.values() if c.parent is None]
    top.sort(key=lambda c: ORDER.index(c.name) if c.name in ORDER else len(ORDER))
    for cmd in top:
        p = _subparser(sub, cmd)
        children = [c for c in COMMANDS.values() if c.parent == cmd.name]
        if children:
            csub = p.add_subparsers(dest=f"{cmd.name.replace('-', '_')}_cmd", required=True)
            for child in children:
                _subparser(csub, child)
    return ap
