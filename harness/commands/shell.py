"""``harness shell``: a Python REPL (or a script) with a live ``guest`` object."""

from __future__ import annotations

import code
import logging
import os
import sys
import traceback

from ..errors import EXIT_FAILURES, EXIT_OK, EXIT_USAGE
from . import UsageError, arg, command
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
    ``--batch FILE.py`` run with them and exit: 0, or 1 if the script raised or exited with
    another status than 0 (:func:`script_exit`); 2 for a script that does not compile (before
    the boot)."""
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


def script_exit(code) -> int:
    """What ``harness shell --batch`` exits with when its script calls ``sys.exit(code)``: the
    contract's 0-3, never the script's own number (CI reads 2 and 3 as the harness's usage
    and infrastructure): None and 0 are 0 (success); any other int is 1 (the script said it
    failed); anything else is printed, as Python prints it, and is 1."""
    if code is None or code == 0:
        return EXIT_OK
    if not isinstance(code, int):
        print(code, file=sys.stderr)
    return EXIT_FAILURES


def compile_batch(path: str):
    """The script's code object, compiled before any guest boots: a SyntaxError (or a file that
    cannot be read as text) is bad input, exit 2, with no boot spent on it."""
    try:
        with open(path, "rb") as f:
            return compile(f.read(), path, "exec")
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte, or text that is not UTF-8
        if isinstance(exc, SyntaxError):
            print("".join(traceback.format_exception_only(exc)).rstrip(), file=sys.stderr)
        raise UsageError(f"--batch {path}: {type(exc).__name__}: {getattr(exc, 'msg', None) or exc}") from None


def _shell(args) -> int:
    from ..interactive import BANNER, Guest
    from ..session import Session
    if args.batch and not os.path.isfile(args.batch):
        print(f"harness shell: --batch {args.batch}: no such file", file=sys.stderr)
        return EXIT_USAGE
    script = compile_batch(args.batch) if args.batch else None
    with Session(shell_spec(args)) as sess:
        guest = Guest(sess)
        guest.cont()
        ns = {"guest": guest, "session": sess, "__name__": "__harness_shell__"}
        if script is not None:
            ns["__file__"] = args.batch
            try:
                exec(script, ns)
            except SystemExit as exc:
                return script_exit(exc.code)
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
        try:
            console.interact(banner=BANNER.format(guest=guest), exitmsg="shutting the guest down")
        except SystemExit as exc:  # exit(7) typed at the prompt: the same contract as a script's
            return script_exit(exc.code)
    return EXIT_OK
