"""``harness check LOG``: re-check a deferred-unwinding JSONL log offline."""

from __future__ import annotations

import sys

from ..errors import EXIT_FAILURES, EXIT_OK, EXIT_USAGE
from . import arg, command


@command("check",
         help="check an unwind_deferred event log (JSONL) against the model's invariants; sum up its stacks",
         description="Print the stack records' summary (verdicts per unwinder/oracle pair, divergences per "
                     "cause, each failure), then 'clean' or one message per violation, and whether the log is "
                     "incomplete.  Exit 0 when clean, complete and without failure verdicts, 1 otherwise, 2 when "
                     "the log is unreadable.",
         args=[arg("log", metavar="LOG", help="JSONL event log written by harness.deferred")])
def cmd_check(args) -> int:
    """Check the log and print :func:`~harness.report.check.verdict_lines`: 0 when the verdict is ok,
    1 otherwise, 2 (one line on stderr) when the file cannot be read as a log."""
    from ..deferred.check import check_lines
    from ..deferred.log import LogFormatError
    from ..report.check import verdict_lines
    path = args.log
    try:
        with open(path, encoding="utf-8") as fp:
            verdict = check_lines(fp)
    except OSError as exc:
        print(f"harness check: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except UnicodeDecodeError as exc:
        print(f"harness check: {path} is not UTF-8 text: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except LogFormatError as exc:
        print(f"harness check: {path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for line in verdict_lines(verdict, path):
        print(line)
    return EXIT_OK if verdict.ok else EXIT_FAILURES
