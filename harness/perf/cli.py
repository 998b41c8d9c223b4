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

from ..images.programs import Variant

# Arguments per guest program when --args is not given: callchain makes raw syscalls (samples in
# kernel mode too); the others run as the engine's catalog runs them.
DEFAULT_ARGS = {"callchain": ["100000000", "raw"]}


def _default_args(name: str) -> list[str]:
    if name in DEFAULT_ARGS:
        return DEFAULT_ARGS[name]
    from ..scenarios.catalog import CATALOG

    return next((list(sc.args) for sc in CATALOG.values() if sc.program == name), [])


def _print_report(report, examples: int, header: str) -> int:
    print(header)
    print(report.table())
    for kind, text in sorted(report.examples.items()) if examples > 0 else ():
        print(f"\nexample of '{kind}':\n{text}")
    for f in report.failures[:5]:
        print(f"\nFAILURE: {f}")
    if len(report.failures) > 5:
        print(f"\n... and {len(report.failures) - 5} more failures")
    d = report.deferred
    if d is not None:
        for kind, text in sorted(d.examples.items()) if examples > 0 else ():
            print(f"\nexample of deferred '{kind}':\n{text}")
        for f in d.failures[:5]:
            print(f"\nDEFERRED FAILURE: {f}")
        for v in d.violations[:10]:
            print(f"\nDEFERRED VIOLATION: {v}")
    for n in report.notes:
        print(f"note: {n}")
    nothing = report.compared == 0 and (d is None or d.compared == 0)
    if nothing:
        print("\nnothing was compared: no sample had a user callchain and user registers")
    return 0 if report.ok and not nothing else 1


def load_resolve(text: str, source: str = "resolve.json") -> dict[str, str | None]:
    """The table ``--save`` writes beside a capture (``FILE.resolve.json``): a JSON object from
    guest paths to host paths (or null where the guest file has no host copy).  Anything else
    raises :class:`~harness.perf.records.PerfFormatError` naming what is wrong."""
    from .records import PerfFormatError

    try:
        table = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PerfFormatError(f"{source} is not JSON ({exc.msg})", field="resolve", offset=exc.pos) from None
    except RecursionError:
        raise PerfFormatError(f"{source} nests too deep to be a resolve table", field="resolve", offset=0) from None
    if not isinstance(table, dict):
        raise PerfFormatError(f"{source} holds a JSON {type(table).__name__}, not an object of guest path: host path",
                              field="resolve", offset=0)
    for guest, host in table.items():
        if not isinstance(host, str) and host is not None:
            raise PerfFormatError(f"{source}: the host path of {guest!r} is {host!r}, not a string or null",
                                  field="resolve", offset=0)
        if host is not None and "\0" in host:
            raise PerfFormatError(f"{source}: the host path of {guest!r} holds a NUL byte", field="resolve", offset=0)
    return table


def _check_file(args) -> int:
    from .oracle import check_capture
    from .records import PerfFormatError, parse_capture

    path = Path(args.check)
    try:
        cap = parse_capture(path.read_bytes())
    except (OSError, PerfFormatError) as exc:
        print(f"harness perf: {path}: {exc}", file=sys.stderr)
        return 2
    table = {}
    side = path.with_name(path.name + ".resolve.json")
    try:
        if side.exists():
            table = load_resolve(side.read_text(encoding="utf-8", errors="replace"), str(side))
    except (OSError, PerfFormatError) as exc:
        print(f"harness perf: {side}: {exc}", file=sys.stderr)
        return 2
    try:
        report = check_capture(cap, table.get)
    except PerfFormatError as exc:
        print(f"harness perf: {path}: {exc}", file=sys.stderr)
        return 2
    return _print_report(report, args.examples, f"{path}: {cap.info.get('argv', '?')} on {cap.info.get('release', '?')}")


def cmd_perf(args, spec_for) -> int:
    if args.debian_perf is not None:
        return cmd_debian_perf(args, spec_for)
    if args.check:
        return _check_file(args)
    from ..scenarios.catalog import program_facts
    from ..session import Session
    from .capture import PERFCC, CaptureError, PerfSpec, capture, resolver
    from .oracle import check_capture
    from .records import PerfFormatError, parse_capture

    user = os.sep in args.program
    variant = Variant.parse(args.variant)
    progs = [PERFCC] + ([] if user else [(args.program, args.toolchain, variant)])
    spec = spec_for(args, progs)
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
            return 2
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
        return 2
    header = (f"kernel {sess.kernel.package}={sess.kernel.version} ({cap.info.get('release')}), "
              f"{prog.guest_path} {' '.join(prog_args)}, {pspec.seconds:g}s at {pspec.freq} Hz, "
              f"defer_callchain {cap.info.get('defer')}")
    return _print_report(report, args.examples, header)


