"""``harness report RUN_DIR``: report.html (and SCENARIO.folded), or perf-script text, from a run directory."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..errors import EXIT_OK, EXIT_USAGE
from . import arg, command


@command("report", help="report.html (or other formats) from a run directory", args=[
    arg("run_dir", help="a directory written by harness run (run.json, SCENARIO.jsonl)"),
    arg("--format", default="html", choices=("html", "folded", "perf-script", "ktap"),
        help="html: report.html and SCENARIO.folded in RUN_DIR; folded: the .folded files only; "
             "perf-script: the unwinder's stacks as perf script text (stdout or --output); ktap: KTAP version 1 "
             "from its summary.json (run or kernel-diff), or from its logs when it has none (stdout or --output)"),
    arg("--output", "-o", help="write here instead of the default place"),
    arg("--quiet", "-q", action="store_true", help="no progress lines on stderr"),
])
def cmd_report(args) -> int:
    """Reports of a run directory: html (report.html, with SCENARIO.folded beside it), folded, or
    perf-script text (on stdout, or in --output)."""
    from ..report.flame import flame_svg, write_folded
    from ..report.html import write_html
    from ..report.perfscript import write_perf_script
    from ..report.run import RunDirError, read_run
    from ..scenarios.catalog import CATALOG
    t0 = time.monotonic()
    if args.format == "ktap":
        return _ktap(args)
    try:
        progress = None if getattr(args, "quiet", False) else (lambda line: print(f"report: {line}", file=sys.stderr))
        run = read_run(Path(args.run_dir), keep_samples=args.format == "perf-script", progress=progress,
                       order=list(CATALOG))
    except RunDirError as exc:
        print(f"harness report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "perf-script":
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
        return EXIT_OK
    for s in run.scenarios:
        write_folded(s.folded, run.path / f"{s.name}.folded")
    print(f"{len(run.scenarios)} collapsed-stack file(s) in {run.path}/ (SCENARIO.folded)")
    if args.format == "html":
        flames = {s.name: flame_svg(s.folded, f"{s.name}: {s.stacks} stacks ({s.unwinder})") for s in run.scenarios}
        if progress:
            progress(f"{len(flames)} flame graph(s) drawn, rendering the page")
        path = write_html(run, Path(args.output) if args.output else None, flames)
        print(f"{path} ({path.stat().st_size:,} bytes, {run.stacks} stacks, {time.monotonic() - t0:.1f}s)")
    return EXIT_OK


def _ktap(args) -> int:
    """KTAP of a run directory: from summary.json (run's or kernel-diff's), else read back from the logs."""
    import json

    from ..report.ktap import kernel_diff_ktap, run_doc, run_ktap
    from ..report.run import RunDirError, read_run
    path = Path(args.run_dir)
    summary = path / "summary.json"
    try:
        if summary.is_file():
            doc = json.loads(summary.read_text())
            text = kernel_diff_ktap(doc) if "profile" in doc else run_ktap(doc)
        else:
            text = run_ktap(run_doc(read_run(path)))
    except (RunDirError, ValueError) as exc:
        print(f"harness report: {summary if summary.is_file() else path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK
