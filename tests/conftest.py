"""The suite's hooks and session fixtures: Hypothesis profiles, the tools a ``qemu`` test needs
(through the CI-strict :func:`tests.support.gating.require`), xdist groups, the guest pool.

Tests marked ``qemu`` boot real guests.  Where QEMU, GDB or the images are missing they are
skipped with a readable reason, except in CI (``CI`` set) or with ``HARNESS_REQUIRE_QEMU=1``,
where a missing piece is a failure: a green CI must never hide a missing install step.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.gating import require
from tests.support.guest_pool import GuestPool, declared_pool_guests, pool_group

# "ci": more examples for every property test; the deferred stateful test takes 2,000 of its
# own under this profile (tests/support/deferred_settings.py).
settings.register_profile("ci", max_examples=500, deadline=None)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# The session fixtures of gdb-captured snapshots (tailcall_snaps, tailcall_fp_snaps, fp_snaps),
# shared by tests/unit/verdicts/test_causes.py and tests/unit/unwind/test_mixed_tailcall.py: one
# definition, so each is captured once a session (imported into each module, each module had its own).
pytest_plugins = ["tests.support.cause_snapshots"]

REQUIRED_TOOLS = ("qemu-system-x86_64", "gdb", "socat", "busybox", "debootstrap", "zstd")


def pytest_runtest_setup(item):
    if item.get_closest_marker("qemu"):
        missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
        require(not missing, f"tools not installed: {', '.join(missing)} (run ./dev test)")


# --- pytest-xdist (tox -e qemu runs `-n 2 --dist loadgroup`) ---------------------------------
# A test marked ``pool_guest(spec)`` takes its guest from the worker's pool (below): all the tests
# of one kind of guest get one group, so it boots once per session on one worker; the kinds (the
# default guest, 2 vCPUs, 6.1, ...) balance across the workers.
# A QEMU module whose guest is a module-scoped fixture must run on one worker, or each worker
# would boot that guest again: every such test gets the xdist_group of its module and of the
# values of its module's module-scoped parameters (test_engine.py's guests, test_platform.py's
# kernels), so two guests of one module can still run on two workers.  Tests without one
# (each boots its own guest, or runs the CLI) are spread one by one.  Without xdist the marker
# does nothing.


def _guest_group(item) -> str | None:
    module = item.getparent(pytest.Module)
    if module is None:
        return None
    shared = {name for name, defs in item._fixtureinfo.name2fixturedefs.items()
              if defs and defs[-1].scope in ("module", "package", "session") and defs[-1].baseid == module.nodeid}
    if not shared:
        return None
    params = getattr(item, "callspec", None)
    values = [f"{name}={params.params[name]}" for name in sorted(shared) if params and name in params.params]
    return "|".join([module.nodeid, *values])


def pytest_itemcollected(item):
    if item.get_closest_marker("qemu") and not item.get_closest_marker("xdist_group"):
        # A test that takes a guest from the pool (tests/qemu: ``pool_guest(GuestSpec)``) runs
        # where the other tests of that kind of guest run: one boot of it for the session.
        pooled = item.get_closest_marker("pool_guest")
        group = pool_group(pooled.args[0]) if pooled else _guest_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """An xdist worker tells the controller an item's group by the suffix ``@GROUP`` of the node
    id it reports.  pytest-xdist 3.8 (the latest) sets it through ``Item._nodeid``, which pytest
    9.2 no longer reads (``Node._id``, a ``NodeId``): loadgroup then ran every test on its own
    and both workers booted a module's guest (measured: most module-scoped guests were set
    up twice).  Done here where xdist's did not take."""
    if hasattr(config, "workerinput"):  # an xdist worker: the order the controller hands modules out in
        _longest_first(items)
    if not getattr(config.option, "loadgroup", False):  # set in xdist's workers only
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(names)}")


