"""``harness``: the command line.

Exit codes, the same for every subcommand: 0 every stack agrees or is explained (or the command
did what it was asked); 1 failures or invariant violations; 2 bad usage or input (one line naming
what was wrong; ``--debug`` shows the traceback); 3 the infrastructure failed (guest timeout, QEMU
died, disk full, interrupted).

    harness images build [--kernel NAME|--kernel-path PATH] [--toolchain NAME ...] [--kallsyms KERNEL]
    harness boot [--smp N] [--pti] ...   boot the default guest and leave it open for gdb
    harness boot --gdb [--batch -ex CMD] gdb attached, kernel symbols and the harness commands loaded
    harness shell [--batch FILE.py]      a Python REPL (or a script) with a live `guest` object
    harness doctor                       what is installed, which accelerator, what is cached
    harness run [SCENARIO ...]           the main job: scenarios on a guest, every stack checked
    harness bench transport|unwind|deferred|soak  figures, printed
    harness check LOG                    re-check a deferred-unwinding JSONL log offline
    harness perf [--defer] ...           the guest kernel's perf callchains against our unwinder
    harness sframe check|dump BINARY...  a binary's SFrame section checked against its .eh_frame, or dumped
    harness report RUN_DIR               report.html (and SCENARIO.folded) in a run directory
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import signal
import sys
import time
import traceback

from .errors import HarnessError
from .images.cache import cache_root
from .images.programs import Variant

#: bench deferred's requests by default: enough that its first traces (each binary's tables and
#: the interpreter's warm-up: 1.1-1.2 ms of the harness's CPU a trace against 0.95-1.0 later)
#: are a small part of the rate
BENCH_SAMPLES = 1000

DEFAULT_PROGRAMS = [
    ("callchain", "host", Variant()),
    ("callchain", "host", Variant(bits=32)),
]


EXIT_OK, EXIT_FAILURES, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3


class Parser(argparse.ArgumentParser):
    """argparse with the exit-code contract's one line for bad usage (exit 2), not the usage block."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a bad value exits 2 with one line, as argparse does)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _guest_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", default="default", help="default (trixie-backports 7.x, cloud flavour), generic and rt (the same suite's generic and PREEMPT_RT flavours), trixie (6.12), bookworm (6.1)")
    p.add_argument("--kernel-path", help="boot this bzImage or vmlinux instead")
    p.add_argument("--smp", type=positive_int, default=1)
    p.add_argument("--accel", default="auto", choices=("auto", "tcg", "kvm"))
    p.add_argument("--pti", action="store_true", help="boot with pti=on")
    p.add_argument("--transport", default="rsp", choices=("rsp", "mi"))
    p.add_argument("--pin", action="store_true",
                   help="QEMU's vCPU threads on CPUs of their own, the harness and QEMU's main loop on the last "
                        "(faster stops; one harness at a time)")
    p.add_argument("--rt", action="store_true",
                   help="QEMU's main loop (gdb stub, NMI monitor) at SCHED_FIFO: it answers at once, not after "
                        "the harness's own work (needs CAP_SYS_NICE)")
    p.add_argument("--qemu", choices=("auto", "host", "backports"),
                   help="host: Debian 12's QEMU 7.2; backports: 11.x from trixie-backports (no flush of "
                        "translated code on every gdb stop); auto: backports if it can be built, else host "
                        "(default: $HARNESS_QEMU, else %s)" % _default_qemu_choice())


def _default_qemu_choice() -> str:
    from .images.qemu import DEFAULT_CHOICE

    return DEFAULT_CHOICE


def _spec(args, programs=None):
    from .session import GuestSpec

    return GuestSpec(kernel=args.kernel, kernel_path=args.kernel_path, smp=args.smp, accel=args.accel,
                     pti=args.pti, transport=getattr(args, "transport", "rsp"),
                     programs=list(programs if programs is not None else DEFAULT_PROGRAMS),
                     qemu=getattr(args, "qemu", None), pin=getattr(args, "pin", False), rt=getattr(args, "rt", False))


def _print_qemu(q) -> None:
    print(f"qemu {q.name}: {q.banner}" + (f" [{q.package}]" if q.package else "") + f" ({q.why})")


