r"""The unwinder's stacks as ``perf script`` text, so that tools that read perf's text
(stackcollapse-perf.pl, speedscope, Firefox Profiler's importer, ...) read ours.

perf script's layout with call chains (``perf script -F comm,tid,time,period,event,ip,sym,symoff,dso``)::

    callchain-fp-sf     114     0.000016:          1 cpu-clock:
    \t          4016e9 c+0x60 (callchain-fp-sframe-static-64-shadow)
    \t          40175c b+0x25 (callchain-fp-sframe-static-64-shadow)
    <blank line>

A header line per sample (the command, left-aligned as stackcollapse-perf.pl's pattern
``^(\S.+?)\s+(\d+)`` needs it, its thread id, a time in seconds with six decimals and a
colon, the period, the event name and a colon), then one line per frame, innermost first: a tab,
the address in hex, ``symbol+0xoffset`` (``[unknown]`` without a symbol) and the DSO in
parentheses (``[unknown]`` when the address is in no mapped file), and a blank line.

The logs carry no timestamps: a sample's time is its stack record's sequence number in
microseconds, which keeps the records' order.  The DSO is the module's base name, as the records
keep it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO

__all__ = ["EVENT", "sample_text", "write_perf_script"]

EVENT = "cpu-clock"


def sample_text(comm: str, tid: int, seq: int, frames: list) -> str:
    """One sample: its header line, its frames (``[addr, module, "sym+0xoff"]``, innermost first),
    and the blank line that ends it."""
    lines = [f"{comm or '[unknown]':<16} {tid:>6} {seq / 1e6:12.6f}: {1:>10} {EVENT}:"]
    for addr, module, sym in frames:
        lines.append(f"\t{addr:>16x} {sym or '[unknown]'} ({module or '[unknown]'})")
    return "\n".join(lines) + "\n\n"


def write_perf_script(samples: Iterable[tuple[str, int, int, list]], out: IO[str]) -> int:
    """Write ``(comm, tid, seq, frames)`` samples; returns how many."""
    n = 0
    for comm, tid, seq, frames in samples:
        out.write(sample_text(comm, tid, seq, frames))
        n += 1
    return n
