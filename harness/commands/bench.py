"""``harness bench transport|unwind|deferred|soak``: benchmarks that print figures."""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from ..errors import EXIT_FAILURES, EXIT_INFRA, EXIT_OK, EXIT_USAGE
from ..soak.spec import SoakSpec
from . import arg, command, positive_float, positive_int, sample_count
from ._guest import GUEST_ARGS, guest_spec

#: bench deferred's requests by default: enough that its first traces (each binary's tables and
#: the interpreter's warm-up: 1.1-1.2 ms of the harness's CPU a trace against 0.95-1.0 later)
#: are a small part of the rate
BENCH_SAMPLES = 1000


@command("bench", help="benchmarks that print figures", args=[
    arg("what", choices=("transport", "unwind", "deferred", "soak")),
    arg("--samples", type=sample_count, help=f"requests for bench deferred (default {BENCH_SAMPLES})"),
    arg("--perf-freq", type=positive_int, default=1000,
        help="bench deferred: perf's sampling frequency for the guest kernel's own deferred rate"),
    arg("--perf-seconds", type=positive_float, default=2.0,
        help="bench deferred: seconds of perf sampling for the guest kernel's own deferred rate"),
    *GUEST_ARGS,
    arg("--requests", type=sample_count, default=SoakSpec.requests,
        help=f"bench soak: requests on the program's tasks (default {SoakSpec.requests})"),
    arg("--tasks", type=positive_int, default=SoakSpec.tasks,
        help=f"bench soak: worker tasks (default {SoakSpec.tasks})"),
    arg("--cancel-every", type=positive_int, default=SoakSpec.cancel_every,
        help=f"bench soak: requests between two cancel + re-register cycles (default {SoakSpec.cancel_every})"),
    arg("--nmi-share", type=float, default=SoakSpec.nmi_share,
        help=f"bench soak: the share of NMI requests, the rest timer interrupts (default {SoakSpec.nmi_share})"),
    arg("--seed", type=int, default=SoakSpec.seed, help="bench soak: seed of the NMI/timer draw and jitter"),
    arg("--out", help="bench soak: directory for the run's log (default runs/)"),
], defaults={"smp": None})  # bench soak: 2 vCPUs unless --smp says otherwise; the others: 1
def cmd_bench(args) -> int:
    if args.smp is None:
        args.smp = 2 if args.what == "soak" else 1
    return {"transport": _bench_transport, "unwind": _bench_unwind, "deferred": _bench_deferred,
            "soak": _bench_soak}[args.what](args)


def _bench_transport(args) -> int:
    from ..bench.transport import bench_transport
    from ..report.bench import transport_table
    from ..report.text import qemu_line
    from ..session import Session
    with Session(guest_spec(args)) as sess:
        sess.target.close()
        sess.target = None
        print(qemu_line(sess.qemu))
        print(transport_table(bench_transport(sess.machine, program=sess.program("callchain").guest_path)))
    return EXIT_OK


def _bench_unwind(args) -> int:
    from ..bench.sframe import bench_lookups
    from ..bench.unwind import bench_fp, bench_mixed
    from ..images.programs import Variant, build_program
    from ..images.toolchain import get_toolchain
    from ..report.bench import sframe_line, unwind_line
    print(unwind_line(bench_fp()))
    print(unwind_line(bench_mixed()))
    big = build_program("sframe_many", get_toolchain("sid"), Variant(frame_pointers=False))
    print(sframe_line(bench_lookups(big.path), "sframe_many, sid, V3"))
    return EXIT_OK


def _bench_deferred(args) -> int:
    from ..perf.capture import PERFCC, CaptureError, PerfSpec, capture
    from ..perf.rate import deferred_rate
    from ..perfparse.records import PerfFormatError, parse_capture
    from ..progress import sampling_reporter
    from ..report.bench import deferred_lines
    from ..report.text import qemu_line
    from ..scenarios.catalog import CATALOG, programs_for
    from ..scenarios.engine import Engine, raw_stop_rate
    from ..session import Session
    sc = dataclasses.replace(CATALOG["fp-syscall"], samples=args.samples or BENCH_SAMPLES, jitter=0.0)
    with Session(guest_spec(args, [*programs_for([sc]), PERFCC])) as sess:
        print(qemu_line(sess.qemu))
        print(f"cpus: {sess.pinned or sess.unpinned or 'not pinned (--no-pin)'}")
        normal = "normal priority (--rt: QEMU main loop at SCHED_FIFO, answers before the harness work)"
        print(f"stub: {sess.realtime or normal}")
        prog = sess.program(sc.program, sc.toolchain, sc.variant)
        floor = raw_stop_rate(sess, prog)
        engine = Engine(sess, sc, progress=sampling_reporter())
        r = engine.run()
        # The second anchor: the guest kernel's own deferred unwinding of the same program, in
        # the same guest, under perf with defer_callchain (tiny stack dumps: only the rate counts).
        pspec = PerfSpec(seconds=args.perf_seconds, freq=args.perf_freq, stack_bytes=8, defer=True)
        try:
            kernel = deferred_rate(parse_capture(capture(sess, [prog.guest_path, *sc.args], pspec)))
            why = ""
        except (CaptureError, PerfFormatError) as exc:
            kernel, why = None, str(exc).splitlines()[0]
    for line in deferred_lines(r, floor, kernel, why, pspec.freq, engine.loop_cost, engine.overlap):
        print(line)
    # A rate is only worth its stacks: the exit code says whether they held (README, exit codes).
    if r.errors or r.problems:
        return EXIT_INFRA
    if r.failed_stacks or r.invariant_violations:
        return EXIT_FAILURES
    return EXIT_OK


def _bench_soak(args) -> int:
    """``harness bench soak``: the soak's figures (harness/soak/engine.py); exit 1 when a
    request was lost, a callback duplicated, a cookie reused or a stack failed, 3 on errors."""
    from ..progress import sampling_reporter
    from ..report.soak import soak_lines
    from ..report.text import qemu_line
    from ..session import Session
    from ..soak.engine import PROGRAM, run_soak
    spec = SoakSpec(requests=args.requests, tasks=args.tasks, cancel_every=args.cancel_every,
                    nmi_share=args.nmi_share, seed=args.seed)
    if not 0.0 <= spec.nmi_share <= 1.0:
        print(f"harness bench: --nmi-share must be between 0 and 1, not {spec.nmi_share}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out) if args.out else Path("runs")
    out.mkdir(parents=True, exist_ok=True)
    log_path = Path(tempfile.mkdtemp(prefix=time.strftime("soak-%Y%m%d-%H%M%S-"), dir=out)) / "soak.jsonl"
    with Session(guest_spec(args, [PROGRAM])) as sess:
        print(qemu_line(sess.qemu))
        print(f"kernel {sess.kernel.package}={sess.kernel.version} ({sess.accel}, {args.smp} vCPUs)")
        rep = run_soak(sess, spec, log_path, progress=sampling_reporter())
    for line in soak_lines(rep):
        print(line)
    if rep.errors:
        return EXIT_INFRA
    return EXIT_OK if rep.ok else EXIT_FAILURES
