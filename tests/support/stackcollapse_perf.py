"""stackcollapse-perf.pl (Brendan Gregg's FlameGraph) in Python, for checking our perf-script text:
its default path line by line (process name included, --tidy-generic on, no --pid/--tid/--addrs,
no annotations, the first event type only).  No package of Debian 12 or PyPI ships the script, so
the test runs this port of its grammar:

- a sample's header: ``^(\\S.+?)\\s+(\\d+)/*(\\d+)*\\s+`` (command, pid or tid, [tid]); the event
  ``:\\s*(\\d+)*\\s+(\\S+):\\s*$`` (period, event name);
- a frame: ``^\\s*(\\w+)\\s*(.+) \\((\\S*)\\)`` (address, symbol, DSO), ``+0x..`` stripped from
  the symbol, ``[unknown]`` replaced by ``[dso base name]`` when the DSO is known;
- a blank line ends the sample: its frames, outermost first, after the command (spaces made
  ``_``), joined by ``;``; identical stacks summed; output sorted.
"""

from __future__ import annotations

import collections
import re

HEADER = re.compile(r"^(\S.+?)\s+(\d+)/*(\d+)*\s+")
EVENT = re.compile(r":\s*(\d+)*\s+(\S+):\s*$")
FRAME = re.compile(r"^\s*(\w+)\s*(.+) \((\S*)\)")


class Unrecognized(ValueError):
    pass


def collapse(text: str) -> str:
    collapsed: collections.Counter = collections.Counter()
    stack: list[str] = []
    pname = None
    period = 1
    event_filter = ""
    for line in text.split("\n"):
        if line.startswith("#"):
            continue
        if line == "":
            if not pname:
                continue
            stack.insert(0, pname)
            collapsed[";".join(stack)] += period
            stack, pname = [], None
            continue
        m = HEADER.match(line)
        if m:
            comm = m.group(1)
            period = 1
            e = EVENT.search(line)
            if e:
                period = int(e.group(1)) if e.group(1) else 1
                if not event_filter:
                    event_filter = e.group(2)
                elif e.group(2) != event_filter:
                    continue
            pname = comm.replace(" ", "_")
            continue
        m = FRAME.match(line)
        if m:
            if not pname:
                continue
            pc, rawfunc, mod = m.groups()
            rawfunc = re.sub(r"\+0x[\da-f]+$", "", rawfunc)
            if rawfunc.startswith("("):
                continue
            inline = []
            for func in rawfunc.split("->"):
                if func == "[unknown]":
                    func = "[" + (re.sub(r".*/", "", mod) if mod != "[unknown]" else "unknown") + "]"
                func = func.replace(";", ":")
                if not re.search(r"\.\(.*\)\.", func):
                    func = re.sub(r"\((?!anonymous namespace\)).*", "", func)
                func = func.replace('"', "").replace("'", "")
                inline.append(func)
            stack[0:0] = inline
            continue
        raise Unrecognized(f"Unrecognized line: {line!r}")
    return "".join(f"{k} {collapsed[k]}\n" for k in sorted(collapsed))
