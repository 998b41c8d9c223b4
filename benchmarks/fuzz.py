"""``harness fuzz``'s throughput: generated programs per minute in each mode, figures printed,
nothing asserted.

    PYTHONPATH=. .venv/bin/python benchmarks/fuzz.py [--seconds 60] [--toolchains host,trixie,sid]

Static mode: a campaign without shrinking (:func:`harness.fuzz.campaign.run` with ``shrink=False``:
every second goes to drawing, rendering, building and checking) for ``--seconds``; the figure is
programs per minute, and the instructions compared per program.  Live mode is harness.fuzz.live's
(another branch): its column says so while that module is absent.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
from pathlib import Path

from harness.fuzz.build import LINKERS, TOOLCHAINS, linker_available
from harness.fuzz.campaign import run
from harness.fuzz.static import StaticChecker


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--toolchains", default=",".join(TOOLCHAINS))
    args = ap.parse_args(argv)
    toolchains = tuple(args.toolchains.split(","))
    linkers = tuple(x for x in LINKERS if linker_available("host", x))
    work = Path(tempfile.mkdtemp(prefix="harness-fuzz-bench-"))
    try:
        checker = StaticChecker()
        camp = run(checker, work, seeds=(0, 1_000_000), budget=args.seconds, toolchains=toolchains,
                   linkers=linkers, shrink=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per_min = camp.programs / camp.elapsed * 60 if camp.elapsed else 0.0
    try:
        importlib.import_module("harness.fuzz.live")
        live = "see harness.fuzz.live's benchmark"
    except ModuleNotFoundError:
        live = "n/a (live mode: harness.fuzz.live)"
    print(f"{'mode':8} {'programs/min':>14}  detail")
    print(f"{'static':8} {per_min:14.1f}  {camp.programs} programs in {camp.elapsed:.0f} s on "
          f"{','.join(toolchains)} x {','.join(linkers)}; {checker.instructions / max(camp.programs, 1):.0f} "
          f"instructions compared per program; {len(camp.records)} signatures")
    print(f"{'live':8} {live:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
