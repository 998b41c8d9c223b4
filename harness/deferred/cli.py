"""Command-line hook: ``add_cli(subparsers)`` registers ``check LOG`` on the harness's parser.

The parser's owner calls ``args.func(args)`` and exits with its return value: 0 when the log is
clean (no invariant violated), complete (its last line is the ``end`` record of a run that ended
``complete``) and no stack record has a failure verdict; 1 otherwise; 2 when the log is unreadable.
"""

from __future__ import annotations

import argparse

from .check import _run_check


def _check_command(args: argparse.Namespace) -> int:
    return _run_check(args.log)


def add_cli(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "check",
        help="check an unwind_deferred event log (JSONL) against the model's invariants; sum up its stacks",
        description="Print the stack records' summary (verdicts per unwinder/oracle pair, divergences per "
        "cause, each failure), then 'clean' or one message per violation, and whether the log is "
        "incomplete.  Exit 0 when clean, complete and without failure verdicts, 1 otherwise, 2 when "
        "the log is unreadable.",
    )
    parser.add_argument("log", metavar="LOG", help="JSONL event log written by harness.deferred")
    parser.set_defaults(func=_check_command)
    return parser
