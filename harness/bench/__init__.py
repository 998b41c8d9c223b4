"""Benchmarks (a driver room): each measures one layer and returns its figures as data; the
renderers are in :mod:`harness.report.bench` and ``harness bench`` (:mod:`harness.commands.bench`)
prints them.

* :mod:`.transport`: what a stop and a read cost through each debugger transport (a guest);
* :mod:`.unwind`: the unwind model's throughput on synthetic deep stacks (no guest);
* :mod:`.sframe`: lookups per second in a real binary's SFrame section (no guest);
* :mod:`.live`: programs per minute of the live half of ``harness fuzz`` (a guest for the batch).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["timed"]


def timed(fn: Callable[[], object], n: int) -> list[float]:
    """Wall seconds of each of ``n`` calls of ``fn``."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out
