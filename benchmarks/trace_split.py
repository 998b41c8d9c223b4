"""Where a trace's wall time goes, and what moving the checks off the harness's thread could give.

Two measurements on ``harness bench deferred``'s scenario (fp-syscall, no jitter), one guest:

* ``--split``: how long the harness holds the guest at each stop (from the stop reply read to
  the next continue written), as quartiles for the even and the odd stops of the loop (a trace
  is an NMI stop and a delivery stop, so one row is each), and the time blocked on a stop reply;
* ``--no-checks``: the loop with the checks (``DeliveryWork._check``) skipped, alternated with
  the normal loop, each after its own floor: an upper bound of a worker process doing the checks
  (the stack records are not written then).

    PYTHONPATH=. .venv/bin/python benchmarks/trace_split.py --split
    PYTHONPATH=. .venv/bin/python benchmarks/trace_split.py --no-checks --rounds 3

The figures of 2026-12-08 are in docs/benchmarks.md; a loaded machine moves them: say so next to
them.  (Instruments by wrapping the transport's and the delivery's methods for the process: a
benchmark's business, not the harness's.)
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time


def _quartiles(xs: list[float]) -> str:
    xs = sorted(xs)
    if not xs:
        return "-"
    return " / ".join(f"{1e6 * xs[min(int(len(xs) * f), len(xs) - 1)]:.0f}" for f in (0.1, 0.25, 0.5, 0.75, 0.9))


def split(sess, sc) -> None:
    from harness.scenarios.engine import Engine
    from harness.transport import rsp

    held: list[float] = []
    blocked: list[float] = []
    at: list[float | None] = [None]
    read_packet, write_packets = rsp.RspTarget._read_packet, rsp.RspTarget._write_packets

    def timed_read(self, deadline):
        t0 = time.perf_counter()
        reply = read_packet(self, deadline)
        if reply[:1] in (b"T", b"S"):  # a stop reply
            t1 = time.perf_counter()
            blocked.append(t1 - t0)
            at[0] = t1
        return reply

    def timed_write(self, cmds, kind=None):
        if at[0] is not None and any(c.startswith(b"vCont;c") for c in cmds):
            held.append(time.perf_counter() - at[0])
            at[0] = None
        return write_packets(self, cmds, kind)

    rsp.RspTarget._read_packet, rsp.RspTarget._write_packets = timed_read, timed_write
    try:
        engine = Engine(sess, sc)
        r = engine.run()
    finally:
        rsp.RspTarget._read_packet, rsp.RspTarget._write_packets = read_packet, write_packets
    n = max(r.sampled, 1)
    print(f"{r.sampled} traces in {r.loop_seconds:.2f}s ({r.sampled / r.loop_seconds:.1f} traces/s), "
          f"CPU a trace {1e3 * engine.loop_cost.cpu / n:.3f} ms")
    print(f"guest held from a stop to its continue, q10/q25/q50/q75/q90 us: even stops {_quartiles(held[0::2])}; "
          f"odd stops {_quartiles(held[1::2])}; {1e3 * sum(held) / n:.3f} ms a trace")
    ov = engine.overlap
    print(f"blocked on a stop reply: {1e3 * sum(blocked) / n:.3f} ms a trace, "
          f"median {1e6 * statistics.median(blocked):.0f} us; "
          f"next stop already waiting after {ov['late']} of {ov['deliveries']} checks")


def no_checks(sess, sc, prog, rounds: int) -> None:
    from harness.scenarios.delivery import DeliveryWork
    from harness.scenarios.engine import Engine, raw_stop_rate

    check = DeliveryWork._check
    try:
        for _ in range(rounds):
            for mode in ("normal", "no checks"):
                DeliveryWork._check = check if mode == "normal" else (lambda self, d: None)
                floor = raw_stop_rate(sess, prog)
                engine = Engine(sess, sc)
                r = engine.run()
                rate = r.sampled / r.loop_seconds
                cpu = engine.loop_cost.cpu / max(r.sampled, 1)
                ov = engine.overlap
                print(f"{mode:9s}  floor {floor:7.1f} stops/s  {rate:6.1f} traces/s  harness time a trace "
                      f"{1e3 * (1 / rate - 2 / floor):6.3f} ms  CPU a trace {1e3 * cpu:.3f} ms  "
                      f"next stop already waiting {ov['late']} of {ov['deliveries']}", flush=True)
    finally:
        DeliveryWork._check = check


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--split", action="store_true", help="the stops' hold times and the waits (one run)")
    what.add_argument("--no-checks", action="store_true", help="the loop without its checks, alternated with it")
    ap.add_argument("--rounds", type=int, default=3, help="--no-checks: pairs of runs")
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--qemu", default="backports", help="host (7.2) or backports (11.x)")
    args = ap.parse_args(argv)

    from harness.scenarios.catalog import CATALOG, programs_for
    from harness.session import GuestSpec, Session

    sc = dataclasses.replace(CATALOG["fp-syscall"], samples=args.samples, jitter=0.0)
    with Session(GuestSpec(programs=programs_for([sc]), qemu=args.qemu, pin=None)) as sess:
        print(f"qemu: {sess.qemu.banner}; cpus: {sess.pinned or sess.unpinned}")
        if args.split:
            split(sess, sc)
        else:
            no_checks(sess, sc, sess.program(sc.program, sc.toolchain, sc.variant), args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
