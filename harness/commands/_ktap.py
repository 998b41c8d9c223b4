"""``--ktap`` of run and kernel-diff: the option, where its output may go, and writing it."""

from __future__ import annotations

import sys
from pathlib import Path

from . import UsageError, arg

__all__ = ["KTAP_ARG", "check_output_file", "write_ktap"]

#: --ktap (run, kernel-diff): KTAP version 1 on stdout (the table then goes to stderr), or into FILE
KTAP_ARG = arg("--ktap", nargs="?", const="-", metavar="FILE",
               help="KTAP version 1 for kernel CI (kunit.py parse, KernelCI, LKFT): one test per scenario, a "
                    "subtest per oracle; on stdout (the table goes to stderr) or into FILE")


def check_output_file(option: str, name: str | None) -> None:
    """:class:`UsageError` for an output file that cannot be written where it is named ("-": stdout)."""
    if name and name != "-":
        path = Path(name)
        if path.is_dir():
            raise UsageError(f"{option} {name}: is a directory")
        if not path.parent.is_dir():
            raise UsageError(f"{option} {name}: no directory {path.parent}")


def write_ktap(name: str | None, text: str) -> None:
    """KTAP to stdout ("-") or into the file ``name``."""
    if name == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    elif name:
        Path(name).write_text(text)
