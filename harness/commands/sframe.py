"""``harness sframe``: the SFrame section of a binary, checked or dumped, without a guest.

    harness sframe check [--binutils X.Y] [--limit N] [--debug] BINARY...
    harness sframe check --tree DIR [--workers N | --scheduler tcp://HOST:PORT] [--chunk N] [--timeout S]
    harness sframe check --tree DIR --jobs N     (a process pool of N here, no Dask)
    harness sframe dump [--debug] BINARY

``check`` runs :func:`harness.unwind.sframe_check.check_file` on each binary, object or archive
(each member) and prints its findings and a summary; ``--tree`` checks every ELF file and archive
under a directory (:mod:`harness.unwind.sframe_tree`); ``dump`` prints the section as the
toolchain's ``objdump --sframe`` does (an object's relocations applied where that objdump applies
them).

Exit status: 0 clean; 1 a disagreement or violation in some binary; 2 bad usage or input (a
missing, unreadable or non-ELF file, no .sframe section, a section that does not decode: one
line naming it, ``--debug`` for the traceback; every other binary is still checked) and a check
that is no verdict (a section with no FDE, an ``.eh_frame`` that does not decode or is missing,
no FRE compared, an archive without SFrame data, a tree where no file has any: its summary says
which; a check that checked nothing is never clean); 3 infrastructure (an I/O error,
interrupted).  The highest applies.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import EXIT_FAILURES, EXIT_INFRA, EXIT_OK, EXIT_USAGE
from . import arg, cluster_args, command, group, positive_int


def _binutils(text: str) -> tuple[int, int]:
    try:
        major, minor = (int(x) for x in text.split(".")[:2])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a binutils version (X.Y): {text!r}") from None
    return major, minor


def _one_line(path: str, exc: BaseException) -> str:
    from ..sframe.errors import SFrameError
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, SFrameError) and exc.offset is None and msg.startswith(f"{exc.field}: "):
        msg = msg[len(exc.field) + 2:]  # the field adds nothing where the message names the file
    return msg if path in msg else f"{path}: {msg}"


def _guarded(path: str, debug: bool, work) -> int:
    """Run ``work()``; map what it raises to an exit status and one line on stderr."""
    from ..sframe.errors import SFrameError
    try:
        return work()
    except SFrameError as exc:
        if debug:
            raise
        print(f"harness sframe: {_one_line(path, exc)}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, KeyboardInterrupt) as exc:
        if debug:
            raise
        what = "interrupted" if isinstance(exc, KeyboardInterrupt) else _one_line(path, exc)
        print(f"harness sframe: {what}", file=sys.stderr)
        return EXIT_INFRA


_DEBUG = arg("--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of a bad input")

group("sframe", help="check or dump a binary's SFrame section (no guest)", description=__doc__.split("\n\n")[0])


@command("check", parent="sframe", help="header, FDE table, FREs and rules against .eh_frame",
         description="Check each binary's .sframe: header flags, FDEs sorted, non-overlapping, inside executable "
                     "segments and matching function symbols, FRE starts inside their functions, every FRE's "
                     "CFA/RA/FP rule equal to the DWARF CFI (.eh_frame) row for the same addresses.  Exit 0 clean, "
                     "1 findings, 2 bad input or no verdict (nothing checked), 3 infrastructure.",
         args=[
             arg("binaries", nargs="*", metavar="BINARY", help="ELF files, objects or ar archives"),
             arg("--tree", metavar="DIR",
                 help="every ELF file and archive under DIR, checked in parallel: one line per finding kind, and "
                      "the Debian packages (dpkg's lists under DIR) whose files carry SFrame data"),
             arg("--jobs", type=int, default=None,
                 help="--tree: a process pool of N on this machine instead of Dask tasks (default: Dask, a "
                      "LocalCluster of one worker per core, or --scheduler's cluster)"),
             arg("--timeout", type=float, default=1800.0, help="--tree: seconds the whole run may take"),
             arg("--binutils", type=_binutils, metavar="X.Y",
                 help="the binutils that linked the binaries: from 2.45 a V2 section must carry "
                      "SFRAME_F_FDE_FUNC_START_PCREL"),
             arg("--limit", type=int, default=20, help="findings printed per kind and binary (default 20)"),
             *cluster_args(),
             arg("--chunk", type=positive_int, default=32, metavar="N",
                 help="--tree as Dask tasks: files per task (default 32)"),
             _DEBUG,
         ])
def cmd_check(args) -> int:
    from ..report.sframe import format_file_check
    from ..unwind.sframe_check import check_file
    status = EXIT_OK
    if args.tree is not None:
        if args.binaries:
            print("harness sframe: check takes BINARY... or --tree DIR, not both", file=sys.stderr)
            return EXIT_USAGE
        return _check_tree(args)
    if not args.binaries:
        print("harness sframe: check needs BINARY... or --tree DIR", file=sys.stderr)
        return EXIT_USAGE

    for path in args.binaries:
        def work(path=path) -> int:
            r = check_file(path, expect_binutils=args.binutils)
            print(format_file_check(r, limit=args.limit))
            if r.errors or r.no_verdict:  # bad input: an unreadable member, or nothing to judge
                return EXIT_USAGE
            return EXIT_OK if r.clean else EXIT_FAILURES

        status = max(status, _guarded(path, args.debug, work))
        if status == EXIT_INFRA:
            break
    return status


def tree_on_cluster(args):
    """``--tree`` as tasks on Dask (``--scheduler`` or ``--workers``): the files in chunks of
    ``--chunk``, each task's results merged here; a chunk not done by ``--timeout`` counts its
    files as timed out.  Every worker must see the tree at the same path."""
    import time

    from ..campaign.executor import Executor, Task
    from ..report.cluster import format_cluster
    from ..unwind.sframe_tree import check_chunk, chunks, finish, scan
    t0 = time.monotonic()
    rep, found = scan(args.tree)
    parts = {f"files-{i}": c for i, c in enumerate(chunks(found, args.chunk))}
    done: set[str] = set()

    def on_result(o) -> None:
        if o.ok:
            rep.results.extend(o.result)
            done.add(o.task.key)

    with Executor(args.scheduler, workers=args.workers, topic="sframe") as ex:
        rep.jobs = ex.summary.workers
        summary = ex.run([Task(k, check_chunk, (c, str(rep.root), args.binutils)) for k, c in parts.items()],
                         on_result, count=lambda r: 0, unit="files", deadline=t0 + args.timeout)
    summary.units = sum(len(c) for k, c in parts.items() if k in done)
    rep.timed_out = sum(len(c) for k, c in parts.items() if k in summary.unfinished)
    failed = sum(len(parts[o.task.key]) for o in summary.failed)
    return finish(rep, t0), summary, failed, format_cluster


def _check_tree(args) -> int:
    from ..report.sframe import format_tree
    from ..unwind.sframe_tree import check_tree
    def work() -> int:
        if args.scheduler or args.workers or not args.jobs:  # Dask (issue 36): a LocalCluster by default
            rep, summary, failed, format_cluster = tree_on_cluster(args)
            print(format_tree(rep, limit=args.limit))
            print(format_cluster(summary.to_json(), unit="files"))
            if failed:
                return EXIT_INFRA
        else:
            rep = check_tree(args.tree, jobs=args.jobs, timeout=args.timeout, expect_binutils=args.binutils)
            print(format_tree(rep, limit=args.limit))
        if rep.timed_out or any(r.crash for r in rep.results):
            return EXIT_INFRA
        if any(r.errors or r.no_verdict for r in rep.results) or not rep.with_sframe:
            return EXIT_USAGE  # bad input, or a verdict that would rest on nothing
        return EXIT_FAILURES if any(r.kinds for r in rep.results) else EXIT_OK

    return _guarded(args.tree, args.debug, work)


@command("dump", parent="sframe", help="the decoded section in the layout of objdump --sframe",
         description="Print the .sframe section as the objdump --sframe of the binutils that writes its version "
                     "does (2.40 for V1, 2.44 for V2, 2.46+ for V3).",
         args=[arg("binary", metavar="BINARY"), _DEBUG])
def cmd_dump(args) -> int:
    from ..report.sframe import objdump_sframe, objdump_sframe_archive
    from ..unwind.sframe_check import is_archive_file, load, load_members
    def work() -> int:
        if is_archive_file(args.binary):
            members = load_members(args.binary)
            for _, table in members:
                if table is not None:
                    table.section.decode_all()
            sys.stdout.write(objdump_sframe_archive(args.binary, members))
            return EXIT_OK
        table, _ = load(args.binary, strict=False, place=False)  # a faulty section is shown as it is
        table.section.decode_all()
        sys.stdout.write(objdump_sframe(table, args.binary))
        return EXIT_OK

    return _guarded(args.binary, args.debug, work)
