"""A child started as a terminal's foreground job would be, whatever launched the tests."""

from __future__ import annotations

import signal


def foreground_signals() -> None:
    """For ``preexec_fn``: the child's SIGINT, SIGTERM and SIGHUP at their defaults, as in a
    terminal's foreground job.  The harness keeps a signal it was started with ignored (nohup's
    SIGHUP, SIGINT and SIGQUIT in a non-interactive shell's background job: harness/signals.py),
    and the tests' children inherit such dispositions: the clean-clone CI started with `cmd &`
    ran on for 60 s after SIGINT, the flake campaign of 2026-12-05 under nohup for 120 s after
    SIGHUP, and the two matrix Ctrl-C tests of 2026-12-07's CI, started so, timed out after 120 s
    (``coreutils timeout`` resets them, which is why the flake campaign's runs passed)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
