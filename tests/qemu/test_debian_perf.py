"""Debian's own perf (linux-perf of the kernel's suite) in the guest, for real.

On the default (7.x) guest: perf record --call-graph fp,defer of catalog programs (run by perfcc,
which samples them alongside), perf evlist -v must show defer_callchain: 1, perf script merged and
--no-merge-callchains, all compared with our stitcher and our unwinder.  One boot, about a minute
on TCG.  Kernels without deferred unwinding (bookworm 6.1, trixie 6.12) are skipped with that
reason, said plainly; under CI=true only the default kernel lacking it is a failure.
"""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.images.kernel import get_kernel
from harness.perf.capture import PERFCC
from harness.perf.debian_run import check_run, deferred_unsupported, run_debian_perf
from harness.report.perf import debian_table
from harness.scenarios.catalog import CATALOG
from harness.session import GuestSpec, Session
from tests.support.gating import require

pytestmark = pytest.mark.qemu

SCENARIOS = ("fp-syscall", "forkexec")
# perf record's seconds per scenario.  forkexec: 4 s, beside another pytest-xdist worker's guest
# 3 s gave 48 of our unwinder's comparisons for the 50 asked below (68 samples).  fp-syscall is
# always on the CPU: it had 806 samples in 4 s and 208 in 1 s (alone; cpu-clock at 200 Hz counts
# while it runs, so about as many beside another guest), four times the 50 asked, and 1 s takes
# 3.3 s less of the run (benchmarks/SUITE_TIME.md).
SECONDS = {"fp-syscall": 1, "forkexec": 4}
# What may differ is each run's declaration (DebianReport.declared: perf record execs perfcc, which
# forks and execs the target, with the target's own facts; harness/verdicts/causes.py says which
# causes those facts allow), not a list here.


@pytest.mark.parametrize("kernel", ["default", "trixie", "bookworm"])
def test_debian_perf_against_stitcher_and_unwinder(kernel, tmp_path):
    from harness.images.debperf import get_debian_perf

    k = get_kernel(kernel)
    why = deferred_unsupported(k.version)
    if why:
        if kernel == "default":
            require(False, f"the default kernel must have deferred callchains: {why}")
        pytest.skip(f"{kernel}: {why}")  # the specified outcome on 6.1 and 6.12, not a missing tool
    dp = get_debian_perf(kernel)
    assert dp.version == k.version, "linux-perf and the kernel come from the same source upload"
    progs = [PERFCC] + [(CATALOG[n].program, CATALOG[n].toolchain, CATALOG[n].variant) for n in SCENARIOS]
    with Session(GuestSpec(kernel=kernel, programs=progs, extra_files=dict(dp.files))) as s:
        for name in SCENARIOS:
            sc = CATALOG[name]
            prog = s.program(sc.program, sc.toolchain, sc.variant)
            files = run_debian_perf(s, prog, list(sc.args), seconds=SECONDS[name], freq=200)
            files.save(tmp_path / name, prog)  # harness perf --debian-perf --check DIR re-checks them
            assert "defer_callchain: 1" in files.evlist
            r = check_run(files, prog)
            assert r.unexplained == [], f"{name}:\n{debian_table(r)}\n\n" + "\n\n".join(r.unexplained[:3])
            # a sample in the task's last kernel entry (exiting: the request is refused) carries an
            # immediate FP user chain instead of a cookie
            # (forkexec gave 61 samples in 2 s on a quiet machine: its parent waits in wait4 while a
            # child runs; 4 s and at least 50 leave a margin, also beside another guest; fp-syscall
            # about 200 a second)
            assert r.samples >= 50 and r.deferred_samples >= 0.95 * r.samples, debian_table(r)
            assert r.joined >= 0.95 * r.deferred_samples and r.deferred_records >= 50, debian_table(r)
            assert r.merged_compared == r.samples and r.merged_equal + sum(
                n for k2, n in r.named.items() if k2 == "perf-script-sample-after-record") == r.samples, debian_table(r)
            assert r.unmerged_compared == r.unmerged_equal == r.samples + r.deferred_records, debian_table(r)
            assert r.ours_compared >= 50 and r.records_shared == r.records_shared_equal >= 50, debian_table(r)
            assert r.regs_equal >= 0.9 * r.regs_compared, debian_table(r)
            assert r.declared is not None and "execve-replaced" in r.declared, debian_table(r)
            assert r.undeclared == {}, debian_table(r)  # a named difference these facts cannot show
            assert r.perf_version == k.version.split("-")[0]


@pytest.mark.parametrize("kernel", ["bookworm", "trixie"])
def test_kernels_without_deferred_unwinding_are_skipped_plainly(kernel, capsys):
    k = get_kernel(kernel)
    why = deferred_unsupported(k.version)
    assert why and "no deferred unwinding" in why and k.version in why
    assert main(["perf", "--debian-perf", "--kernel", kernel]) == 2  # nothing booted
    err = capsys.readouterr().err
    assert f"--debian-perf skipped on {kernel}" in err and "no deferred unwinding (unwind_deferred came in 6.17" in err
