"""The one exception of the SFrame layer."""

from __future__ import annotations

from ..errors import EXIT_USAGE, HarnessError


class SFrameError(HarnessError, ValueError):
    """A corrupt, truncated or unsupported SFrame section (or no section at all).

    ``field`` names the structure member at fault in the specification's terms (``"magic"``,
    ``"fde.num_fres"``, ``"fre.start"``, ...); ``offset`` is the byte offset of that member
    from the start of the section, or None where no single byte is at fault.
    """

    exit_code = EXIT_USAGE  # bad input

    def __init__(self, message: str, *, field: str, offset: int | None = None) -> None:
        self.field = field
        self.offset = offset
        where = f"{field} at byte {offset:#x}" if offset is not None else field
        super().__init__(f"{where}: {message}")
