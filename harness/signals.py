"""How the harness ends on a signal: SIGINT, SIGTERM and SIGHUP alike, once, and quietly after.

The first of them raises :class:`Interrupted` (a ``KeyboardInterrupt``, so every place that
ends a run cleanly on Ctrl-C does the same for ``kill`` and a closed terminal: the partial
table, ``summary.json``, the logs closed by an "interrupted" end record).  Any later one, while
that clean-up runs, raises nothing: an exception thrown into the clean-up (QEMU's shutdown,
the QMP client's event loop, a log's last line) is what left a guest's directory behind and
printed pages of "Exception ignored ... EOFError".  It sets :attr:`SignalState.hurry` instead,
which the clean-up reads to skip what it would wait for politely (QEMU's own quit: it is
killed at once).

A section that must not be cut (one log record: its seq counted and its line written) runs
under :meth:`SignalState.deferring`; a signal that comes in it is raised when it ends.

:class:`SignalState` is the whole logic, with no signal in it (the unit tests drive it);
:func:`handling` installs it for the command line.  A signal the harness was started with
ignored (``nohup``'s SIGHUP, SIGINT in a non-interactive shell's background job) stays ignored.

This module imports nothing from the harness (the ground floor), so the transport and the
log can ask it.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

__all__ = ["ENDING_SIGNALS", "Interrupted", "SignalState", "STATE", "handling"]

#: the signals that end a run cleanly
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """The run was ended by a signal (``signum``; ``name`` is SIGINT, SIGTERM or SIGHUP)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)


def signal_name(exc: BaseException) -> str:
    """The signal a ``KeyboardInterrupt`` stands for: SIGINT unless it says another."""
    return getattr(exc, "name", "SIGINT")


class SignalState:
    """What the handler does with each signal (pure: :meth:`on_signal` returns the exception to
    raise, or None)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.received: list[int] = []
        self.hurry = False  # a second signal came: the clean-up waits for nothing it can skip
        self._depth = 0  # nested deferring() sections
        self._pending: Interrupted | None = None

    @property
    def ending(self) -> bool:
        return bool(self.received)

    def on_signal(self, signum: int) -> Interrupted | None:
        self.received.append(signum)
        if len(self.received) > 1:
            self.hurry = True
            return None
        exc = Interrupted(signum)
        if self._depth:
            self._pending = exc
            return None
        return exc

    @contextlib.contextmanager
    def deferring(self) -> Iterator[None]:
        """A section no signal cuts: one that comes in it is raised as it ends."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending is not None:
                exc, self._pending = self._pending, None
                raise exc

    def enter(self) -> None:
        """:meth:`deferring` without a context manager, for a hot path (a log record):
        ``enter()`` then ``leave()`` in a ``finally``."""
        self._depth += 1

    def leave(self) -> None:
        self._depth -= 1
        if not self._depth and self._pending is not None:
            exc, self._pending = self._pending, None
            raise exc

    def handler(self, signum: int, frame) -> None:  # the installed handler
        exc = self.on_signal(signum)
        if exc is not None:
            raise exc


#: the process's state: the one :func:`handling` installs (reset each time)
STATE = SignalState()


@contextlib.contextmanager
def handling(restore: bool = True) -> Iterator[SignalState]:
    """Install :data:`STATE` (reset) for :data:`ENDING_SIGNALS` (those not ignored at
    entry) for the duration.  ``restore=False``: the process exits next, and a signal after
    this (in the interpreter's own shutdown, where Python puts back the default action and a
    Ctrl-C would turn the exit code into 130) is ignored rather than the old handler put back."""
    state = STATE
    state.reset()
    old = {}
    for sig in ENDING_SIGNALS:
        try:
            current = signal.getsignal(sig)
            if current is signal.SIG_IGN:
                continue
            old[sig] = current
            signal.signal(sig, state.handler)
        except (ValueError, OSError):  # not the main thread, or no such signal here
            pass
    try:
        yield state
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler if restore else signal.SIG_IGN)
