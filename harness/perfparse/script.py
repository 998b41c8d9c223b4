r"""``perf script``'s text, parsed back into entries: a pure parser with typed errors.

The layout is the one perf 7.3 prints with ``-F comm,pid,tid,time,event,period,ip,sym,symoff,dso``
(tools/perf/builtin-script.c: ``perf_sample__fprintf_start()`` for the header,
``sample__fprintf_callchain()`` for the frames), as measured on Debian's linux-perf 7.3.4 in the
guest::

    callchain-fp-sf     102/102         4.561002:    5000000 cpu-clock:
    \tffffffff8214bae5 do_syscall_64+0x55 ([kernel.kallsyms])
    \t          4016e9 c+0x60 (/progs/host/callchain-fp-sframe-static-64-shadow)
    <blank line>

and, with ``--no-merge-callchains``, a sample's user part replaced by its cookie
(``\t       500000001 (cookie) ([unknown])``) and each ``PERF_RECORD_CALLCHAIN_DEFERRED`` printed
as an entry of its own::

    perfcc-fp-sfram     101/101         4.529139: DEFERRED CALLCHAIN [cookie: 500000001]
    \t          455dc6 _dl_early_allocate+0x46 (/progs/host/perfcc-fp-sframe-static-64)

A header line starts at column 0: the command (``%-16s``, possibly with spaces: the rest of the
line is matched from the right), ``pid/tid``, the time in seconds with six decimals (perf
truncates nanoseconds to microseconds) and a colon, then either ``PERIOD EVENT:`` or
``DEFERRED CALLCHAIN [cookie: HEX]``.  A frame line starts with a tab: the address in hex, the
symbol (``name+0xoff``, ``[unknown]``, or ``(cookie)`` for a deferred marker's cookie) and the DSO
in parentheses.  A blank line ends an entry.  Anything else (perf's warnings on stderr belong
elsewhere) is a :class:`ScriptFormatError` naming the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import EXIT_USAGE, HarnessError

__all__ = ["COOKIE_SYMBOL", "Frame", "ScriptEntry", "ScriptFormatError", "parse_script"]

COOKIE_SYMBOL = "(cookie)"

_HEADER = re.compile(
    r"^(?P<comm>\S.*?)\s+(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+(?P<sec>\d+)\.(?P<usec>\d{6}):\s+"
    r"(?:(?P<period>\d+)\s+(?P<event>\S+?):|DEFERRED CALLCHAIN \[cookie: (?P<cookie>[0-9a-f]+)\])\s*$")
_FRAME = re.compile(r"^\t\s*(?P<ip>[0-9a-f]+) (?P<sym>.*?) \((?P<dso>[^()]*|\[unknown\])\)\s*$")


class ScriptFormatError(HarnessError, ValueError):
    """perf script text that does not follow the layout above; names the line and why."""

    exit_code = EXIT_USAGE  # bad input

    def __init__(self, message: str, *, line: int, text: str) -> None:
        self.line = line
        self.text = text
        super().__init__(f"perf script line {line}: {message}: {text[:120]!r}")


@dataclass(frozen=True)
class Frame:
    ip: int
    symbol: str  # "name+0xoff", "[unknown]" or "(cookie)"
    dso: str

    @property
    def is_cookie(self) -> bool:
        return self.symbol == COOKIE_SYMBOL


@dataclass(frozen=True)
class ScriptEntry:
    line: int  # of the header, 1-based
    comm: str
    pid: int
    tid: int
    time_us: int  # the printed time in microseconds
    event: str  # the event name, or "" for a deferred callchain
    period: int | None
    cookie: int | None  # DEFERRED CALLCHAIN entries: the cookie of the header
    frames: tuple[Frame, ...]

    @property
    def deferred(self) -> bool:
        """A ``DEFERRED CALLCHAIN`` entry (``--no-merge-callchains``)."""
        return self.event == ""

    @property
    def ips(self) -> tuple[int, ...]:
        """The printed addresses, a trailing cookie line left out."""
        return tuple(f.ip for f in self.frames if not f.is_cookie)

    @property
    def sample_cookie(self) -> int | None:
        """The cookie a sample's deferred user part was replaced with (unmerged), else None."""
        return next((f.ip for f in self.frames if f.is_cookie), None)


def parse_script(text: str) -> list[ScriptEntry]:
    """Every entry of ``perf script`` output, in order."""
    out: list[ScriptEntry] = []
    head: tuple[int, re.Match] | None = None
    frames: list[Frame] = []

    def close() -> None:
        nonlocal head, frames
        if head is not None:
            n, m = head
            out.append(ScriptEntry(
                n, m["comm"], int(m["pid"]), int(m["tid"]), int(m["sec"]) * 1_000_000 + int(m["usec"]),
                m["event"] or "", int(m["period"]) if m["period"] else None,
                int(m["cookie"], 16) if m["cookie"] else None, tuple(frames)))
        head, frames = None, []

    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            close()
            continue
        if line.startswith("\t"):
            if head is None:
                raise ScriptFormatError("a frame line outside an entry", line=n, text=line)
            m = _FRAME.match(line)
            if not m:
                raise ScriptFormatError("not a frame line (tab, hex address, symbol, (dso))", line=n, text=line)
            frames.append(Frame(int(m["ip"], 16), m["sym"], m["dso"]))
            continue
        if head is not None:
            raise ScriptFormatError("a header line without a blank line before it", line=n, text=line)
        m = _HEADER.match(line)
        if not m:
            raise ScriptFormatError("not a header line (comm pid/tid time: period event: | DEFERRED CALLCHAIN)",
                                    line=n, text=line)
        head = (n, m)
    close()
    return out
