"""The live half of ``harness fuzz`` (:func:`harness.fuzz.live.check_live`): programs checked per
minute in one guest, its boot apart.  The programs are the caller's (built ones: the fuzz
campaign's, or a benchmark's own)."""

from __future__ import annotations

import time

from ..fuzz.live import LIVE_SAMPLES, LiveProgram, check_live

__all__ = ["bench_live"]


def bench_live(programs: list[LiveProgram], *, samples: int = LIVE_SAMPLES, kernel: str | None = None,
               qemu: str | None = None) -> dict:
    """Check ``programs`` live in one guest and return the figures: the wall time of the whole
    call, of the guest's start (the initramfs with the programs, the boot, the kernel's symbols:
    the call's time outside the programs' runs), of the programs' runs, programs per minute with
    and without that start, and the stacks checked."""
    if not programs:
        raise ValueError("bench_live needs at least one program")
    t0 = time.perf_counter()
    outcomes = check_live(programs, samples=samples, kernel=kernel, qemu=qemu)
    total = time.perf_counter() - t0
    run = sum(o.seconds for o in outcomes)
    n = len(programs)
    stacks = sum(o.stacks for o in outcomes)
    return {
        "programs": n,
        "samples": samples,
        "total_seconds": total,
        "boot_seconds": total - run,
        "run_seconds": run,
        "seconds_per_program": run / n,
        "programs_per_minute": 60 * n / run if run else 0.0,
        "programs_per_minute_with_boot": 60 * n / total,
        "stacks": stacks,
        "stacks_per_second": stacks / run if run else 0.0,
        "crashes": sum(o.crash is not None for o in outcomes),
        "with_disagreements": sum(bool(o.disagreements) for o in outcomes),
    }