def cmd_images_build(args) -> int:
    from .images.initramfs import build_initramfs
    from .images.kernel import get_kernel
    from .images.programs import build_program
    from .images.qemu import resolve_qemu
    from .images.toolchain import get_toolchain

    for choice in args.qemus:
        _print_qemu(resolve_qemu(choice))
    for name in args.kernels:
        k = get_kernel(name)
        print(f"kernel {name}: {k.package}={k.version} sha256={k.sha256[:16]} {k.vmlinux}")
    progs = []
    for tc_name in args.toolchains:
        tc = get_toolchain(tc_name)
        print(f"toolchain {tc_name}: binutils {tc.binutils_version} (SFrame V{tc.sframe_version()}), gcc {tc.gcc_version}")
        for v in (Variant(), Variant(frame_pointers=False), Variant(bits=32), Variant(static=False), Variant(shadow=True)):
            progs.append(build_program("callchain", tc, v))
    print(f"initramfs: {build_initramfs(progs)}")
    for name in args.kallsyms or []:
        # A kernel's symbols come from its /proc/kallsyms, dumped at its first boot and cached
        # (harness/session.py): booted here once, so that the unit tests that read them
        # (test_lockstep's points in the real kernel text) have them on an empty cache too.
        from .session import GuestSpec, Session, kallsyms_path

        path = kallsyms_path(get_kernel(name))
        if not path.exists():
            with Session(GuestSpec(kernel=name, programs=[])):
                pass
        print(f"kallsyms {name}: {path}")
    return 0


def write_gdb_session(sess, started: dict | None = None, maps: dict | None = None):
    """``session.json`` and the gdb loader ``harness-gdb.py`` in the guest's work directory
    (:mod:`harness.gdbext`); returns the loader's path."""
    import site
    from pathlib import Path

    from .images.symfile import kernel_symbol_file
    from .session import kallsyms_path

    m = sess.machine
    symfile = kernel_symbol_file(sess.symbols, sess.kernel.sha256)
    cfg = {
        "release": m.release, "kernel_name": sess.spec.kernel, "vmlinux": str(sess.kernel.vmlinux),
        "kallsyms": str(kallsyms_path(sess.kernel)), "symfile": str(symfile),
        "gdb_socket": str(m.gdb_socket),
        "programs": [{"name": p.name, "toolchain": p.toolchain, "variant": p.variant.tag, "path": str(p.path),
                      "runtime": [[str(h), g] for h, g in p.runtime]} for p in sess.programs.values()],
        "started": {str(k): v for k, v in (started or {}).items()},
        "maps": {str(k): v for k, v in (maps or {}).items()},
    }
    (m.workdir / "session.json").write_text(json.dumps(cfg, indent=1))
    repo = Path(__file__).resolve().parent.parent
    paths = [str(repo), *site.getsitepackages()]
    loader = m.workdir / "harness-gdb.py"
    loader.write_text(
        "# gdb -x THIS: the harness's gdb extension (harness/gdbext.py) for this guest\n"
        "import sys\n"
        f"sys.path[0:0] = [p for p in {paths!r} if p not in sys.path]\n"
        "import harness.gdbext\n"
        f"harness.gdbext.setup({str(m.workdir / 'session.json')!r})\n")
    return loader


def _gdb_command(loader, socket) -> list[str]:
    return ["gdb", "-q", "-ex", "set architecture i386:x86-64", "-x", str(loader),
            "-ex", f"target remote | socat STDIO UNIX-CONNECT:{socket}"]


