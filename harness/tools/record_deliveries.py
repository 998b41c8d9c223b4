"""Record real delivery snapshots for the unit tests (tests/data/deliveries/).

Boots a guest, runs each named scenario with the engine keeping its snapshots, and saves a few
per scenario (the first stack, and the first of each cause it saw) with the ``stack`` record the
engine wrote, the task's maps and the program's identity (source, toolchain, variant, and a
sha256 of what it maps)::

    PYTHONPATH=. .venv/bin/python -m harness.tools.record_deliveries OUT_DIR fp-spin signal ...

``--point exit`` keeps only the stacks delivered at that stop point (the exit stops of forkexec's
children, say), ``--name`` names the saved directories (``forkexec-syscall-exit-0`` ...).

tests/unit/scenarios/test_snapshot_deliveries.py replays them without a guest and expects the same records.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from ..scenarios.catalog import CATALOG, programs_for
from ..scenarios.engine import Engine
from ..scenarios.snapshot import save
from ..session import GuestSpec, Session


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("scenarios", nargs="+")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--per-scenario", type=int, default=2)
    ap.add_argument("--qemu", default=None)
    ap.add_argument("--point", default=None, help="only stacks delivered at this stop point (exit, get_signal, ...)")
    ap.add_argument("--name", default=None, help="the saved directories' prefix (default: the scenario's name)")
    args = ap.parse_args(argv)

    scs = [dataclasses.replace(CATALOG[n], samples=args.samples) for n in args.scenarios]
    out = Path(args.out)
    with Session(GuestSpec(programs=programs_for(scs), qemu=args.qemu)) as sess:
        for sc in scs:
            engine = Engine(sess, sc, keep_snapshots=True)
            engine.run()
            program = engine.program_identity()
            chosen, seen = [], set()
            for snap, rec in engine.snapshots:
                if snap.own is None or args.point is not None and snap.point.name != args.point:
                    continue
                causes = {d["cause"] for v in rec["verdicts"] for d in v.get("divergences", []) if d.get("cause")}
                if not chosen or causes - seen:
                    chosen.append((snap, rec))
                    seen |= causes
                if len(chosen) >= args.per_scenario:
                    break
            for k, (snap, rec) in enumerate(chosen):
                path = save(out / f"{args.name or sc.name}-{k}", snap, rec, engine.maps, program, engine.vdso_image())
                print(f"{path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
