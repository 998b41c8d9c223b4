"""``harness fuzz``'s throughput: generated programs per minute in each mode, figures printed,
nothing asserted.

    PYTHONPATH=. .venv/bin/python benchmarks/fuzz.py [--seconds 60] [--live-seconds 120] [--toolchains host,trixie,sid]

Static mode: a campaign without shrinking (:func:`harness.fuzz.campaign.run` with ``shrink=False``:
every second goes to drawing, rendering, building and checking) for ``--seconds``; the figure is
programs per minute, and the instructions compared per program.  Live mode: the same campaign
with the live checker (:class:`harness.fuzz.live.LiveChecker`: a guest per program, 20 samples)
for ``--live-seconds`` (0: skipped); its figure includes each program's boot, as a campaign pays it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from harness.fuzz.build import DEFAULT_TOOLCHAINS, LINKERS, linker_available
from harness.fuzz.campaign import run
from harness.fuzz.live import LiveChecker
from harness.fuzz.static import StaticChecker


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--live-seconds", type=float, default=120.0)
    ap.add_argument("--toolchains", default=",".join(DEFAULT_TOOLCHAINS))
    args = ap.parse_args(argv)
    toolchains = tuple(args.toolchains.split(","))
    linkers = tuple(x for x in LINKERS if linker_available("host", x))
    print(f"{'mode':8} {'programs/min':>14}  detail")
    checker = StaticChecker()
    camp = _campaign(checker, args.seconds, toolchains, linkers)
    print(f"{'static':8} {_per_min(camp):14.1f}  {camp.programs} programs in {camp.elapsed:.0f} s on "
          f"{','.join(toolchains)} x {','.join(linkers)}; {checker.instructions / max(camp.programs, 1):.0f} "
          f"instructions compared per program; {len(camp.records)} signatures", flush=True)
    if args.live_seconds > 0:
        camp = _campaign(LiveChecker(), args.live_seconds, toolchains, linkers)
        print(f"{'live':8} {_per_min(camp):14.1f}  {camp.programs} programs in {camp.elapsed:.0f} s, a guest "
              f"each (boot included), 20 samples each; {len(camp.records)} signatures")
    return 0


def _campaign(checker, seconds: float, toolchains, linkers):
    work = Path(tempfile.mkdtemp(prefix="harness-fuzz-bench-"))
    try:
        return run(checker, work, seeds=(0, 1_000_000), budget=seconds, toolchains=toolchains, linkers=linkers,
                   shrink=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _per_min(camp) -> float:
    return camp.programs / camp.elapsed * 60 if camp.elapsed else 0.0


if __name__ == "__main__":
    sys.exit(main())