def cmd_boot(args) -> int:
    import shlex
    import subprocess

    from .session import Session

    if (args.batch or args.ex) and not args.gdb:
        raise UsageError("--batch and -ex go with --gdb")
    sess = Session(_shell_spec(args)).start()
    m = sess.machine
    try:
        started, maps = {}, {}
        if args.start:
            from .interactive import Guest

            g = Guest(sess)
            for what in args.start:
                p = g.start(what)
                started[p.pid] = list(p.argv)
                maps[p.pid] = g.maps(p.pid)
        loader = write_gdb_session(sess, started, maps)
        # The session's own debugger connection is released so that gdb can attach.
        sess.target.close()
        sess.target = None
        gdb_cmd = _gdb_command(loader, m.gdb_socket)
        if args.gdb:
            cmd = gdb_cmd + [x for ex in (args.ex or []) for x in ("-ex", ex)] + (["-batch"] if args.batch else [])
            print(f"guest up in {m.boot_seconds:.1f}s ({sess.accel}), {m.release}; {shlex.join(cmd)}", flush=True)
            old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is gdb's
            try:
                return subprocess.call(cmd, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            finally:
                signal.signal(signal.SIGINT, old)
        print(json.dumps(sess.describe(), indent=1))
        print(f"\nguest up in {m.boot_seconds:.1f}s ({sess.accel}); QEMU pid {m.pid}; QMP: {m.qmp_socket}")
        print("attach with (kernel symbols and the commands tasks, user-bt [PID], deferred [PID] loaded):")
        print(f"  {shlex.join(gdb_cmd)}")
        print("or bare:")
        print(f"  gdb -ex 'set architecture i386:x86-64' -ex 'target remote | socat STDIO UNIX-CONNECT:{m.gdb_socket}'")
        print("programs in the guest:", ", ".join(sess.programs) or "none")
        for pid, argv in started.items():
            print(f"started pid {pid}: {' '.join(argv)}")
        print("Ctrl-C (or SIGTERM) shuts the guest down.", flush=True)
        stop = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        try:
            while not stop and m.alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        return 0
    finally:
        sess.close()


def _shell_spec(args):
    """The guest of ``harness shell`` / ``harness boot --gdb``: the default programs, those of the
    default scenarios and of ``--scenario``, and the user's ``--program`` binaries."""
    from .scenarios.catalog import DEFAULT_SET, programs_for, select_scenarios

    scenarios = select_scenarios(list(DEFAULT_SET) + list(args.scenario or []))
    progs = list(DEFAULT_PROGRAMS)
    progs += [p for p in programs_for(scenarios) if p not in progs]
    spec = _spec(args, progs)
    spec.user_programs = list(args.program or [])
    return spec


class UsageError(HarnessError):
    """Bad usage found after parsing (an unknown scenario, an option without the one it needs):
    exit 2 with one line."""

    exit_code = EXIT_USAGE


def cmd_shell(args) -> int:
    """A Python REPL with ``guest`` (harness.interactive.Guest) and ``session`` in scope, or
    ``--batch FILE.py`` run with them and exit (1 if the script raised)."""
    import code

    from .interactive import BANNER, Guest
    from .session import Session

    if args.batch and not os.path.isfile(args.batch):
        print(f"harness shell: --batch {args.batch}: no such file", file=sys.stderr)
        return EXIT_USAGE
    with Session(_shell_spec(args)) as sess:
        guest = Guest(sess)
        guest.cont()
        ns = {"guest": guest, "session": sess, "__name__": "__harness_shell__"}
        if args.batch:
            ns["__file__"] = args.batch
            try:
                with open(args.batch) as f:
                    exec(compile(f.read(), args.batch, "exec"), ns)
            except SystemExit as exc:
                return exc.code if isinstance(exc.code, int) else EXIT_FAILURES
            except Exception:
                traceback.print_exc()
                return EXIT_FAILURES
            return EXIT_OK
        try:
            import readline  # line editing and history for input()
            import rlcompleter

            readline.set_completer(rlcompleter.Completer(ns).complete)
            readline.parse_and_bind("tab: complete")
        except ImportError:
            pass
        console = code.InteractiveConsole(ns)
        console.interact(banner=BANNER.format(guest=guest), exitmsg="shutting the guest down")
    return EXIT_OK


def cmd_doctor(args) -> int:
    from .images.apt import debian_archive_uri

    ok = True
    for tool in ("qemu-system-x86_64", "gdb", "socat", "busybox", "debootstrap", "zstd", "objdump", "gcc", "bpftool"):
        path = shutil.which(tool)
        ok &= path is not None
        print(f"{tool:20} {path or 'MISSING'}")
    from .images.qemu import (
        HOST_PREFIX,
        cached_backports,
        choice_from_env,
        version_banner,
    )

    print(f"{'qemu version':20} {version_banner(HOST_PREFIX)} (host)")
    for info in cached_backports():
        print(f"{'':20} {info['banner']} ({info['suite']}, cached in {info['path']})")
    try:
        print(f"{'qemu choice':20} {choice_from_env()} (--qemu or $HARNESS_QEMU: auto, host, backports)")
    except ValueError as exc:
        ok = False
        print(f"{'qemu choice':20} {exc}")
    kvm = os.path.exists("/dev/kvm")
    print(f"{'/dev/kvm':20} {'present' if kvm else 'absent'} (whether it boots a kernel is probed at boot; verdicts below)")
    probe = cache_root() / "kvm-probe.json"
    if probe.exists():
        for key, (usable, why) in json.loads(probe.read_text()).items():
            print(f"{'':20} {'kvm' if usable else 'tcg'}: {why}  [{key[:60]}]")
    try:
        print(f"{'debian archive':20} {debian_archive_uri()}")
    except Exception as exc:  # doctor reports, it does not fail on the first problem
        ok = False
        print(f"{'debian archive':20} {exc}")
    root = cache_root()
    print(f"{'cache':20} {root}")
    for kind in ("kernels", "toolchains", "qemu", "programs", "initramfs", "kallsyms"):
        d = root / kind
        entries = sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) if d.exists() else []
        print(f"  {kind:18} {len(entries)} cached")
        if kind == "kernels":
            for e in entries:
                meta = d / e / "kernel.json"
                if meta.exists():
                    k = json.loads(meta.read_text())
                    print(f"    {k['package']}={k['version']} ({k.get('suite', '')})")
    return 0 if ok else 1


