"""``harness shell``: a Python REPL (or a script) with a live ``guest`` object."""

from __future__ import annotations

import code
import contextlib
import logging
import os
import sys
import threading
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
    another status than 0, by sys.exit or os._exit (:func:`script_exit`, :func:`os_exit_code`);
    2 for a script that does not compile (before the boot)."""
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


class ScriptOsExit(SystemExit):
    """``os._exit(N)`` called by the script (or at the REPL) in the harness's own thread: raised in
    its place, so the guest is shut down and the exit code mapped (:func:`os_exit_code`).  A
    SystemExit: the REPL lets it through as it lets ``exit(N)`` through."""


def os_exit_code(code) -> int:
    """What ``harness shell`` exits with when its script calls ``os._exit(code)``: as
    :func:`script_exit` maps ``sys.exit``, 0 for 0 and 1 for any other status (a status of 2, 3
    or 255 would read as the harness's usage or infrastructure failure, or as nothing the
    contract knows), said on stderr."""
    mapped = EXIT_OK if code == 0 else EXIT_FAILURES
    if mapped != code:
        print(f"harness shell: the script called os._exit({code!r}): exit {mapped} (the harness's exit codes "
              "are 0-3: 1 says the script failed)", file=sys.stderr)
    return mapped


@contextlib.contextmanager
def mapped_os_exit():
    """``os._exit`` while the script (or the REPL) runs: in the harness's main thread it raises
    :class:`ScriptOsExit` (the session then shuts the guest down, and the exit code is mapped into
    0-3); in another thread of the harness it exits at once, as os._exit does, with the mapped
    code; in a forked child (another pid) it is os._exit itself.  ``called`` holds the status of
    a call a script caught (a SystemExit it swallowed): its run still ends with that status."""
    real = os._exit
    pid = os.getpid()
    main = threading.main_thread()
    state = {"called": None}

    def _exit(code):
        if os.getpid() != pid:
            real(code)
        state["called"] = code
        if threading.current_thread() is not main:
            # the script's output so far reaches its reader (a pipe's buffer would be lost: the
            # clean-clone CI of 2026-12-07 read "up" but not the print before it)
            sys.stdout.flush()
            sys.stderr.flush()
            real(os_exit_code(code))
        raise ScriptOsExit(code)

    os._exit = _exit
    try:
        yield state
    finally:
        os._exit = real


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
            with mapped_os_exit() as os_exit:
                try:
                    exec(script, ns)
                except ScriptOsExit as exc:
                    return os_exit_code(exc.code)
                except SystemExit as exc:
                    return script_exit(exc.code)
                except Exception:
                    traceback.print_exc()
                    return EXIT_FAILURES
            if os_exit["called"] is not None:  # the script caught it: it still said how to end
                return os_exit_code(os_exit["called"])
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
        with mapped_os_exit():
            try:
                console.interact(banner=BANNER.format(guest=guest), exitmsg="shutting the guest down")
            except ScriptOsExit as exc:  # os._exit(7) typed at the prompt
                return os_exit_code(exc.code)
            except SystemExit as exc:  # exit(7) typed at the prompt: the same contract as a script's
                return script_exit(exc.code)
    return EXIT_OK
