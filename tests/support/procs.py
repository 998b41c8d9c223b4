"""Process checks shared by the QEMU failure tests."""

from __future__ import annotations

from pathlib import Path


def gone(pid: int) -> bool:
    """The process no longer runs: /proc/PID is missing or a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"
