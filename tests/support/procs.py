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


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (every thread's /proc/PID/task/TID/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def cmdline(pid: int) -> list[str]:
    """``pid``'s argv (a QEMU started through its own loader: ld-linux... qemu-system-x86_64 ...)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
