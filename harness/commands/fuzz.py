"""``harness fuzz``: generated programs across toolchains, linkers and flags, checked by the
unwinders against each other; each finding shrunk to a minimal reproducer.

    harness fuzz --static [--budget S] [--seeds A:B] [--out DIR] [--toolchains T,..] [--linkers L,..]
                 [--toolchain NAME=PREFIX ...]   a user's own install (PREFIX/bin: gcc or clang, as, ld)
    harness fuzz [--budget S] ...            live: the programs sampled in a guest (harness.fuzz.live)
    harness fuzz ... --scheduler tcp://HOST:PORT   on an existing Dask cluster (default: a LocalCluster)
    harness fuzz replay DIR                  rebuild and recheck one reproducer
    harness fuzz merge DIR... [--out DIR]    join campaign result directories
    harness fuzz report DIR                  each signature's reproducer as a bug report (report.md)

A campaign runs as tasks on Dask (harness.fuzz.spread): an embedded LocalCluster of one worker
per core (--workers N), or the cluster of --scheduler.

Exit status: a campaign 1 when it found any signature, else 0 (3 when a task failed every try:
the campaign is incomplete); replay 1 while the reproducer
still shows its signature, 0 once it does not; merge 1 when the merged result has signatures;
report 0 once written; 2 bad usage or input; 3 infrastructure (a toolchain root that cannot be had, a guest that died or
hung in live mode, an interrupt).  In live mode a program that crashes in the guest is a finding
(``live-crash``), not an error of the harness.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EXIT_FAILURES, EXIT_INFRA, EXIT_OK, EXIT_USAGE
from ..fuzz.defaults import LINKERS, LIVE_SAMPLES
from ..images.toolchain import DEFAULT_TOOLCHAINS, TOOLCHAINS
from . import arg, cluster_args, command, positive_float, positive_int, sample_count
from ._ktap import KTAP_ARG, check_output_file, write_ktap

if TYPE_CHECKING:  # the module itself is imported where it is used (commands/__init__.py)
    from ..fuzz.campaign import Checker


def _seeds(text: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a seed range A:B: {text!r}") from None
    if not 0 <= a < b:
        raise argparse.ArgumentTypeError(f"seeds {text}: an empty range (A:B with 0 <= A < B)")
    return a, b


def _names(known: tuple[str, ...] | None):
    """A comma list of names; ``known`` None: checked later (the toolchains, once ``--toolchain``
    has added the user's)."""
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n for n in text.split(",") if n)
        bad = [n for n in names if known is not None and n not in known]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: known are {', '.join(known or ())}")
        return names
    return parse


def _user_toolchain(text: str) -> tuple[str, str]:
    name, sep, prefix = text.partition("=")
    if not sep or not name or not prefix:
        raise argparse.ArgumentTypeError(f"not NAME=PREFIX: {text!r}")
    return name, prefix


def _toolchains(args) -> tuple[str, ...] | None:
    """Register ``--toolchain NAME=PREFIX`` installs and check ``--toolchains``; None after a
    message on stderr when either is bad (exit 2).  A user's install named alone joins the default
    matrix."""
    from ..images.errors import ImageError
    from ..images.toolchain import known_toolchains, user_toolchain
    for name, prefix in args.toolchain or ():
        try:
            user_toolchain(name, prefix)
        except ImageError as exc:
            print(f"harness fuzz: {exc}", file=sys.stderr)
            return None
    users = tuple(n for n, _ in args.toolchain or ())
    names = args.toolchains or (users or DEFAULT_TOOLCHAINS)
    bad = [n for n in names if n not in known_toolchains()]
    if bad:
        print(f"harness fuzz: --toolchains {','.join(bad)}: known are {', '.join(known_toolchains())}",
              file=sys.stderr)
        return None
    return names


def live_checker(args) -> Checker:
    """The live mode's checker: each program sampled in a guest (harness.fuzz.live)."""
    from ..fuzz.live import LiveChecker
    return LiveChecker(samples=args.samples, kernel=args.kernel, qemu=args.qemu,
                       perf=not getattr(args, "no_perf", False))


@command("fuzz", help="generated stack shapes across toolchains and linkers, shrunk to minimal reproducers",
         description=__doc__.split("\n\n")[0],
         args=[
             arg("action", nargs="?", metavar="replay|merge|report",
                 help="replay DIR: recheck a reproducer; merge DIR...: join campaign results; report DIR...: "
                      "a Markdown bug report per signature (DIR/report.md)"),
             arg("dirs", nargs="*", metavar="DIR",
                 help="replay: one reproducer directory; merge: campaign dirs; report: reproducer or campaign dirs"),
             arg("--static", action="store_true", help="the static checker: no guest (default: live)"),
             arg("--budget", type=positive_float, default=300.0, help="seconds the campaign may take (default 300)"),
             arg("--seeds", type=_seeds, default=(0, 1_000_000), metavar="A:B",
                 help="hypothesis seeds A..B-1, in order (split a campaign across machines; default 0:1000000)"),
             arg("--out", metavar="DIR", help="one reproducer directory per signature, and campaign.json"),
             arg("--toolchains", type=_names(None), default=None, metavar="T,..",
                 help=f"toolchains, of {','.join(TOOLCHAINS)} and --toolchain's names (default "
                      f"{','.join(DEFAULT_TOOLCHAINS)}, or the --toolchain installs when given)"),
             arg("--toolchain", type=_user_toolchain, action="append", metavar="NAME=PREFIX",
                 help="a user's own install, run on the host: PREFIX/bin holds gcc or clang, as and ld "
                      "(repeatable; its versions go into every reproducer)"),
             arg("--linkers", type=_names(LINKERS), default=None, metavar="L,..",
                 help=f"linkers (default: those installed of {','.join(LINKERS)})"),
             arg("--no-shrink", action="store_true", help="keep the first program of each signature, unshrunk"),
             arg("--samples", type=sample_count, default=LIVE_SAMPLES,
                 help=f"live: requests on each program (default {LIVE_SAMPLES})"),
             arg("--kernel", help="live: the guest kernel, as harness run --kernel takes it, or a bzImage's path"),
             arg("--qemu", choices=("auto", "host", "backports"), help="live: the QEMU, as harness run --qemu"),
             arg("--no-perf", action="store_true",
                 help="live: without Debian's perf oracle (perf record --call-graph fp,defer of each program, its "
                      "deferred callchains against our unwinder; skipped anyway where the kernel has none)"),
             *cluster_args(),
             arg("--chunk", type=positive_int, metavar="N",
                 help="seeds per task (default 2 static, 1 live; more on a big cluster: docs/scale.md)"),
             KTAP_ARG,
         ])
