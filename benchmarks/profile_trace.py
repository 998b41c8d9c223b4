"""Profile the deferred benchmark's traces: where a trace's time goes, and its stub round trips.

Runs the scenario ``harness bench deferred`` runs (fp-syscall, no jitter) on a fresh guest under
cProfile and writes, under ``--out``:

* ``LABEL-QEMU.prof``: the raw cProfile data (``python -m pstats``, snakeviz, ...);
* ``LABEL-QEMU.txt``: the summary kept in the repository: the run's figures, gdb-stub packets
  per trace by kind (every packet is one round trip), and the top functions by cumulative and
  by own time.

    PYTHONPATH=. .venv/bin/python benchmarks/profile_trace.py --qemu backports --label after

Figures from a loaded machine are noisy: say so next to them.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import os
import pstats
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qemu", default="host", help="host (7.2) or backports (11.x)")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--label", default="profile", help="file name prefix (before, after, ...)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "profiles"))
    ap.add_argument("--top", type=int, default=35)
    ap.add_argument("--rt", action="store_true", help="QEMU's main loop at SCHED_FIFO (harness bench --rt)")
    ap.add_argument("--cpu", action="store_true",
                    help="profile the thread's CPU time (time.thread_time), not wall time: the waits for "
                         "the stub and the preemptions by QEMU's threads drop out, so a loaded machine "
                         "disturbs the figures less")
    args = ap.parse_args(argv)

    from harness.scenarios.catalog import CATALOG, programs_for
    from harness.scenarios.engine import Engine
    from harness.session import GuestSpec, Session

    sc = dataclasses.replace(CATALOG["fp-syscall"], samples=args.samples, jitter=0.0)
    spec = GuestSpec(programs=programs_for([sc]), qemu=args.qemu, rt=args.rt)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{args.label}-{args.qemu}"
    with Session(spec) as sess:
        target = sess.target
        # First the same run without the profiler: the harness's own CPU a trace (its thread's
        # time, user and system) and the rate, as bench deferred would see them.
        plain = Engine(sess, sc)
        cpu0 = time.thread_time()
        pr = plain.run()
        cpu = (time.thread_time() - cpu0) / max(pr.stacks, 1)
        engine = Engine(sess, sc)
        before = dict(getattr(target, "sent", {}))
        trips0 = getattr(target, "round_trips", 0)
        prof = cProfile.Profile(time.thread_time) if args.cpu else cProfile.Profile()
        t0 = time.monotonic()
        prof.enable()
        r = engine.run()
        prof.disable()
        wall = time.monotonic() - t0
        after = dict(getattr(target, "sent", {}))
        trips = getattr(target, "round_trips", 0) - trips0
        banner = sess.qemu.banner
    sent = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    n = max(r.stacks, 1)
    prof.dump_stats(str(stem) + ".prof")
    lines = [
        f"profile of `harness bench deferred`'s scenario: {sc.name}, {args.samples} samples, no jitter",
        f"qemu: {banner}",
        f"machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"at the end (other helpers' guests share it: figures are noisy)",
        f"traces: {r.stacks} in {r.loop_seconds:.2f}s of sampling loop ({r.stacks / r.loop_seconds:.1f} traces/s); "
        f"run {wall:.2f}s with set-up; stops {r.stops} ({r.stops / n:.2f} per trace)",
        f"without the profiler first: {pr.stacks / pr.loop_seconds:.1f} traces/s, the harness's thread "
        f"{1000 * cpu:.3f} ms of CPU a trace{'; --rt' if args.rt else ''}",
        f"gdb stub round trips per trace: {trips / n:.2f} (exchanges that wait for the stub; 0 = not counted)",
        f"gdb stub packets per trace: {sum(sent.values()) / n:.2f} = "
        + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(sent.items(), key=lambda kv: -kv[1]) if v),
        "",
    ]
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        st = pstats.Stats(prof, stream=buf)
        st.strip_dirs().sort_stats(key).print_stats(args.top)
        text = buf.getvalue()
        # drop pstats' own header lines up to the table
        lines.append(f"== top {args.top} by {key} ==")
        lines.append(text[text.find("   ncalls"):].rstrip())
        lines.append("")
    Path(str(stem) + ".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:7]))
    print(f"wrote {stem}.txt and {stem}.prof", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
