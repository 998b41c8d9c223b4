"""What a soak runs: its parameters, each with its default (``harness bench soak``'s options take
theirs from here).  No harness import: the command line reads it while it builds its parser."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SoakSpec"]


@dataclass(frozen=True)
class SoakSpec:
    requests: int = 10_000  # requests that land on the program's tasks
    tasks: int = 8  # the program's long-lived worker tasks
    work: int = 1 << 20  # spin iterations per child (a worker spins 4x that per round)
    nmi_share: float = 0.5  # the share of requests that are NMIs (the rest: timer interrupts)
    cancel_every: int = 100  # requests between two cancel + re-register cycles (0: none)
    rss_every: int = 1000  # requests between two RSS samples
    tracers: int = 2
    profile: str = "mainline"
    seed: int = 0
