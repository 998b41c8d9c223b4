"""``harness matrix``: the scenarios on every kernel x QEMU x vCPU count, one ``harness run`` per
cell, the cells in parallel across the workers of a Dask cluster (a LocalCluster by default).

    harness matrix --kernels cloud,generic,rt,6.12,6.1,PATH --qemu host,backports --smp 1,2 [SCENARIOS]

One directory (``--out``, default ``runs/TIMESTAMP-matrix``) with a sub-run per cell (``CELL/``:
the run directory as ``harness run --report`` leaves it), ``matrix.json`` and one
``report.html`` over all of them; one table (scenarios x cells: stacks/failed stacks, then the
causes).  Exit status as ``harness run``'s over every cell: the worst of them (a cell that never
came back, or an interrupt, is 3).
"""

from __future__ import annotations

import json
import sys

from ..errors import EXIT_INFRA
from . import arg, cluster_args, command, positive_float, sample_count
from ._ktap import KTAP_ARG, check_output_file, write_ktap


@command("matrix", help="the scenarios on every kernel x QEMU x vCPU count, one harness run per cell, in parallel",
         description=__doc__.split("\n\n")[0],
         args=[
             arg("scenarios", nargs="*", help="scenario names, or 'all' (default: harness run's one-minute set)"),
             arg("--kernels", default="cloud", metavar="K,..",
                 help="kernels as harness run --kernel takes them (default, generic, rt, trixie, bookworm; "
                      "aliases cloud=default, 6.12=trixie, 6.1=bookworm) or a bzImage/vmlinux path (default cloud)"),
             arg("--qemu", default="host,backports", metavar="Q,..", help="host, backports (default both)"),
             arg("--smp", default="1", metavar="N,..", help="vCPU counts (default 1)"),
             arg("--samples", type=sample_count, help="requests per scenario in each run"),
             arg("--out", help="the matrix's directory: new or empty (default runs/TIMESTAMP-matrix)"),
             arg("--cell-timeout", type=positive_float, default=3600.0,
                 help="seconds one cell's run may take before it is killed (default 3600)"),
             *cluster_args(),
             KTAP_ARG,
         ])
def cmd_matrix(args) -> int:
    from ..campaign.executor import Executor
    from ..matrix import cells, parse_kernels, parse_qemus, parse_smp, run_matrix
    from ..report.cluster import format_cluster
    from ..report.matrix import format_matrix, write_matrix_html
    from ..report.rundir import new_run_dir
    from ..scenarios.catalog import DEFAULT_SET, select_scenarios

    check_output_file("--ktap", args.ktap)
    scenarios = tuple(s.name for s in select_scenarios(args.scenarios or list(DEFAULT_SET)))
    grid = cells(parse_kernels(args.kernels), parse_qemus(args.qemu), parse_smp(args.smp))
    out = new_run_dir(args.out, suffix="-matrix")
    with Executor(args.scheduler, workers=args.workers, topic="matrix", live=True) as ex:
        print(f"harness matrix: {len(grid)} cells on {ex.summary.where}, {ex.summary.workers} workers; dashboard "
              f"{ex.summary.dashboard or '(none)'}; into {out}/", file=sys.stderr, flush=True)
        try:
            res, summary = run_matrix(ex, grid, scenarios, out, samples=args.samples, timeout=args.cell_timeout)
        finally:
            data_path = out / "matrix.json"
            if data_path.is_file():
                write_matrix_html(json.loads(data_path.read_text()), out)
    data = res.to_json()
    data["cluster"] = summary.to_json()
    human = sys.stderr if args.ktap == "-" else sys.stdout  # with --ktap -, stdout carries the KTAP alone
    print(format_matrix(data, out=str(out)), file=human)
    print(format_cluster(summary.to_json(), unit="runs"), file=human)
    code = res.exit_code
    if summary.failed:
        code = max(code, EXIT_INFRA)
    print(f"exit {code}", file=human)
    if args.ktap:
        from ..report.ktap import matrix_ktap
        write_ktap(args.ktap, matrix_ktap(data))
    return code


__all__ = ["cmd_matrix"]