def cmd_fuzz(args) -> int:
    from ..fuzz.build import linker_available
    from ..fuzz.campaign import merge
    from ..fuzz.static import StaticChecker
    from ..report.fuzz import format_campaign
    if args.action not in (None, "replay", "merge", "report"):
        print(f"harness fuzz: {args.action!r} is not replay, merge or report (see harness fuzz --help)",
              file=sys.stderr)
        return EXIT_USAGE
    toolchains = _toolchains(args)
    if toolchains is None:
        return EXIT_USAGE
    if args.action == "replay":
        if len(args.dirs) != 1:
            print("harness fuzz: replay takes one reproducer directory", file=sys.stderr)
            return EXIT_USAGE
        return _replay(args, Path(args.dirs[0]))
    if args.action == "report":
        if not args.dirs:
            print("harness fuzz: report takes reproducer or campaign directories", file=sys.stderr)
            return EXIT_USAGE
        return _report([Path(d) for d in args.dirs])
    if args.action == "merge":
        if not args.dirs:
            print("harness fuzz: merge takes campaign result directories", file=sys.stderr)
            return EXIT_USAGE
        check_output_file("--ktap", args.ktap)
        merged = merge([Path(d) for d in args.dirs], Path(args.out) if args.out else None)
        _print(args, format_campaign(merged, out=args.out), merged)
        return EXIT_FAILURES if merged["signatures"] else EXIT_OK
    if args.dirs:
        print("harness fuzz: DIR arguments go with replay or merge", file=sys.stderr)
        return EXIT_USAGE
    from ..campaign.executor import Executor
    from ..fuzz import spread
    from ..report.cluster import format_cluster
    check_output_file("--ktap", args.ktap)
    checker = StaticChecker() if args.static else live_checker(args)
    linkers = args.linkers or tuple(x for x in LINKERS if linker_available("host", x))
    from ..campaign.executor import SchedulerLost
    camp = None
    with Executor(args.scheduler, workers=args.workers, topic="fuzz", live=not args.static) as ex:
        print(f"harness fuzz: {ex.summary.where}, {ex.summary.workers} workers; dashboard "
              f"{ex.summary.dashboard or '(none)'}", file=sys.stderr, flush=True)
        try:
            camp, summary = spread.run(ex, checker, seeds=args.seeds, budget=args.budget,
                                       toolchains=toolchains, linkers=linkers,
                                       out=Path(args.out) if args.out else None, shrink=not args.no_shrink,
                                       mode="static" if args.static else "live", live=not args.static,
                                       chunk=args.chunk)
        except SchedulerLost as exc:
            print(f"harness fuzz: {exc}", file=sys.stderr)
            if args.out:
                print(f"what was done is in {Path(args.out) / 'campaign.json'}", file=sys.stderr)
            return EXIT_INFRA
    _print(args, format_campaign(camp.to_json(), out=args.out) + "\n" + format_cluster(summary.to_json()),
           camp.to_json())
    if summary.failed:
        return EXIT_INFRA
    return EXIT_FAILURES if camp.records else EXIT_OK


def _print(args, text: str, campaign: dict) -> None:
    """The campaign's table, and its KTAP with --ktap (then on stdout alone: the table to stderr)."""
    from ..report.ktap import fuzz_ktap
    print(text, file=sys.stderr if args.ktap == "-" else sys.stdout)
    if args.ktap:
        write_ktap(args.ktap, fuzz_ktap(campaign))


def _replay(args, d: Path) -> int:
    from ..fuzz.campaign import load_reproducer, replay
    from ..fuzz.static import StaticChecker
    from ..report.fuzz import format_replay

    mode = load_reproducer(d).get("signature", {})
    checker = live_checker(args) if not args.static and mode.get("kind", "").startswith("live") else StaticChecker()
    work = Path(tempfile.mkdtemp(prefix="harness-fuzz-replay-"))
    try:
        r = replay(d, checker, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    others = sorted({f.signature.key for f in r.findings} - {r.signature.key})
    print(format_replay(str(d), r.signature.key, r.reproduces, others))
    return EXIT_FAILURES if r.reproduces else EXIT_OK


def _report(dirs: list[Path]) -> int:
    """Write DIR/report.md for each reproducer under ``dirs`` (harness.fuzz.bugreport)."""
    from ..fuzz.bugreport import REPORT_MD, gather, reproducer_dirs
    from ..report.finding import render_report

    repros = [r for d in dirs for r in reproducer_dirs(d)]
    work = Path(tempfile.mkdtemp(prefix="harness-fuzz-report-"))
    try:
        for d in repros:
            report = gather(d, work)
            (d / REPORT_MD).write_text(render_report(report))
            print(f"{d / REPORT_MD}: {report.title}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return EXIT_OK
