"""Errors of the transport layer: the QEMU process, its console and the debugger targets.

Every error carries the evidence needed to understand it without re-running: the guest's last
console lines, and for the debugger the packet or command that failed.
"""

from __future__ import annotations

from ..errors import EXIT_USAGE, HarnessError


class GuestError(HarnessError):
    """Something went wrong with the guest; ``console`` holds its last console lines."""

    def __init__(self, message: str, console: list[str] | None = None):
        self.console = list(console or [])
        super().__init__(message)

    def __str__(self) -> str:
        msg = super().__str__()
        if self.console:
            msg += "\n--- last console lines ---\n" + "\n".join(self.console[-25:])
        return msg


class QemuStartError(GuestError):
    """QEMU could not be started or exited during boot."""


class GuestPanic(GuestError):
    """The guest kernel panicked or oopsed."""


class GuestTimeout(GuestError):
    """The guest did not answer within the bound (silent, hung, or too slow)."""


class GuestDied(GuestError):
    """QEMU exited (or its QMP socket broke) while the harness was using it."""


class PinError(GuestError):
    """The CPUs could not be split between the harness and QEMU (``--pin``: affinity.py)."""


class ControlLineError(HarnessError, ValueError):
    """A command /init cannot be given as it is (harness/transport/channels.py): a word with a
    NUL byte, or a line longer than the guest's control tty takes.  What was asked is wrong (an
    argument, a path): exit 2."""

    exit_code = EXIT_USAGE


class OutputFrameError(HarnessError, ValueError):
    """A line of the program-output channel that is not an output frame (harness/transport/channels.py)."""


class TargetError(HarnessError):
    """The debugger transport failed: a malformed or error reply, or a dead connection."""


class TargetTimeout(TargetError):
    """The debugger transport gave no answer within its bound."""


class TargetDied(TargetError):
    """The debugger (GDB) or the stub's connection died under the harness."""


class StopLeft(TargetError):
    """A read at a stop the guest has already left (:meth:`Target.plan_continue`): only what
    the transport read with that stop's registers is there, and this was not among it."""