def cmd_run(args) -> int:
    """The main job: run scenarios on one guest and print the summary table."""
    from .scenarios.catalog import programs_for, select_scenarios

    if args.kernel_diff:
        if args.program:
            print("harness run: --kernel-diff samples catalog scenarios, not --program", file=sys.stderr)
            return EXIT_USAGE
        from .scenarios.kernel_diff import DEFAULT_SCENARIOS, cmd_kernel_diff

        kd = argparse.Namespace(**vars(args))
        kd.scenarios = args.scenarios or list(DEFAULT_SCENARIOS)
        kd.requests = args.samples or 300
        kd.freq, kd.profile, kd.show = 200, "mainline", 20
        return cmd_kernel_diff(kd, _spec)
    if args.program:
        from .scenarios.catalog import user_scenario

        sc = user_scenario(args.program, args.args or [], samples=args.samples or 60)
        if args.rate:
            import dataclasses

            sc = dataclasses.replace(sc, rate=args.rate)
        spec = _spec(args, [])
        spec.user_programs = [args.program]
        return _run_and_report(spec, [sc], args.out, args.junit_xml, args.report)
    scenarios = select_scenarios(args.scenarios)
    import dataclasses

    if args.samples:
        scenarios = [dataclasses.replace(s, samples=args.samples) for s in scenarios]
    if args.rate:
        scenarios = [dataclasses.replace(s, rate=args.rate) for s in scenarios]
    return _run_and_report(_spec(args, programs_for(scenarios)), scenarios, args.out, args.junit_xml, args.report)


def _run_and_report(spec, scenarios, out_dir, junit: str | None = None, report: bool = False) -> int:
    from pathlib import Path

    from .report.junit import junit_xml
    from .report.summary import run_exit_code, summary
    from .progress import sampling_reporter
    from .report.text import cause_table, format_table, scenario_rows, stack_failures
    from .scenarios.engine import run_scenarios
    from .session import Session

    from .deferred.log import LogWriteError
    from .images.lock import write_atomic
    from .report.rundir import new_run_dir

    out = new_run_dir(out_dir)  # unique and claimed: two runs never share one (exit 2 if --out is taken)
    results: list = []
    facts: dict = {}
    try:
        with Session(spec) as sess:
            facts = sess.describe()
            write_atomic(out / "run.json", json.dumps(facts, indent=1))  # whole or absent (a full disk)
            for sc in scenarios:
                print(f"{sc.name}: {sc.describe()}", file=sys.stderr)
            run_scenarios(sess, scenarios, out, progress=sampling_reporter(), results=results)
    except KeyboardInterrupt:
        # Interrupted outside a scenario's own handling (booting, between scenarios, in a
        # clean-up): what was done is still reported below, and the exit code says interrupted.
        if not results:
            raise
        if not results[-1].errors:
            results[-1].errors.append("interrupted (SIGINT)")
    except LogWriteError as exc:
        # A full disk: the log keeps its whole lines, and the table below still shows what was
        # checked before it filled up (the exit code says infrastructure).
        if not results:
            raise
        results[-1].errors.append(str(exc))
    print(f"kernel {sess.kernel.package}={sess.kernel.version} ({sess.accel}), logs in {out}/")
    print(format_table(scenario_rows(results)))
    print("\ndivergences by cause (each proven at its stop; `harness check LOG` lists them again):")
    print(cause_table(results))
    for r in results:
        print(f"{r.scenario.name}: oracles {', '.join(r.oracles)}")
        if r.program_output:
            print(f"{r.scenario.name}: program output in {out / r.program_output}")
        for (oracle, reason), n in sorted(r.not_checked.items()):
            print(f"{r.scenario.name}: {oracle} did not check {n} stack(s): {reason}")
        for rec in r.failures[:5]:
            for text in stack_failures(rec):
                print(f"\nFAILURE {text}")
        for f in r.problems[:5] + r.errors[:5] + r.invariant_violations[:5]:
            print(f"\n{r.scenario.name}: {f}")
        for note in r.notes:
            print(f"{r.scenario.name}: note: {note}")
    code, why = run_exit_code(results)
    if len(results) < len(scenarios):
        code, why = EXIT_INFRA, f"interrupted after {len(results)} of {len(scenarios)} scenario(s)"
    try:
        write_atomic(out / "summary.json", json.dumps({**summary(results, facts), "exit_code": code,
                                                       "outcome": why}, indent=1))
    except OSError as exc:  # the disk that cut the log short: say so, keep the table printed above
        print(f"summary.json not written: {exc.strerror or exc}", file=sys.stderr)
    if junit:
        Path(junit).write_bytes(junit_xml(results))
    report_args = argparse.Namespace(run_dir=str(out), format="html", output=None, quiet=False)
    if report and cmd_report(report_args) and code == EXIT_OK:
        code, why = EXIT_INFRA, "report.html could not be written"
    print(f"exit {code}: {why}")
    return code


