"""The binutils of this machine and of the toolchain roots, as witnesses: run, with a bound, and remembered.

The host's binutils (Debian 12: 2.40) read any x86-64 ELF's program headers, sections, symbols,
.eh_frame and code.  Its objdump reads SFrame V1 only; the roots' objdumps read their own
versions (trixie's 2.44: V2, sid's 2.47: V3).  A root's tool runs on the host through the root's
own dynamic loader and libraries (``ROOT/lib64/ld-linux-x86-64.so.2 --library-path ... ROOT/usr/
bin/objdump FILE``), so it reads any host file where it lies: no copy into the chroot.

A root is used only when the cache has it (:func:`harness.images.toolchain.built_toolchain`):
a witness never starts a debootstrap.  Outputs are kept per (tool, arguments, file identity), so
a run asks each question of each file once.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import EXIT_INFRA, HarnessError
from ..images.errors import ImageError
from ..images.toolchain import built_toolchain

__all__ = ["Binutils", "ToolError", "binutils", "reading_sframe"]

TIMEOUT = 120.0  # objdump -d of a static glibc's function, readelf -wF of a large .eh_frame: seconds at most
LIBDIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")


class ToolError(HarnessError):
    """A toolchain tool could not be run or did not answer (timed out, killed, or failed)."""

    exit_code = EXIT_INFRA

    def __init__(self, command: str, why: str, stderr: str = ""):
        self.command = command
        self.stderr = stderr
        super().__init__(f"{command}: {why}" + (f": {stderr.strip()[-500:]}" if stderr.strip() else ""))


@dataclass(frozen=True)
class Binutils:
    name: str  # "host", or the toolchain root's name
    root: Path  # "/" for the host
    version: str

    def argv(self, tool: str) -> list[str]:
        if str(self.root) == "/":
            return [tool]
        libs = ":".join(str(self.root / d) for d in LIBDIRS)
        return [str(self.root / "lib64/ld-linux-x86-64.so.2"), "--library-path", libs,
                str(self.root / "usr/bin" / tool)]

    def label(self, tool: str) -> str:
        return f"{tool} {self.version}" + ("" if self.name == "host" else f" ({self.name} root)")

    def run(self, tool: str, args: list[str], *, timeout: float = TIMEOUT, ok_codes=(0,)) -> str:
        """``tool args`` (stdout); a failure or timeout is a :class:`ToolError`."""
        cmd = self.argv(tool) + args
        shown = f"{self.label(tool)}: {tool} {' '.join(args)}"
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout,
                               env={**os.environ, "LC_ALL": "C"})
        except subprocess.TimeoutExpired as exc:
            raise ToolError(shown, f"no answer in {timeout:.0f} s") from exc
        except OSError as exc:
            raise ToolError(shown, f"cannot run it ({exc})") from exc
        if r.returncode not in ok_codes:
            raise ToolError(shown, f"exit status {r.returncode}", r.stderr)
        return r.stdout


_BINUTILS: dict[str, Binutils | None] = {}


def binutils(name: str = "host") -> Binutils | None:
    """The binutils of ``name`` (host, trixie, sid), or None where that root is not built."""
    if name not in _BINUTILS:
        try:
            tc = built_toolchain(name)
        except ImageError:
            tc = None
        _BINUTILS[name] = None if tc is None else Binutils(name, tc.root, tc.binutils_version)
    return _BINUTILS[name]


# Which binutils' objdump reads an SFrame version: the one whose gas writes it (2.40: V1; 2.44:
# V2; 2.46+: V3: each reads its own version only).
SFRAME_READERS = {1: "host", 2: "trixie", 3: "sid"}


def reading_sframe(version: int) -> Binutils | None:
    name = SFRAME_READERS.get(version)
    return binutils(name) if name else None
