"""Command-line hook: ``add_cli(subparsers)`` registers ``check LOG`` on the harness's parser.

The parser's owner calls ``args.func(args)`` and exits with its return value (0 clean, 1 violations,
2 unreadable input).
"""

from __future__ import annotations

import argparse

from .check import _run_check


def _check_command(args: argparse.Namespace) -> int:
    return _run_check(args.log)


def add_cli(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "check",
        help="check an unwind_deferred event log (JSONL) against the model's invariants",
        description="Exit 0 when the log is clean, 1 with one message per violation, 2 when unreadable.",
    )
    parser.add_argument("log", metavar="LOG", help="JSONL event log written by harness.deferred")
    parser.set_defaults(func=_check_command)
    return parser