def cmd_report(args) -> int:
    """Reports of a run directory: html (report.html, with SCENARIO.folded beside it), folded, or
    perf-script text (on stdout, or in --output)."""
    from pathlib import Path

    from .report.run import RunDirError, read_run

    t0 = time.monotonic()
    try:
        progress = None if getattr(args, "quiet", False) else (lambda line: print(f"report: {line}", file=sys.stderr))
        run = read_run(Path(args.run_dir), keep_samples=args.format == "perf-script", progress=progress)
    except RunDirError as exc:
        print(f"harness report: {exc}", file=sys.stderr)
        return 2
    if args.format == "perf-script":
        from .report.perfscript import write_perf_script

        samples = (x for s in run.scenarios for x in s.samples)
        if args.output:
            with open(args.output, "w", encoding="utf-8") as fp:
                n = write_perf_script(samples, fp)
            print(f"{args.output}: {n} samples", file=sys.stderr)
        else:
            try:
                write_perf_script(samples, sys.stdout)
                sys.stdout.flush()
            except BrokenPipeError:  # | head
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if args.format in ("html", "folded"):
        from .report.flame import flame_svg, write_folded

        for s in run.scenarios:
            write_folded(s.folded, run.path / f"{s.name}.folded")
        print(f"{len(run.scenarios)} collapsed-stack file(s) in {run.path}/ (SCENARIO.folded)")
    if args.format == "html":
        from .report.html import write_html

        flames = {s.name: flame_svg(s.folded, f"{s.name}: {s.stacks} stacks ({s.unwinder})") for s in run.scenarios}
        if progress:
            progress(f"{len(flames)} flame graph(s) drawn, rendering the page")
        path = write_html(run, Path(args.output) if args.output else None, flames)
        print(f"{path} ({path.stat().st_size:,} bytes, {run.stacks} stacks, {time.monotonic() - t0:.1f}s)")
    return 0


