"""``harness``: the command line.

Exit codes, the same for every subcommand: 0 every stack agrees or is explained (or the command
did what it was asked); 1 failures or invariant violations; 2 bad usage or input (one line naming
what was wrong; ``--debug`` shows the traceback); 3 the infrastructure failed (guest timeout, QEMU
died, disk full, interrupted).

    harness images build [--kernel NAME|--kernel-path PATH] [--toolchain NAME ...] [--kallsyms KERNEL]
    harness boot [--smp N] [--pti] ...   boot the default guest and leave it open for gdb
    harness boot --gdb [--batch -ex CMD] gdb attached, kernel symbols and the harness commands loaded
    harness shell [--batch FILE.py]      a Python REPL (or a script) with a live `guest` object
    harness doctor                       what is installed, which accelerator, what is cached
    harness run [SCENARIO ...]           the main job: scenarios on a guest, every stack checked
    harness bench transport|unwind|deferred|soak  figures, printed
    harness check LOG                    re-check a deferred-unwinding JSONL log offline
    harness perf [--defer] ...           the guest kernel's perf callchains against our unwinder
    harness sframe check|dump BINARY...  a binary's SFrame section checked against its .eh_frame, or dumped
    harness fuzz --static|replay|merge   generated stack shapes across toolchains, shrunk to reproducers
    harness report RUN_DIR               report.html (and SCENARIO.folded) in a run directory
    harness kernel-diff [SCENARIO ...]   the guest kernel's unwind_deferred against the model, event by event
    harness kernel config PATH           a kernel .config judged against what the harness needs
    harness kernel build TREE            a kernel tree built for the guest (then --kernel tree:TREE)

This module builds the top parser from the commands registered in :mod:`harness.commands` (one
module per subcommand), dispatches, and turns an error that reaches it into its exit code
(:func:`exit_code`; the ``EXIT_*`` names are in :mod:`harness.errors`).
"""

from __future__ import annotations

import errno
import faulthandler
import signal
import sys
import traceback

from .commands import build_parser, load
from .errors import EXIT_FAILURES, EXIT_INFRA, EXIT_OK, EXIT_USAGE, HarnessError
from .progress import install, uninstall
from .signals import handling, signal_name

__all__ = ["contract_code", "exit_code", "main"]


def exit_code(exc: BaseException) -> int | None:
    """The exit code for an error that reached the command line; None for a bug (not ours to
    classify: it keeps its traceback)."""
    if isinstance(exc, HarnessError):
        return exc.exit_code
    if isinstance(exc, OSError):
        # A full disk or a dead pipe is the machine's; a path that cannot be opened is the input's.
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EPIPE):
            return EXIT_INFRA
        return EXIT_USAGE
    return None


def contract_code(value) -> int:
    """What a command's return value (or a ``SystemExit``'s code) exits with, inside the contract:
    None is 0; 0 to 3 are themselves; any other int (a script's ``sys.exit(7)``, a child's status,
    a signal's negative number) is 1, a failure that is not the harness's to classify as usage or
    infrastructure; anything else (``sys.exit("message")``) is 1, as Python exits 1 for it."""
    if value is None:
        return EXIT_OK
    if isinstance(value, int) and EXIT_OK <= value <= EXIT_INFRA:
        return value
    return EXIT_FAILURES


#: what `harness --help` says first
DESCRIPTION = ("harness: a whole-system test harness for Linux user-space stack unwinding (unwind_user, "
               "deferred unwinding, SFrame) on QEMU guests; exit 0 agree or explained, 1 failures, "
               "2 bad usage or input, 3 infrastructure")


def main(argv: list[str] | None = None) -> int:
    # `kill -USR1 PID` prints where every thread of a harness that seems stuck is (stderr;
    # not where stderr is no file, as under pytest's capture).
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        pass
    load()
    args = build_parser(DESCRIPTION).parse_args(argv)
    # SIGINT, SIGTERM and SIGHUP end a command alike, once; a second one is quiet (signals.py).
    # Without argv this is the process's own command line: it exits next, and a signal during
    # the interpreter's shutdown is ignored rather than turned into an exit code of 128+N.
    with handling(restore=argv is not None):
        return _dispatch(args)


def _dispatch(args) -> int:
    try:
        # Progress of long steps on stderr: a live status line on a terminal, plain lines
        # elsewhere (harness/progress.py); gone before anything below is printed.
        renderer = install(sys.stderr)
        try:
            return contract_code(args.command.func(args))
        finally:
            uninstall(renderer)
    except KeyboardInterrupt as exc:
        print(f"harness {args.cmd}: interrupted ({signal_name(exc)})", file=sys.stderr)
        return EXIT_INFRA
    except SystemExit as exc:  # a command's own sys.exit(): inside the contract too
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)  # as Python prints it
        return contract_code(exc.code)
    except Exception as exc:
        code = exit_code(exc)
        if code is None:
            raise  # a bug in the harness: its traceback is the report
        if args.debug:
            traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"harness {args.cmd}: {first}", file=sys.stderr)
        return code

if __name__ == "__main__":
    sys.exit(main())
