"""The function index of ``objdump --sframe``'s text: each function objdump lists, and where each
of its rows starts, as objdump printed them.

What the lookup and FDE-range tests read of objdump's own output.  It renders nothing: the whole
text is compared byte for byte with ``harness sframe dump`` (tests/unit/report/test_sframe_dump.py),
so the rows read here are also ours, row for row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FUNC = re.compile(r"^    func idx \[(\d+)\]: pc = 0x([0-9a-f]+), size = (\d+) bytes")
_HEAD = re.compile(r"^    STARTPC(\[m\])? ")
_ROW = re.compile(r"^    ([0-9a-f]{16})  ")


@dataclass
class Function:
    idx: int
    pc: int
    size: int
    pcmask: bool = False  # "STARTPC[m]": each row's start is an offset in the repeated block
    starts: list[int] = field(default_factory=list)  # each row's STARTPC, as printed


def functions(text: str) -> list[Function]:
    """Every function of every SFrame section dumped in ``text``, in the order printed."""
    out: list[Function] = []
    for line in text.splitlines():
        if m := _FUNC.match(line):
            out.append(Function(int(m[1]), int(m[2], 16), int(m[3])))
        elif out and (m := _HEAD.match(line)):
            out[-1].pcmask = m[1] is not None
        elif out and (m := _ROW.match(line)):
            out[-1].starts.append(int(m[1], 16))
    return out