# Catalog scenarios whose programs Debian's perf samples when --debian-perf names none: frame
# pointers with syscalls, dynamic linking, threads, fork/exec/exit, a signal handler, deep
# recursion and 32-bit tasks.
DEBIAN_DEFAULT = ("fp-syscall", "fp-dynamic", "threads", "forkexec", "signal", "recurse", "compat-fp")


def _print_debian(report, examples: int, header: str) -> None:
    print(header)
    print(report.table())
    for kind, text in sorted(report.examples.items()) if examples > 0 else ():
        print(f"\nexample of '{kind}':\n{text}")
    for f in report.unexplained[:5]:
        print(f"\nUNEXPLAINED: {f}")
    if len(report.unexplained) > 5:
        print(f"\n... and {len(report.unexplained) - 5} more")


def cmd_debian_perf(args, spec_for) -> int:
    """``--debian-perf``: Debian's perf in the guest on catalog scenarios' programs."""
    from ..errors import HarnessError
    from ..scenarios.catalog import select_scenarios
    from .debian import total
    from .debian_run import DebianFiles, check_files, check_run, deferred_unsupported, run_debian_perf

    if args.check:
        files = DebianFiles.load(Path(args.check))
        side = Path(args.check) / "resolve.json"
        table = json.loads(side.read_text()) if side.exists() else {}
        report = check_files(files, table.get)
        _print_debian(report, args.examples, f"{args.check}: perf {report.perf_version} on {report.release}")
        return 0 if report.ok else 1
    scenarios = select_scenarios(args.debian_perf, DEBIAN_DEFAULT)
    if args.kernel_path:
        print("harness perf: --debian-perf takes linux-perf of a named kernel's suite, not --kernel-path",
              file=sys.stderr)
        return 2
    from ..images.debperf import get_debian_perf
    from ..images.kernel import get_kernel
    from ..session import Session
    from .capture import PERFCC

    kernel = get_kernel(args.kernel)
    why = deferred_unsupported(kernel.version)
    if why:
        print(f"harness perf: --debian-perf skipped on {args.kernel} ({kernel.package}={kernel.version}): {why}",
              file=sys.stderr)
        return 2
    dp = get_debian_perf(args.kernel)
    progs = [PERFCC] + sorted({(sc.program, sc.toolchain, sc.variant) for sc in scenarios}, key=str)
    spec = spec_for(args, progs)
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
                if exc.exit_code == 2:
                    print(f"harness perf: {sc.name}: {exc}", file=sys.stderr)
                    return 2
                raise
            reports.append(report)
            _print_debian(report, args.examples, f"\n== {sc.name}: {prog.guest_path} {' '.join(sc.args)}")
    t = total(reports)
    _print_debian(t, 0, f"\n== totals: {len(reports)} scenario(s), perf {t.perf_version}, kernel {t.release}")
    return 0 if t.ok else 1


def add_cli(subparsers, guest_args, spec_for) -> argparse.ArgumentParser:
    p = subparsers.add_parser("perf", help="the guest kernel's perf callchains against our unwinder",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--program", default="callchain",
                   help="a guest program (guest_programs/NAME.c) or the path of your own binary")
    p.add_argument("--toolchain", default="host", help="toolchain of a guest program (host, trixie, sid)")
    p.add_argument("--variant", default=Variant(shadow=True).tag, help="variant tag of a guest program")
    p.add_argument("--args", nargs=argparse.REMAINDER, help="the program's arguments (the rest of the line)")
    p.add_argument("--defer", action="store_true", help="defer_callchain: user stacks as CALLCHAIN_DEFERRED")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--freq", type=int, default=200, help="samples per second")
    p.add_argument("--stack", type=int, default=16384, help="sample_stack_user bytes (a multiple of 8)")
    p.add_argument("--clock", choices=("cpu", "task"), default="cpu")
    p.add_argument("--single", action="store_true", help="one cpu=-1 event on the child, not inherited")
    p.add_argument("--save", help="write the capture here (and FILE.resolve.json)")
    p.add_argument("--check", help="re-check a saved capture instead of booting a guest")
    p.add_argument("--debian-perf", nargs="*", metavar="SCENARIO",
                   help="Debian's own perf (linux-perf of the kernel's suite) on these catalog scenarios' programs "
                        f"(default: {' '.join(DEBIAN_DEFAULT)}); --save/--check then name a directory")
    p.add_argument("--examples", type=int, default=1, help="print an example of each expected difference (0: none)")
    guest_args(p)
    p.set_defaults(func=lambda a: cmd_perf(a, spec_for))
    return p
