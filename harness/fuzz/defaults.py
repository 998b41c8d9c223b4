"""``harness fuzz``'s defaults: the linkers a build may use and the live checker's requests per
program.  A module that imports nothing (no hypothesis, no session), so that the command's parser
takes them without loading the build matrix or the live checker."""

from __future__ import annotations

__all__ = ["LINKERS", "LIVE_SAMPLES"]

LINKERS = ("bfd", "gold", "mold", "lld")
#: requests that must land on each program (each gives at most one checked stack)
LIVE_SAMPLES = 20
