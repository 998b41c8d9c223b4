"""``harness perf``: the guest kernel's own callchains against our unwinder.

    harness perf [--kernel K] [--defer] [--seconds S] [--freq F] [--program NAME] [--args ...]
    harness perf --check FILE            re-check a capture saved with --save, no guest
    harness perf --debian-perf [SCENARIO...] [--save DIR]
                                         Debian's own perf (linux-perf) in the guest: perf record
                                         --call-graph fp,defer, perf script merged and unmerged,
                                         against our stitcher and our unwinder
    harness perf --debian-perf --check DIR   re-check a run saved with --save DIR, no guest

Exit status: 0 when every compared callchain agrees or differs in a named way (and, with --defer,
the deferred records pass their checks), 1 on a failure or when nothing could be compared, 2 when
the capture could not be made or read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..errors import EXIT_FAILURES, EXIT_OK, EXIT_USAGE, HarnessError
from ..images.programs import Variant
from ..perf.spec import PerfSpec
from . import arg, command
from ._guest import GUEST_ARGS, guest_spec

# Arguments per guest program when --args is not given: callchain makes raw syscalls (samples in
# kernel mode too); the others run as the engine's catalog runs them.
DEFAULT_ARGS = {"callchain": ["100000000", "raw"]}

# Catalog scenarios whose programs Debian's perf samples when --debian-perf names none: frame
# pointers with syscalls, dynamic linking, threads, fork/exec/exit, a signal handler, deep
# recursion and 32-bit tasks.
DEBIAN_DEFAULT = ("fp-syscall", "fp-dynamic", "threads", "forkexec", "signal", "recurse", "compat-fp")


def _default_args(name: str) -> list[str]:
    from ..scenarios.catalog import CATALOG
    if name in DEFAULT_ARGS:
        return DEFAULT_ARGS[name]
    return next((list(sc.args) for sc in CATALOG.values() if sc.program == name), [])


def _print(lines) -> None:
    for line in lines:
        print(line)


def _print_report(report, examples: int, header: str) -> int:
    from ..report.perf import nothing_compared, perf_lines
    _print(perf_lines(report, examples, header))
    return EXIT_OK if report.ok and not nothing_compared(report) else EXIT_FAILURES


def _check_file(args) -> int:
    from ..perf.oracle import check_capture
    from ..perfparse.records import PerfFormatError, parse_capture
    from ..perfparse.resolve import load_resolve
    path = Path(args.check)
    try:
        cap = parse_capture(path.read_bytes())
    except (OSError, PerfFormatError) as exc:
        print(f"harness perf: {path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    table = {}
    side = path.with_name(path.name + ".resolve.json")
    try:
        if side.exists():
            table = load_resolve(side.read_text(encoding="utf-8", errors="replace"), str(side))
    except (OSError, PerfFormatError) as exc:
        print(f"harness perf: {side}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = check_capture(cap, table.get)
    except PerfFormatError as exc:
        print(f"harness perf: {path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    header = f"{path}: {cap.info.get('argv', '?')} on {cap.info.get('release', '?')}"
    return _print_report(report, args.examples, header)


@command("perf", help="the guest kernel's perf callchains against our unwinder", description=__doc__.split("\n\n")[0],
         args=[
    arg("--program", default="callchain",
        help="a guest program (guest_programs/NAME.c) or the path of your own binary"),
    arg("--toolchain", default="host", help="toolchain of a guest program (host, trixie, sid)"),
    arg("--variant", default=Variant(shadow=True).tag, help="variant tag of a guest program"),
    arg("--args", nargs=argparse.REMAINDER, help="the program's arguments (the rest of the line)"),
    arg("--defer", action="store_true", help="defer_callchain: user stacks as CALLCHAIN_DEFERRED"),
    arg("--seconds", type=float, default=PerfSpec.seconds),
    arg("--freq", type=int, default=PerfSpec.freq, help="samples per second"),
    arg("--stack", type=int, default=PerfSpec.stack_bytes, help="sample_stack_user bytes (a multiple of 8)"),
    arg("--clock", choices=("cpu", "task"), default=PerfSpec.clock),
    arg("--single", action="store_true", help="one cpu=-1 event on the child, not inherited"),
    arg("--save", help="write the capture here (and FILE.resolve.json)"),
    arg("--check", help="re-check a saved capture instead of booting a guest"),
    arg("--debian-perf", nargs="*", metavar="SCENARIO",
        help="Debian's own perf (linux-perf of the kernel's suite) on these catalog scenarios' programs "
             f"(default: {' '.join(DEBIAN_DEFAULT)}); --save/--check then name a directory"),
    arg("--examples", type=int, default=1, help="print an example of each expected difference (0: none)"),
    *GUEST_ARGS,
])
def cmd_perf(args) -> int:
    from ..images.programs import program_facts
    from ..perf.capture import PERFCC, CaptureError, capture, resolver
    from ..perf.oracle import check_capture
    from ..perfparse.records import PerfFormatError, parse_capture
    from ..session import Session
    if args.debian_perf is not None:
        return cmd_debian_perf(args)
    if args.check:
        return _check_file(args)
    user = os.sep in args.program
    variant = Variant.parse(args.variant)
    progs = [PERFCC] + ([] if user else [(args.program, args.toolchain, variant)])
    spec = guest_spec(args, progs)
    if user:
        spec.user_programs = [args.program]
    pspec = PerfSpec(seconds=args.seconds, freq=args.freq, stack_bytes=args.stack, defer=args.defer,
                     clock=args.clock, inherit=not args.single)
    prog_args = args.args if args.args is not None else ([] if user else _default_args(args.program))
    with Session(spec) as sess:
        if user:
            prog = next(p for p in sess.programs.values() if p.path == Path(args.program).resolve())
        else:
            prog = sess.program(args.program, args.toolchain, variant)
        print(f"perf on {sess.kernel.package}={sess.kernel.version} ({sess.accel}): {prog.guest_path} "
              f"{' '.join(prog_args)}; {pspec}", file=sys.stderr)
        try:
            data = capture(sess, [prog.guest_path, *prog_args], pspec)
        except CaptureError as exc:
            print(f"harness perf: {exc}", file=sys.stderr)
            return EXIT_USAGE
    resolve_table = {}
    resolve = resolver([prog])
    for guest in [prog.guest_path, *(g for _, g in prog.runtime)]:
        resolve_table[guest] = resolve(guest)
    if args.save:
        Path(args.save).write_bytes(data)
        Path(args.save + ".resolve.json").write_text(json.dumps(resolve_table, indent=1))
        print(f"capture saved to {args.save} ({len(data)} bytes)", file=sys.stderr)
    try:
        cap = parse_capture(data)
        report = check_capture(cap, resolve, program_facts(prog.name, prog.toolchain))
    except PerfFormatError as exc:
        print(f"harness perf: the capture does not parse: {exc}", file=sys.stderr)
        return EXIT_USAGE
    header = (f"kernel {sess.kernel.package}={sess.kernel.version} ({cap.info.get('release')}), "
              f"{prog.guest_path} {' '.join(prog_args)}, {pspec.seconds:g}s at {pspec.freq} Hz, "
              f"defer_callchain {cap.info.get('defer')}")
    return _print_report(report, args.examples, header)


def cmd_debian_perf(args) -> int:
    """``--debian-perf``: Debian's perf in the guest on catalog scenarios' programs."""
    from ..images.debperf import get_debian_perf
    from ..images.kernel import get_kernel
    from ..perf.capture import PERFCC
    from ..perf.debian import total
    from ..perf.debian_run import DebianFiles, check_files, check_run, deferred_unsupported, run_debian_perf
    from ..report.perf import debian_lines
    from ..scenarios.catalog import select_scenarios
    from ..session import Session
    if args.check:
        files = DebianFiles.load(Path(args.check))
        side = Path(args.check) / "resolve.json"
        table = json.loads(side.read_text()) if side.exists() else {}
        report = check_files(files, table.get)
        _print(debian_lines(report, args.examples, f"{args.check}: perf {report.perf_version} on {report.release}"))
        return EXIT_OK if report.ok else EXIT_FAILURES
    scenarios = select_scenarios(args.debian_perf, DEBIAN_DEFAULT)
    if args.kernel_path or args.kernel.startswith("tree:"):
        print("harness perf: --debian-perf takes linux-perf of a named kernel's suite, not --kernel-path or "
              "--kernel tree:PATH", file=sys.stderr)
        return EXIT_USAGE
    kernel = get_kernel(args.kernel)
    why = deferred_unsupported(kernel.version)
    if why:
        print(f"harness perf: --debian-perf skipped on {args.kernel} ({kernel.package}={kernel.version}): {why}",
              file=sys.stderr)
        return EXIT_USAGE
    dp = get_debian_perf(args.kernel)
    progs = [PERFCC] + sorted({(sc.program, sc.toolchain, sc.variant) for sc in scenarios}, key=str)
    spec = guest_spec(args, progs)
    spec.extra_files = dict(dp.files)
    reports = []
    with Session(spec) as sess:
        print(f"Debian perf {dp.package} on {sess.kernel.package}={sess.kernel.version} ({sess.accel}), "
              f"{len(scenarios)} scenario(s), {args.seconds:g}s each at {args.freq} Hz", file=sys.stderr)
        for sc in scenarios:
            prog = sess.program(sc.program, sc.toolchain, sc.variant)
            try:
                files = run_debian_perf(sess, prog, list(sc.args), args.seconds, args.freq)
                if args.save:
                    files.save(Path(args.save) / sc.name, prog)
                report = check_run(files, prog)
            except HarnessError as exc:
                if exc.exit_code == EXIT_USAGE:
                    print(f"harness perf: {sc.name}: {exc}", file=sys.stderr)
                    return EXIT_USAGE
                raise
            reports.append(report)
            _print(debian_lines(report, args.examples, f"\n== {sc.name}: {prog.guest_path} {' '.join(sc.args)}"))
    t = total(reports)
    _print(debian_lines(t, 0, f"\n== totals: {len(reports)} scenario(s), perf {t.perf_version}, kernel {t.release}"))
    return EXIT_OK if t.ok else EXIT_FAILURES