def cmd_bench(args) -> int:
    if args.smp is None:
        args.smp = 2 if args.what == "soak" else 1
    if args.what == "transport":
        from .session import Session
        from .transport.bench import bench_transport, format_bench

        with Session(_spec(args)) as sess:
            sess.target.close()
            sess.target = None
            _print_qemu(sess.qemu)
            print(format_bench(bench_transport(sess.machine, program=sess.program("callchain").guest_path)))
        return 0
    if args.what == "unwind":
        from .images.programs import build_program
        from .images.toolchain import get_toolchain
        from .sframe.bench import bench_lookups
        from .unwind.bench import bench_fp, bench_mixed

        bench_fp()
        bench_mixed()
        big = build_program("sframe_many", get_toolchain("sid"), Variant(frame_pointers=False))
        r = bench_lookups(big.path)
        print("sframe lookups (sframe_many, sid, V3): " + ", ".join(
            f"{k}={v:,.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
        return 0
    if args.what == "deferred":
        import dataclasses

        from .perf.capture import PERFCC, CaptureError, PerfSpec, capture
        from .perf.rate import deferred_rate
        from .perf.records import PerfFormatError, parse_capture
        from .progress import sampling_reporter
        from .scenarios.catalog import CATALOG, programs_for
        from .scenarios.engine import Engine, raw_stop_rate
        from .session import Session

        sc = dataclasses.replace(CATALOG["fp-syscall"], samples=args.samples or BENCH_SAMPLES, jitter=0.0)
        with Session(_spec(args, [*programs_for([sc]), PERFCC])) as sess:
            _print_qemu(sess.qemu)
            print(f"cpus: {sess.pinned or 'not pinned (--pin puts the vCPU threads and the harness on different CPUs)'}")
            print(f"stub: {sess.realtime or 'normal priority (--rt: QEMU main loop at SCHED_FIFO, answers before the harness work)'}")
            prog = sess.program(sc.program, sc.toolchain, sc.variant)
            floor = raw_stop_rate(sess, prog)
            target = sess.target
            trips0 = getattr(target, "round_trips", None)
            engine = Engine(sess, sc, progress=sampling_reporter())
            r = engine.run()
            trips = None if trips0 is None else target.round_trips - trips0
            ov = engine.overlap
            # The second anchor: the guest kernel's own deferred unwinding of the same program, in
            # the same guest, under perf with defer_callchain (tiny stack dumps: only the rate counts).
            pspec = PerfSpec(seconds=args.perf_seconds, freq=args.perf_freq, stack_bytes=8, defer=True)
            try:
                kernel = deferred_rate(parse_capture(capture(sess, [prog.guest_path, *sc.args], pspec)))
                why = ""
            except (CaptureError, PerfFormatError) as exc:
                kernel, why = None, str(exc).splitlines()[0]
        rate = r.stacks / r.loop_seconds if r.loop_seconds else 0.0
        goal = 0.8 * floor / 2
        for e in r.errors + r.problems:
            print(f"error in the sampling run: {e}")
        print(f"raw stop rate (floor):        {floor:8.1f} stops/s")
        if kernel is not None:
            print(f"guest kernel's deferred rate: {kernel.per_second:8.1f} deferred callchains/s "
                  f"({kernel.deferred} in {kernel.seconds:.1f}s; perf at {pspec.freq} Hz with defer_callchain: "
                  f"{kernel.samples} samples, {kernel.cookies} with a cookie)")
        else:
            print(f"guest kernel's deferred rate:      n/a ({why})")
        print(f"deferred traces delivered:    {rate:8.1f} traces/s ({r.stacks} traces in {r.loop_seconds:.1f}s)")
        print(f"stops per trace:              {r.stops / max(r.stacks, 1):8.2f}")
        print(f"NMI stops left at once:       {r.continued:8d} (passed over, their guesses missed: {r.passed_over})")
        if trips is not None:
            print(f"stub round trips per trace:   {trips / max(r.stacks, 1):8.2f}")
        if ov["deliveries"]:
            print(f"checks while the guest runs:  {1000 * ov['seconds'] / ov['deliveries']:8.2f} ms per delivery; "
                  f"the next stop was already waiting after {ov['late']} of {ov['deliveries']}")
        print(f"goal 0.8 * floor / 2:         {goal:8.1f} traces/s -> {'met' if rate >= goal else 'NOT met'}"
              f" ({rate / goal if goal else 0:.2f} of it)")
        # A rate is only worth its stacks: the exit code says whether they held (README, exit codes).
        if r.errors or r.problems:
            return 3
        if r.failed_stacks or r.invariant_violations:
            print(f"failed stacks in the sampling run: {r.failed_stacks}; invariant violations: "
                  f"{len(r.invariant_violations)}")
            return 1
        return 0
    if args.what == "soak":
        return _bench_soak(args)
    raise SystemExit(f"unknown benchmark {args.what}")


def _bench_soak(args) -> int:
    """``harness bench soak``: the soak's figures (harness/scenarios/soak.py); exit 1 when a
    request was lost, a callback duplicated, a cookie reused or a stack failed, 3 on errors."""
    import tempfile
    from pathlib import Path

    from .progress import sampling_reporter
    from .scenarios.soak import PROGRAM, SoakSpec, format_soak, run_soak
    from .session import Session

    spec = SoakSpec(requests=args.requests, tasks=args.tasks, cancel_every=args.cancel_every,
                    nmi_share=args.nmi_share, seed=args.seed)
    if not 0.0 <= spec.nmi_share <= 1.0:
        print(f"harness bench: --nmi-share must be between 0 and 1, not {spec.nmi_share}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out) if args.out else Path("runs")
    out.mkdir(parents=True, exist_ok=True)
    log_path = Path(tempfile.mkdtemp(prefix=time.strftime("soak-%Y%m%d-%H%M%S-"), dir=out)) / "soak.jsonl"
    with Session(_spec(args, [PROGRAM])) as sess:
        _print_qemu(sess.qemu)
        print(f"kernel {sess.kernel.package}={sess.kernel.version} ({sess.accel}, {args.smp} vCPUs)")
        rep = run_soak(sess, spec, log_path, progress=sampling_reporter())
    for line in format_soak(rep):
        print(line)
    if rep.errors:
        return EXIT_INFRA
    return EXIT_OK if rep.ok else EXIT_FAILURES


def main(argv: list[str] | None = None) -> int:
    import faulthandler
    import signal

    # `kill -USR1 PID` prints where every thread of a harness that seems stuck is (stderr;
    # not where stderr is no file, as under pytest's capture).
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        pass
    ap = Parser(prog="harness", description=__doc__.split("\n\n")[0])
    ap.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = ap.add_subparsers(dest="cmd", required=True)

    images = sub.add_parser("images", help="fetch and build kernels, toolchain roots, programs, initramfs")
    isub = images.add_subparsers(dest="images_cmd", required=True)
    b = isub.add_parser("build")
    b.add_argument("--kernel", dest="kernels", action="append", help="kernel name (repeatable)")
    b.add_argument("--toolchain", dest="toolchains", action="append", help="host, trixie, sid (repeatable)")
    b.add_argument("--qemu", dest="qemus", action="append", choices=("auto", "host", "backports"),
                   help="the QEMU to fetch and check (repeatable; default: $HARNESS_QEMU, else %s)"
                        % _default_qemu_choice())
    b.add_argument("--kallsyms", action="append", metavar="KERNEL",
                   help="boot KERNEL once to cache its /proc/kallsyms, if not cached (repeatable)")
    b.set_defaults(func=cmd_images_build)

    boot = sub.add_parser("boot", help="boot a guest and leave gdb and QMP sockets open")
    _guest_args(boot)
    boot.add_argument("--gdb", action="store_true",
                      help="run gdb attached to the guest, with kernel symbols and the harness's commands")
    boot.add_argument("--batch", action="store_true", help="with --gdb: run the -ex commands and exit")
    boot.add_argument("-ex", dest="ex", action="append", metavar="CMD", help="with --gdb: a gdb command (repeatable)")
    boot.add_argument("--start", action="append", metavar="SCENARIO|PATH",
                      help="start this program before gdb attaches (a catalog scenario's, a guest path "
                           "or a --program; repeatable)")
    boot.add_argument("--scenario", action="append", help="also put this scenario's program in the guest")
    boot.add_argument("--program", action="append", metavar="PATH", help="also put this host binary in the guest")
    boot.set_defaults(func=cmd_boot)

    shell = sub.add_parser("shell", help="boot a guest and open a Python REPL with a live `guest` object")
    _guest_args(shell)
    shell.add_argument("--program", action="append", metavar="PATH",
                       help="put this host binary (and its libraries) in the guest (repeatable)")
    shell.add_argument("--scenario", action="append", help="also put this scenario's program in the guest")
    shell.add_argument("--batch", metavar="FILE.py", help="run this script with `guest` in scope and exit")
    shell.set_defaults(func=cmd_shell)

    doctor = sub.add_parser("doctor", help="what is installed and cached")
    doctor.set_defaults(func=cmd_doctor)

    run = sub.add_parser("run", help="run scenarios on a guest and check every delivered stack")
    run.add_argument("scenarios", nargs="*", help="scenario names, or 'all' (default: a one-minute set)")
    run.add_argument("--samples", type=positive_int, help="requests on the program's tasks per scenario")
    run.add_argument("--rate", type=positive_float, help="sampling mode: inject NMIs at this rate (per second)")
    run.add_argument("--junit-xml", metavar="FILE", help="also write a JUnit XML file: one test case per scenario")
    run.add_argument("--out", help="directory for the JSONL logs: new or empty (default runs/TIMESTAMP[-N])")
    run.add_argument("--report", action="store_true", help="write report.html into the run directory")
    run.add_argument("--program", help="sample your own static or dynamic x86-64/i386 binary instead")
    run.add_argument("--args", nargs=argparse.REMAINDER, help="arguments for --program (the rest of the line)")
    run.add_argument("--kernel-diff", action="store_true",
                     help="instead of the model's own tracers: the guest kernel's unwind_deferred (perf's "
                          "deferred callchains on the scenarios' programs) against the model, event by event "
                          "(harness kernel-diff; --samples sets the requests per scenario)")
    _guest_args(run)
    run.set_defaults(func=cmd_run)

    bench = sub.add_parser("bench", help="benchmarks that print figures")
    bench.add_argument("what", choices=("transport", "unwind", "deferred", "soak"))
    bench.add_argument("--samples", type=positive_int, help=f"requests for bench deferred (default {BENCH_SAMPLES})")
    bench.add_argument("--perf-freq", type=positive_int, default=1000,
                       help="bench deferred: perf's sampling frequency for the guest kernel's own deferred rate")
    bench.add_argument("--perf-seconds", type=positive_float, default=2.0,
                       help="bench deferred: seconds of perf sampling for the guest kernel's own deferred rate")
    _guest_args(bench)
    bench.add_argument("--requests", type=positive_int, default=10_000,
                       help="bench soak: requests on the program's tasks (default 10000)")
    bench.add_argument("--tasks", type=positive_int, default=8, help="bench soak: worker tasks (default 8)")
    bench.add_argument("--cancel-every", type=positive_int, default=100,
                       help="bench soak: requests between two cancel + re-register cycles (default 100)")
    bench.add_argument("--nmi-share", type=float, default=0.5,
                       help="bench soak: the share of NMI requests, the rest timer interrupts (default 0.5)")
    bench.add_argument("--seed", type=int, default=0, help="bench soak: seed of the NMI/timer draw and jitter")
    bench.add_argument("--out", help="bench soak: directory for the run's log (default runs/)")
    bench.set_defaults(smp=None)  # bench soak: 2 vCPUs unless --smp says otherwise; the others: 1
    bench.set_defaults(func=cmd_bench)

    rep = sub.add_parser("report", help="report.html (or other formats) from a run directory")
    rep.add_argument("run_dir", help="a directory written by harness run (run.json, SCENARIO.jsonl)")
    rep.add_argument("--format", default="html", choices=("html", "folded", "perf-script"),
                     help="html: report.html and SCENARIO.folded in RUN_DIR; folded: the .folded files only; "
                          "perf-script: the unwinder's stacks as perf script text (stdout or --output)")
    rep.add_argument("--output", "-o", help="write here instead of the default place")
    rep.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    rep.set_defaults(func=cmd_report)

    from .deferred.cli import add_cli as add_deferred_cli

    add_deferred_cli(sub)

    from .perf.cli import add_cli as add_perf_cli

    add_perf_cli(sub, _guest_args, _spec)

    from .scenarios.kernel_diff import add_cli as add_kernel_diff_cli

    add_kernel_diff_cli(sub, _guest_args, _spec)

    from .sframe.cli import add_cli as add_sframe_cli

    add_sframe_cli(sub)

    args = ap.parse_args(argv)
    if args.cmd == "images" and args.images_cmd == "build":
        args.kernels = args.kernels or ["default"]
        args.toolchains = args.toolchains or ["host", "trixie", "sid"]
        args.qemus = args.qemus or [None]  # None: $HARNESS_QEMU, else the default
    try:
        # Progress of long steps on stderr: a live status line on a terminal, plain lines
        # elsewhere (harness/progress.py); gone before anything below is printed.
        from .progress import install, uninstall

        renderer = install(sys.stderr)
        try:
            return args.func(args) or EXIT_OK
        finally:
            uninstall(renderer)
    except KeyboardInterrupt:
        print(f"harness {args.cmd}: interrupted", file=sys.stderr)
        return EXIT_INFRA
    except Exception as exc:
        code = exit_code(exc)
        if code is None:
            raise  # a bug in the harness: its traceback is the report
        if args.debug:
            traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"harness {args.cmd}: {first}", file=sys.stderr)
        return code


def exit_code(exc: BaseException) -> int | None:
    """The exit code for an error that reached the command line; None for a bug (not ours to
    classify: it keeps its traceback)."""
    if isinstance(exc, HarnessError):
        return exc.exit_code
    if isinstance(exc, OSError):
        # A full disk or a dead pipe is the machine's; a path that cannot be opened is the input's.
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EPIPE):
            return EXIT_INFRA
        return EXIT_USAGE
    return None


if __name__ == "__main__":
    sys.exit(main())
