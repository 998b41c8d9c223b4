"""``harness kernel-diff``: the guest kernel's own ``unwind_deferred`` against the model, event by event.

The lockstep itself is :mod:`harness.lockstep.driver` (the guest side) and
:mod:`harness.lockstep.compare` (the pure comparison); this module parses the options, prints the
summaries and chooses the exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EXIT_FAILURES, EXIT_INFRA, EXIT_OK
from ..lockstep.defaults import DEFAULT_FREQ, DEFAULT_SAMPLES, DEFAULT_SCENARIOS, DEFAULT_SHOW
from . import arg, command, positive_int
from ._guest import GUEST_ARGS, guest_spec
from ._ktap import KTAP_ARG, check_output_file, write_ktap

if TYPE_CHECKING:  # the module itself is imported where it is used (commands/__init__.py)
    from ..lockstep.compare import Summary

EXPECTED_COOKIE_NAME = "seed-v10 cookies are timestamps"


def _exit_code(total: Summary, profile: str, errors: list[str]) -> tuple[int, str]:
    if errors:
        return EXIT_INFRA, f"{len(errors)} error(s) in the runs"
    if total.kernel["request"] == 0 or total.n_compared == 0:
        return EXIT_FAILURES, "nothing was compared: no request of the kernel's tracer was seen"
    if profile == "mainline":
        if total.unexplained:
            return EXIT_FAILURES, f"{len(total.unexplained)} unexplained difference(s) between the kernel and the model"
        return EXIT_OK, "the model did what the kernel did at every event"
    cookie = sum(1 for d in total.differences if d.what == "request.cookie")
    if total.unexplained:
        return EXIT_FAILURES, f"control {profile}: {len(total.unexplained)} difference(s) its revision does not explain"
    if not cookie:
        return EXIT_FAILURES, f"control {profile}: no cookie mismatch found (the comparison would be blind)"
    return EXIT_OK, (f"control {profile}: {cookie} cookie mismatch(es) found, as expected "
                     f"({EXPECTED_COOKIE_NAME}); every difference named")


@command("kernel-diff", help="the guest kernel's unwind_deferred against the model, event by event",
         description=__doc__.split("\n\n")[0], args=[
    arg("scenarios", nargs="*",
        help=f"catalog scenarios whose programs perf samples, or 'all' (default: {' '.join(DEFAULT_SCENARIOS)})"),
    arg("--requests", dest="samples", metavar="REQUESTS", type=positive_int, default=DEFAULT_SAMPLES,
        help="requests of the kernel's tracer per scenario"),
    arg("--freq", type=positive_int, default=DEFAULT_FREQ, help="perf samples per second (guest time)"),
    arg("--profile", choices=("mainline", "seed-v10"), default=None,
        help="the model's profile (default mainline; seed-v10 is the control that must show its cookie mismatches)"),
    arg("--single", action="store_true",
        help="one perf event (cpu = -1, the program's first thread) instead of one inherited event per CPU"),
    arg("--show", type=int, default=DEFAULT_SHOW, help="differences printed per scenario"),
    arg("--out", help="directory for the event files (default runs/TIMESTAMP-kernel-diff)"),
    KTAP_ARG,
    arg("--replay", metavar="EVENTS.jsonl", help="re-check a recorded event file, no guest"),
    *GUEST_ARGS,
])
def cmd_kernel_diff_or_replay(args) -> int:
    from ..lockstep.driver import DEFAULT_PROFILE
    if args.replay:
        return cmd_kernel_diff_replay(args)
    args.profile = args.profile or DEFAULT_PROFILE
    return cmd_kernel_diff(args)


def cmd_kernel_diff(args) -> int:
    """The lockstep on a guest; with ``--ktap -`` its printout goes to stderr and stdout carries
    the KTAP document alone (rendered from the summary.json it writes)."""
    ktap = getattr(args, "ktap", None)
    check_output_file("--ktap", ktap)
    doc: dict = {}
    with contextlib.redirect_stdout(sys.stderr) if ktap == "-" else contextlib.nullcontext():
        code = _kernel_diff(args, doc)
    if ktap and doc:
        from ..report.ktap import kernel_diff_ktap
        write_ktap(ktap, kernel_diff_ktap(doc))
    return code


def _kernel_diff(args, doc: dict) -> int:
    """The lockstep on a guest: each scenario's program under perf with defer_callchain; fills
    ``doc`` with what it wrote to summary.json."""
    from ..images.kernel import get_kernel
    from ..kernel.btf import Btf
    from ..lockstep.compare import Summary, deferred_support
    from ..lockstep.driver import KernelDiff, KernelDiffResult, check_support, events_path
    from ..lockstep.points import resolve_points
    from ..perf.capture import PERFCC
    from ..report.lockstep import lockstep_lines
    from ..report.rundir import new_run_dir
    from ..scenarios.catalog import programs_for, select_scenarios
    from ..session import Session
    scenarios = select_scenarios(args.scenarios, DEFAULT_SCENARIOS)
    ci = os.environ.get("CI", "").lower() == "true"
    default_kernel = args.kernel == "default" and not args.kernel_path

    def skip(release: str, why: str) -> int:
        print(f"kernel-diff: kernel {release}: {why}; the kernel-diff checks are skipped")
        doc.update({"release": release, "profile": args.profile, "skipped": why, "scenarios": []})
        if ci and default_kernel:
            print("kernel-diff: CI=true and this is the default kernel, which must have it: failure")
            return EXIT_FAILURES
        return EXIT_OK

    kernel = get_kernel(args.kernel, args.kernel_path)
    ok, why = deferred_support(Btf.from_elf(kernel.vmlinux))
    if not ok:
        return skip(kernel.release or kernel.package, why)
    spec = guest_spec(args, programs_for(scenarios) + [PERFCC])
    spec.check()  # --smp, --mem: before the run directory is made
    out = new_run_dir(args.out, suffix="-kernel-diff")  # unique and claimed, as harness run's
    total = Summary(args.profile)
    results: list[KernelDiffResult] = []
    errors: list[str] = []
    with Session(spec) as sess:
        ok, why = check_support(sess)
        if not ok:
            return skip(sess.info.release, why)
        points = resolve_points(sess)
        print(f"kernel-diff on {sess.kernel.package}={sess.kernel.version} ({sess.accel}, {args.smp} vCPU(s)), "
              f"model profile {args.profile}, tracer perf (defer_callchain) at {args.freq} Hz; "
              f"callbacks seen at {points.callback_how}; events in {out}/", file=sys.stderr)
        for sc in scenarios:
            path = events_path(out, sc.name, args.smp)
            with open(path, "w") as f:
                r = KernelDiff(sess, sc, args.profile, args.samples, args.freq, f, points,
                               single=getattr(args, "single", False)).run()
            r.events_path = str(path)
            results.append(r)
            total.merge(r.summary)
            errors += [f"{sc.name}: {e}" for e in r.errors]
            rate = r.requests / r.seconds if r.seconds else 0.0
            print(f"\n== {sc.name} ({sc.program} {' '.join(sc.args)}), {args.smp} vCPU(s): {r.requests} requests, "
                  f"{r.stops} stops in {r.seconds:.1f}s ({rate:.1f} requests/s)")
            for line in lockstep_lines(r.summary, show=args.show):
                print(line)
            for e in r.errors:
                print(f"ERROR: {e}")
    print(f"\n== total over {len(results)} scenario(s), {args.smp} vCPU(s), kernel {sess.info.release}")
    total.notes = []
    for line in lockstep_lines(total, show=0 if len(results) > 1 else args.show):
        print(line)
    code, why = _exit_code(total, args.profile, errors)
    from ..images.lock import write_atomic
    from ..report.ktap import kernel_diff_doc
    doc.update(kernel_diff_doc(results, args.profile, sess.info.release, code, why))
    try:
        write_atomic(out / "summary.json", json.dumps(doc, indent=1))
    except OSError as exc:
        print(f"summary.json not written: {exc}", file=sys.stderr)
    print(f"exit {code}: {why}")
    return code


def cmd_kernel_diff_replay(args) -> int:
    """Offline: run a recorded event file through a fresh lockstep."""
    from ..deferred.profile import get_profile
    from ..lockstep.compare import replay
    from ..lockstep.driver import DEFAULT_PROFILE, read_recording
    from ..report.lockstep import lockstep_lines
    events, header = read_recording(Path(args.replay))
    profile = args.profile or header.get("profile", DEFAULT_PROFILE)
    tracers = {int(k): v for k, v in (header.get("tracers") or {}).items()}
    percpu_ctr = {int(k): v for k, v in header.get("percpu_ctr", {}).items()}
    summary = replay(events, get_profile(profile), tracers, percpu_ctr)
    for line in lockstep_lines(summary, show=args.show):
        print(line)
    code, why = _exit_code(summary, profile, [])
    print(f"exit {code}: {why}")
    return code
