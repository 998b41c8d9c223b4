"""Transport layer: the QEMU process (qemu.py) and the debugger targets (target.py, rsp.py, mi.py)."""

from __future__ import annotations

from pathlib import Path

from .mi import MiTarget
from .rsp import RspTarget
from .target import Target

TRANSPORTS = ("rsp", "mi")


def make_target(kind: str, gdb_socket: str | Path) -> Target:
    """Attach a debugger target of ``kind`` ("rsp" or "mi") to QEMU's gdb stub socket."""
    if kind == "rsp":
        return RspTarget(gdb_socket)
    if kind == "mi":
        return MiTarget(gdb_socket)
    raise ValueError(f"unknown transport {kind!r} ({' or '.join(TRANSPORTS)})")
