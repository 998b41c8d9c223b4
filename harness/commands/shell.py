"""``harness shell``: a Python REPL (or a script) with a live ``guest`` object."""

from __future__ import annotations

import code
import logging
import os
import sys
import traceback

from ..errors import EXIT_FAILURES, EXIT_OK, EXIT_USAGE
from ..interactive import BANNER, Guest
from ..session import Session
from . import arg, command
from ._guest import GUEST_ARGS, LIB_ARG, shell_spec


@command("shell", help="boot a guest and open a Python REPL with a live `guest` object", args=[
    *GUEST_ARGS,
    arg("--program", action="append", metavar="PATH",
        help="put this host binary (and its libraries) in the guest (repeatable)"),
    LIB_ARG,
    arg("--scenario", action="append", help="also put this scenario's program in the guest"),
    arg("--batch", metavar="FILE.py", help="run this script with `guest` in scope and exit"),
])
def cmd_shell(args) -> int:
    """A Python REPL with ``guest`` (harness.interactive.Guest) and ``session`` in scope, or
    ``--batch FILE.py`` run with them and exit (1 if the script raised)."""
    # What the guest object reports as it goes (a program started or uploaded, a shell command's
    # output) is harness.interactive's log, shown to the user as plain lines.
    shown = logging.getLogger("harness.interactive")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    shown.addHandler(handler)
    shown.setLevel(logging.INFO)
    shown.propagate = False  # shown once, here, whatever the root logger does
    try:
        return _shell(args)
    finally:
        shown.removeHandler(handler)
        shown.propagate = True


def _shell(args) -> int:
    if args.batch and not os.path.isfile(args.batch):
        print(f"harness shell: --batch {args.batch}: no such file", file=sys.stderr)
        return EXIT_USAGE
    with Session(shell_spec(args)) as sess:
        guest = Guest(sess)
        guest.cont()
        ns = {"guest": guest, "session": sess, "__name__": "__harness_shell__"}
        if args.batch:
            ns["__file__"] = args.batch
            try:
                with open(args.batch) as f:
                    exec(compile(f.read(), args.batch, "exec"), ns)
            except SystemExit as exc:
                return exc.code if isinstance(exc.code, int) else EXIT_FAILURES
            except Exception:
                traceback.print_exc()
                return EXIT_FAILURES
            return EXIT_OK
        try:
            # Optional: line editing and history for input(), where this Python has readline.
            import readline
            import rlcompleter

            readline.set_completer(rlcompleter.Completer(ns).complete)
            readline.parse_and_bind("tab: complete")
        except ImportError:
            pass
        console = code.InteractiveConsole(ns)
        console.interact(banner=BANNER.format(guest=guest), exitmsg="shutting the guest down")
    return EXIT_OK
