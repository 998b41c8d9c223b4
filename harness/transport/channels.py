"""Pure parsers of what the guest's serial channels carry (no I/O; harness/transport/qemu.py
reads the channels).

* The kernel console (ttyS0) prints each record in syslog form (``console_msg_format=syslog``):
  ``<PRI>[  TIME] TEXT`` with PRI = facility * 8 + level on every line of the record.  The
  kernel never lets user space write facility 0 (``devkmsg_write`` turns it into LOG_USER), so a
  line is the kernel's own when its facility is 0.  :func:`panic_message` reads only those, and
  only the headers the kernel prints when it dies, at the start of the text, in their full form
  (a comm-first message such as ``COMM (PID): ...`` cannot reach one: the patterns are longer
  than a task name, or need what follows one).
* The output port carries each program's output as ``ID HEX`` lines (busybox hexdump, 32 bytes
  a line; the last line of a program is padded with blanks) and ``ID .`` when it ends
  (images/init.sh).  :class:`FrameDecoder` turns a byte stream of them back into
  (id, bytes) pieces; a line of any other form is an :class:`OutputFrameError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import OutputFrameError

# <PRI>, then the optional [time] and [caller] fields of printk, then the text.
_KERNEL_LINE = re.compile(r"<(\d{1,4})>(?:\[\s*\d+\.\d+\])?(?:\[\s*[TC]\d+\])?\s?(.*)", re.S)

# The first line of each way the kernel dies, as printk writes it, matched at the start of the
# text.  Die headers (oops_begin/__die_header): "Oops: 0002 [#1] PREEMPT SMP NOPTI",
# "Oops: general protection fault, probably for non-canonical address 0x...: 0000 [#1] SMP"
# (7.x), "general protection fault, ...: 0000 [#1] SMP PTI" and "int3: 0000 [#1] SMP" (6.1).
# The die string before the error code is one of the kernel's own: words, commas, hyphens and a
# hex address, never quotes or slashes (which a path or a task name in a warning could bring).
_DIE_HEADER = r"(?:Oops: )?(?:[\w ,-]+: )?[0-9a-f]{4} \[#\d+\](?: PREEMPT\S*)? SMP\b"
PANIC_RE = re.compile(
    r"Kernel panic - not syncing"
    r"|BUG: kernel NULL pointer dereference"
    r"|BUG: unable to handle"
    r"|kernel BUG at \S+:\d+!"
    r"|VFS: Unable to mount root"
    r"|" + _DIE_HEADER
)
#: the most severe level at which the kernel prints those headers (KERN_DEFAULT is 4 here)
PANIC_MAX_LEVEL = 4


@dataclass(frozen=True)
class KernelRecord:
    facility: int  # 0: the kernel's own; user space gets 1 (LOG_USER) or more
    level: int  # 0 (KERN_EMERG) .. 7 (KERN_DEBUG)
    text: str

    @property
    def from_kernel(self) -> bool:
        return self.facility == 0


def parse_kernel_line(line: str) -> KernelRecord | None:
    """A console line printed in syslog form, or None (a line without a ``<PRI>`` prefix: not a
    printk record, whatever it says)."""
    m = _KERNEL_LINE.match(line)
    if m is None:
        return None
    pri = int(m.group(1))
    return KernelRecord(pri >> 3, pri & 7, m.group(2))


def panic_message(line: str) -> str | None:
    """The text of ``line`` if it is the kernel saying that it died (panic, oops, BUG), else None."""
    rec = parse_kernel_line(line)
    if rec is None or not rec.from_kernel or rec.level > PANIC_MAX_LEVEL:
        return None
    return rec.text if PANIC_RE.match(rec.text) else None


END = None  # the data of an end-of-output frame


def parse_frame(line: str) -> tuple[int, bytes | None]:
    """``ID HEX`` -> (ID, bytes); ``ID .`` -> (ID, None).  Anything else: OutputFrameError."""
    ident, sep, payload = line.partition(" ")
    if not sep or not ident.isdigit() or not ident.isascii():
        raise OutputFrameError(f"output frame without a numeric id: {line[:80]!r}")
    payload = payload.rstrip(" ")
    if payload == ".":
        return int(ident), END
    if not payload or len(payload) > 64 or len(payload) % 2:
        raise OutputFrameError(f"output frame {ident}: {len(payload)} hex digits (want 2 to 64, even): {line[:80]!r}")
    try:
        return int(ident), bytes.fromhex(payload)
    except ValueError:
        raise OutputFrameError(f"output frame {ident}: not hex: {payload[:80]!r}") from None


class FrameDecoder:
    """Bytes of the output port in, (id, bytes or None) pieces out; keeps a partial line for
    the next :meth:`feed`.  Bad lines are not fatal: they are counted and the last few kept."""

    def __init__(self, keep_bad: int = 20):
        self._partial = b""
        self.bad = 0
        self.bad_lines: list[str] = []
        self._keep_bad = keep_bad

    def feed(self, data: bytes) -> list[tuple[int, bytes | None]]:
        *lines, self._partial = (self._partial + data).split(b"\n")
        if len(self._partial) > 4096:  # no frame is that long: garbage without a newline
            lines.append(self._partial)
            self._partial = b""
        out = []
        for raw in lines:
            text = raw.decode("ascii", errors="replace").rstrip("\r")
            if not text:
                continue
            try:
                out.append(parse_frame(text))
            except OutputFrameError as exc:
                self.bad += 1
                if len(self.bad_lines) < self._keep_bad:
                    self.bad_lines.append(str(exc))
        return out