# --- the unit suite on pytest-xdist (tox -e py runs `-n 2 --dist loadfile`) ---------------------
# With loadfile a module is a unit of work, run on one worker; the controller hands the units out
# in the order the workers collected them, and a worker takes its next unit when two tests of its
# current one are left.  xdist's own order (--loadscope-reorder, its default) is by number of tests
# a module has: the modules of a few long tests (10^5 mutated logs in 4 tests, a fuzz campaign
# in 6, the deferred model's two machines) then came last, and the worker that drew the last one
# ran alone to the end (8 s of the suite's end on one worker, measured).  The longest modules go
# first instead, longest first, each worker taking the next as it frees: the last units are short
# ones, and the two workers end together.  The list is each module's CPU in the unit tier, largest
# first (without its deep-marked tests; 2026-12-07 evening, measured by benchmarks/suite_cpu.py on
# the loaded machine, benchmarks/SUITE_TIME.md: test_kernel_build, 62 s then and missing from the
# list, ran last and alone for 27 s), with those that mostly wait placed by their wall time; the
# modules below 1.1 s follow in their collection order.  A module missing from the list only runs
# later than it could.
LONGEST_FIRST = (
    "tests/unit/images/test_kernel_build.py",  # the tree's kconfig and a make that fails (nice 19: waits under load)
    "tests/unit/kernel/test_config.py",  # the tree's kconfig, five passes
    "tests/unit/campaign/test_spread.py",  # Dask clusters' starts, a killed worker: waits as much as CPU
    "tests/unit/sframe/test_check.py",
    "tests/unit/fuzz/test_user_toolchain.py",
    "tests/unit/sframe/test_tree.py",
    "tests/unit/verdicts/test_causes.py",
    "tests/unit/kernel/test_btf.py",
    "tests/unit/test_docs.py",
    "tests/unit/fuzz/test_bugreport.py",
    "tests/unit/report/test_ktap.py",
    "tests/unit/unwind/test_ehframe.py",
    "tests/unit/transport/test_rsp_pipeline.py",  # 5 s of wall, its timeouts; no CPU
    "tests/unit/unwind/test_user_real.py",
    "tests/unit/sframe/test_tree_faults.py",
    "tests/unit/fuzz/test_sid_compilers.py",
    "tests/unit/kernel/test_kallsyms.py",
    "tests/unit/deferred/test_model_stateful.py",
    "tests/unit/sframe/test_elf_toolchains.py",
    "tests/unit/unwind/test_load_bias.py",
    "tests/unit/lockstep/test_compare.py",
    "tests/unit/unwind/test_places.py",
    "tests/unit/deferred/test_check_mutations.py",
    "tests/unit/perf/test_records.py",
    "tests/unit/verdicts/test_cfi_libcrypto.py",
    "tests/unit/deferred/test_log_encode.py",
    "tests/unit/unwind/test_cfi_compat.py",
    "tests/unit/fuzz/test_static.py",
    "tests/unit/test_fuzz_corpus.py",
    "tests/unit/fuzz/test_build.py",
    "tests/unit/report/test_html_browser.py",
    "tests/unit/test_progress_terminal.py",
    "tests/unit/images/test_programs_user.py",
    "tests/unit/fuzz/test_campaign.py",
    "tests/unit/images/test_cache_lock.py",  # 1 s of CPU, several of wall: its lock waits
    "tests/unit/unwind/test_cfi_eh_return.py",
    "tests/unit/verdicts/test_align_recursion.py",
    "tests/unit/verdicts/test_causes_go.py",
    "tests/unit/sframe/test_parse_hypothesis.py",
    "tests/unit/sframe/test_objects.py",
    "tests/unit/fuzz/test_shape.py",
    "tests/unit/report/test_sframe_dump.py",
    "tests/unit/test_pytest_plugin.py",
    "tests/unit/commands/test_contract_inputs.py",
)


def pytest_configure(config):
    if config.getoption("dist", "no") == "loadfile":  # the controller: keep the workers' order
        config.option.loadscopereorder = False


def _longest_first(items) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable


# --- what a failed QEMU test leaves behind ---------------------------------------------------


@pytest.fixture
def kept_failures(request):
    """Where a failing QEMU test keeps its evidence (the log, the failing stacks' snapshots):
    ``test-failures/<test>-<time>/`` under the repository (or ``$HARNESS_TEST_FAILURES``), made
    only when something is written.  A flake seen once in a campaign stays to be looked at and
    replayed (pytest's tmp_path keeps only the last three sessions)."""
    base = os.environ.get("HARNESS_TEST_FAILURES") or request.config.rootpath / "test-failures"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid.split("::", 1)[-1])[:120]
    return Path(base) / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


# --- one pool of guests per worker (tests/support/guest_pool.py) -------------------------


@pytest.fixture(scope="session")
def guest_pool(request):
    """This worker's pool of guests: ``with guest_pool.take(GuestSpec(...)) as session:``."""
    pool = GuestPool(declared_pool_guests(request.session.items))
    try:
        yield pool
    finally:
        pool.close()
        if pool.boots:
            print(f"\nguest pool: {pool.boots} boot(s), {pool.reuses} reuse(s), "
                  f"{len(pool.discarded)} discarded: {pool.discarded}")
