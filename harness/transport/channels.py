"""Pure parsers of what the guest's serial channels carry (no I/O; harness/transport/qemu.py
reads the channels).

* The kernel console (ttyS0) prints each record in syslog form (``console_msg_format=syslog``):
  ``<PRI>[  TIME] TEXT`` with PRI = facility * 8 + level on every line of the record.  The
  kernel never lets user space write facility 0 (``devkmsg_write`` turns it into LOG_USER), so a
  line is the kernel's own when its facility is 0.  :func:`panic_message` reads only those, and
  only the headers the kernel prints when it dies, at the start of the text, in their full form
  (a comm-first message such as ``COMM (PID): ...`` cannot reach one: the patterns are longer
  than a task name, or need what follows one).
* The control channel carries the host's commands to /init as lines of words
  (images/init.sh).  :func:`encode_word` writes a word (a program's path, an argument, a file
  name, a shell command) as one token /init's ``words`` turns back into the same bytes, and
  :func:`control_line` joins a command's tokens into a line the guest's tty takes whole.
* The output port carries each program's output as ``ID HEX`` lines (busybox hexdump, 32 bytes
  a line; the last line of a program is padded with blanks) and ``ID .`` when it ends
  (images/init.sh).  :class:`FrameDecoder` turns a byte stream of them back into
  (id, bytes) pieces; a line of any other form is an :class:`OutputFrameError`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .errors import ControlLineError, OutputFrameError

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


# --- the control channel's words ----------------------------------------------------------------
#
# /init reads each command with ``read -r cmd id rest`` and used to split the rest with
# ``set -- $rest``: a path or an argument with a space became two words, and one with ``*`` a
# list of files (issue 34: "/init: line 89: /user/my: not found", status 127, blamed on the
# program).  Now every word is one token of bytes that neither the tty nor the shell reads as
# anything but themselves: letters, digits and ``_./,:=@+-`` as they are, every other byte
# ``\xHH`` (busybox's ``printf %b`` turns it back: a space, a quote, ``$``, a backquote, ``;``,
# ``*``, a backslash, a newline, a control character, a byte of UTF-8), the empty word ``''``.
# init.sh's ``words`` decodes the tokens into variables and ``eval "set -- $words"`` makes them
# the positional parameters, each one word, as given.

_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./,:=@+-")
EMPTY_WORD = "''"  # the token of the empty word (a quote is never plain: no other token is this)
_TOKEN = re.compile(r"(?:[A-Za-z0-9_./,:=@+-]|\\x[0-9a-f]{2})+")

#: The longest control line the guest takes whole, without its newline: the control port is a
#: tty in canonical mode (init.sh sets only -echo), whose line discipline holds N_TTY_BUF_SIZE
#: = 4096 bytes (drivers/tty/n_tty.c) and keeps the last one for the newline that ends a line:
#: a longer line loses its excess bytes there, and /init would run something else.
CONTROL_LINE_MAX = 4095


def encode_word(word: str | bytes) -> str:
    """One word as a token of a control line (``str``: its bytes as the file system's encoding
    gives them, ``os.fsencode``, so an argument the command line read with surrogate escapes
    goes back to its own bytes).  A NUL byte cannot be in an argument, a path or a shell
    command (execve() and open() end the string there): ControlLineError."""
    data = os.fsencode(word) if isinstance(word, str) else bytes(word)
    if b"\0" in data:
        raise ControlLineError(f"{data[:80]!r}: holds a NUL byte, which no argument, path or command can hold "
                               f"(execve and open end the string at it)")
    if not data:
        return EMPTY_WORD
    return "".join(chr(b) if b in _PLAIN else f"\\x{b:02x}" for b in data)


def decode_word(token: str) -> bytes:
    """The bytes /init's ``words`` makes of a token :func:`encode_word` wrote (its inverse); a
    token it cannot have written is a ControlLineError."""
    if token == EMPTY_WORD:
        return b""
    if not _TOKEN.fullmatch(token):
        raise ControlLineError(f"not a control-line token: {token[:80]!r}")
    out = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "\\":
            out.append(int(token[i + 2:i + 4], 16))
            i += 4
        else:
            out.append(ord(token[i]))
            i += 1
    return bytes(out)


def control_line(command: str, ident: int, *plain: str, words=()) -> str:
    """``COMMAND ID PLAIN... TOKEN...``: a command for /init whose ``plain`` fields are numbers
    or names the harness chose (no space in them) and whose ``words`` are encoded, one token
    each.  A line longer than :data:`CONTROL_LINE_MAX` is a ControlLineError naming the bound."""
    for p in plain:
        if not p or not _TOKEN.fullmatch(p) or "\\" in p:
            raise ControlLineError(f"{command} {ident}: field {p!r} is not a plain word")
    line = " ".join([command, str(ident), *plain, *(encode_word(w) for w in words)])
    if len(line) > CONTROL_LINE_MAX:
        raise ControlLineError(
            f"{command} {ident}: the command line for the guest is {len(line)} bytes once encoded, over "
            f"{CONTROL_LINE_MAX} (the guest's control tty holds N_TTY_BUF_SIZE = 4096 bytes a line, newline "
            f"included; a byte other than letters, digits and _./,:=@+- takes 4): fewer or shorter arguments")
    return line
