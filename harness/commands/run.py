"""``harness run``: the main job: scenarios on one guest, every delivered stack checked."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from pathlib import Path

from ..errors import EXIT_INFRA, EXIT_OK, EXIT_USAGE
from . import UsageError, arg, command, positive_float, sample_count
from ._guest import GUEST_ARGS, LIB_ARG, guest_spec
from ._ktap import KTAP_ARG, check_output_file, write_ktap


@command("run", help="run scenarios on a guest and check every delivered stack", args=[
    arg("scenarios", nargs="*", help="scenario names, or 'all' (default: a one-minute set)"),
    arg("--samples", type=sample_count, help="requests on the program's tasks per scenario"),
    arg("--rate", type=positive_float, help="sampling mode: inject NMIs at this rate (per second)"),
    arg("--junit-xml", metavar="FILE", help="also write a JUnit XML file: one test case per scenario"),
    KTAP_ARG,
    arg("--out", help="directory for the JSONL logs: new or empty (default runs/TIMESTAMP[-N])"),
    arg("--report", action="store_true", help="write report.html into the run directory"),
    arg("--cross-examine", action="store_true",
        help="ask every proven cause's claims about binaries again of the toolchain's own tools (readelf, "
             "objdump); a cause they contradict fails its stack (cause-contradicted)"),
    arg("--program", help="sample your own static or dynamic x86-64/i386 binary instead"),
    arg("--args", nargs=argparse.REMAINDER, help="arguments for --program (the rest of the line: put it last)"),
    LIB_ARG,
    arg("--kernel-diff", action="store_true",
        help="instead of the model's own tracers: the guest kernel's unwind_deferred (perf's deferred callchains "
             "on the scenarios' programs) against the model, event by event (harness kernel-diff; --samples sets "
             "the requests per scenario)"),
    *GUEST_ARGS,
])
def cmd_run(args) -> int:
    """The main job: run scenarios on one guest and print the summary table."""
    from ..lockstep import driver as kernel_diff
    from ..scenarios.catalog import DEFAULT_SAMPLES, on_vcpus, programs_for, select_scenarios, user_scenario
    from .kernel_diff import cmd_kernel_diff
    if args.kernel_diff:
        if args.program:
            print("harness run: --kernel-diff samples catalog scenarios, not --program", file=sys.stderr)
            return EXIT_USAGE
        kd = argparse.Namespace(**vars(args))
        kd.scenarios = args.scenarios or list(kernel_diff.DEFAULT_SCENARIOS)
        kd.samples = args.samples or kernel_diff.DEFAULT_SAMPLES
        kd.freq, kd.profile, kd.show = kernel_diff.DEFAULT_FREQ, kernel_diff.DEFAULT_PROFILE, kernel_diff.DEFAULT_SHOW
        return cmd_kernel_diff(kd)
    if args.args is not None and not args.program:
        raise UsageError("--args goes after --program (it takes the rest of the line as the program's arguments)")
    if args.lib and not args.program:
        raise UsageError("--lib goes with --program (a library the program loads)")
    if args.program:
        guest_spec(args, []).check()  # --smp and --mem before the binary is even read
        sc = user_scenario(args.program, args.args or [], samples=args.samples or DEFAULT_SAMPLES, smp=args.smp,
                           libs=tuple(args.lib or []))
        if args.smp > 1:
            print(f"{sc.name}: requests at timer interrupts on {args.smp} vCPUs (an injected NMI reaches "
                  f"vCPU 0 only)", file=sys.stderr)
        if args.rate:
            sc = dataclasses.replace(sc, rate=args.rate)
        spec = guest_spec(args, [])
        spec.user_programs = [args.program]
        return _run_and_report(spec, [sc], args.out, args.junit_xml, args.report, args.cross_examine, args.ktap)
    scenarios = select_scenarios(args.scenarios)
    if args.smp > 1:
        guest_spec(args, []).check()  # a bad --smp is refused before any note about it
        moved = [s.name for s in scenarios if on_vcpus(s, args.smp) is not s]
        scenarios = [on_vcpus(s, args.smp) for s in scenarios]
        if moved:
            print(f"{', '.join(moved)}: requests at timer interrupts on {args.smp} vCPUs (an injected NMI "
                  f"reaches vCPU 0 only)", file=sys.stderr)
    if args.samples:
        scenarios = [dataclasses.replace(s, samples=args.samples) for s in scenarios]
    if args.rate:
        scenarios = [dataclasses.replace(s, rate=args.rate) for s in scenarios]
    return _run_and_report(guest_spec(args, programs_for(scenarios)), scenarios, args.out, args.junit_xml, args.report,
                           args.cross_examine, args.ktap)


def check_outputs(spec, junit: str | None, ktap: str | None = None) -> None:
    """Every input that can be checked before the run directory is made (exit 2, and no empty
    runs/TIMESTAMP left behind): the guest asked for (--kernel, --kernel-path, --smp, --mem)
    and where --junit-xml and --ktap will go (written after the whole run: a typo there must
    not cost it)."""
    spec.check()
    check_output_file("--junit-xml", junit)
    check_output_file("--ktap", ktap)


def _run_and_report(spec, scenarios, out_dir, junit: str | None = None, report: bool = False,
                    cross_examine: bool = False, ktap: str | None = None) -> int:
    """Run, print the table and exit code; with ``--ktap -`` the human lines go to stderr and
    stdout carries the KTAP document alone."""
    human = contextlib.redirect_stdout(sys.stderr) if ktap == "-" else contextlib.nullcontext()
    with human:
        code, doc = _run_and_report_human(spec, scenarios, out_dir, junit, report, cross_examine, ktap)
    if ktap and doc is not None:
        from ..report.ktap import run_ktap
        write_ktap(ktap, run_ktap(doc))
    return code


def _run_and_report_human(spec, scenarios, out_dir, junit, report, cross_examine, ktap) -> tuple[int, dict | None]:
    from ..deferred.log import LogWriteError
    from ..images.lock import write_atomic
    from ..progress import sampling_reporter
    from ..report.junit import junit_xml
    from ..report.rundir import new_run_dir, release_if_unused
    from ..report.summary import run_exit_code, summary
    from ..report.text import run_lines
    from ..scenarios.engine import run_scenarios
    from ..session import Session
    from ..signals import signal_name
    from ..transport.errors import GuestError, TargetError
    from .report import cmd_report
    check_outputs(spec, junit, ktap)
    out = new_run_dir(out_dir)  # unique and claimed: two runs never share one (exit 2 if --out is taken)
    results: list = []
    facts: dict = {}
    sess = Session(spec)
    try:
        try:
            try:
                sess.start()
            except (GuestError, TargetError) as exc:
                # The guest was lost while it booted (QEMU killed or exited, a panic, silence past
                # the bound): the run directory stays, with what was known and why it ended.
                _boot_failed(out, sess, scenarios, exc)
                raise
            with contextlib.closing(sess):
                facts = sess.describe()
                write_atomic(out / "run.json", json.dumps(facts, indent=1))  # whole or absent (a full disk)
                for sc in scenarios:
                    print(f"{sc.name}: {sc.describe()}", file=sys.stderr)
                run_scenarios(sess, scenarios, out, progress=sampling_reporter(), results=results,
                              cross_examine=cross_examine)
        except KeyboardInterrupt as exc:
            # Interrupted outside a scenario's own handling (booting, between scenarios, in a
            # clean-up): what was done is still reported below, and the exit code says interrupted.
            if not results:
                raise
            if not results[-1].errors:
                results[-1].errors.append(f"interrupted ({signal_name(exc)})")
        except LogWriteError as exc:
            # A full disk: the log keeps its whole lines, and the table below still shows what was
            # checked before it filled up (the exit code says infrastructure).
            if not results:
                raise
            results[-1].errors.append(str(exc))
        except (GuestError, TargetError) as exc:
            # The guest lost outside a scenario's own handling (between two scenarios): reported as
            # one that lost it inside.
            if not results:
                raise
            lost = sess.machine_lost(exc) or str(exc).strip().splitlines()[0]
            results[-1].machine_lost = results[-1].machine_lost or lost
            results[-1].errors.append(f"the guest is lost: {lost}")
    except BaseException:
        # What went wrong before anything was recorded (a kernel without BTF, a program that is
        # no ELF file, an interrupt) leaves no empty runs/TIMESTAMP behind; a guest lost while it
        # booted left run.json and summary.json (_boot_failed), so its directory stays.
        release_if_unused(out)
        raise
    print(f"kernel {sess.kernel.package}={sess.kernel.version} ({sess.accel}), logs in {out}/")
    for line in run_lines(results, out):
        print(line)
    code, why = run_exit_code(results)
    lost = next((r for r in results if r.machine_lost), None)
    if lost is not None:
        # One line naming the cause: the guest died or hangs, and the run ended at once.
        code, why = EXIT_INFRA, (f"{lost.scenario.name}: {lost.machine_lost}; the run ended after "
                                 f"{len(results)} of {len(scenarios)} scenario(s)")
    elif len(results) < len(scenarios):
        code, why = EXIT_INFRA, f"interrupted after {len(results)} of {len(scenarios)} scenario(s)"
    doc = {**summary(results, facts), "exit_code": code, "outcome": why}
    try:
        write_atomic(out / "summary.json", json.dumps(doc, indent=1))
    except OSError as exc:  # the disk that cut the log short: say so, keep the table printed above
        print(f"summary.json not written: {exc}", file=sys.stderr)  # names the file (write_atomic)
    if junit:
        Path(junit).write_bytes(junit_xml(results))
    report_args = argparse.Namespace(run_dir=str(out), format="html", output=None, quiet=False)
    if report and cmd_report(report_args) and code == EXIT_OK:
        code, why = EXIT_INFRA, "report.html could not be written"
    print(f"exit {code}: {why}")
    return code, doc


def _boot_failed(out: Path, sess, scenarios, exc: BaseException) -> None:
    """A guest lost while it booted: run.json with what the session knew (the kernel, QEMU, the
    accelerator, the programs; no release, no stop points) and summary.json with exit code 3 and
    the error's first line as the outcome ("QEMU was killed by signal 9 (SIGKILL) during boot,
    before the guest was ready"), no scenario run.  The error itself goes on to the command line
    (the same line on stderr, exit 3).  A disk that refuses the files costs them, not the line."""
    from ..images.lock import write_atomic
    from ..report.summary import summary

    why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    facts = sess.describe()
    doc = {**summary([], facts), "exit_code": EXIT_INFRA,
           "outcome": f"{why}; 0 of {len(scenarios)} scenario(s) ran"}
    try:
        write_atomic(out / "run.json", json.dumps(facts, indent=1))
        write_atomic(out / "summary.json", json.dumps(doc, indent=1))
    except OSError as e:
        print(f"summary.json not written: {e}", file=sys.stderr)
