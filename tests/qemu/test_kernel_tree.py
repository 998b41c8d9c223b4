"""A kernel engineer's loop on a real tree: Debian's linux-source-7.3 (7.3.4, the default
kernel's version) built by ``harness kernel build``, booted with ``--kernel tree:PATH``.

The tree is a hard-linked work copy at a stable path in the cache (tests/support/kernel_tree.py),
so its build directory stays warm: the cold build (tens of minutes: docs/kernel.md) happens once
per cache, every later session reuses it by the tree's content hash and config.  On the built
kernel: the whole catalog passes (``harness run all``) and kernel-diff finds no difference, both
also as KTAP read back with the tree's own kunit_parser and checked against summary.json; then a
changed line of kernel/unwind/deferred.c makes the next ``harness run --kernel tree:PATH``
rebuild (incrementally: that file and the link) and boot the edited kernel.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid

import pytest

from harness.images.kernel_build import BUILD_TIMEOUT, build_tree
from tests.support.gating import require
from tests.support.kernel_tree import EDITED, edit, restore, work_tree
from tests.support.kunit import leaves, parse_ktap

pytestmark = pytest.mark.qemu

HARNESS = [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())"]
SAMPLES = 40
BUILD_TOOLS = ("make", "gcc", "flex", "bison", "bc", "pahole")


@pytest.fixture(scope="module")
def tree():
    missing = [t for t in BUILD_TOOLS if shutil.which(t) is None]
    require(not missing, f"a kernel build needs {', '.join(missing)} (Debian: build-essential flex bison bc "
                         "libelf-dev libssl-dev dwarves)")
    work, original = work_tree()
    if (work / EDITED).read_bytes() != (original / EDITED).read_bytes():  # an edit left by an interrupted run
        restore(work, original)
    return work, original


@pytest.fixture(scope="module")
def built(tree):
    """The pristine tree's build: cold once per cache, then reused (the tree's content and config)."""
    return build_tree(tree[0], timeout=BUILD_TIMEOUT)


def _harness(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([*HARNESS, *args], capture_output=True, text=True, timeout=timeout)


def test_the_catalog_passes_on_the_built_tree(tree, built, tmp_path):
    out = tmp_path / "run"
    p = _harness("run", "all", "--kernel", f"tree:{tree[0]}", "--samples", str(SAMPLES), "--out", str(out),
                 "--ktap", str(tmp_path / "run.ktap"), timeout=3600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["release"] == built.release and summary["run"]["kernel"]["vmlinux"] == str(built.vmlinux)
    scenarios = summary["scenarios"]
    for s in scenarios:  # forkexec's requests land on its children too: fewer own stacks than requests
        assert s["own_stacks"] > 0 and s["failed_stacks"] == 0 and not s["errors"], s["name"]
    test, printed = parse_ktap((tmp_path / "run.ktap").read_text())
    assert test.counts.errors == 0 and test.status.name == "SUCCESS", printed
    assert [t.name for t in test.subtests] == [s["name"] for s in scenarios]
    skipped = sum(1 for s in scenarios for o in s["oracles"]
                  if not sum(n for v, n in s["pairs"].get(o, {}).items() if v != "not checked"))
    assert test.counts.total() == sum(len(s["oracles"]) + 1 for s in scenarios)
    assert (test.counts.passed, test.counts.failed, test.counts.skipped) == (test.counts.total() - skipped, 0,
                                                                              skipped)
    print(f"run all on {built.release} ({summary['run']['accel']}): {len(scenarios)} scenarios, "
          f"{summary['totals']['stacks']} stacks, {sum(s['seconds'] for s in scenarios):.0f} s of sampling; "
          f"kunit_parser: {test.counts}")


def test_kernel_diff_finds_no_difference_on_the_built_tree(tree, built, tmp_path):
    out = tmp_path / "kd"
    p = _harness("kernel-diff", "--kernel", f"tree:{tree[0]}", "--out", str(out), "--ktap", timeout=3600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((out / "summary.json").read_text())
    assert doc["release"] == built.release and doc["profile"] == "mainline"
    assert doc["totals"]["compared"] > 0 and doc["totals"]["differences"] == 0 == doc["totals"]["unexplained"]
    test, printed = parse_ktap(p.stdout)  # stdout is the KTAP alone; the table went to stderr
    assert test.counts.errors == 0 and test.status.name == "SUCCESS", printed
    assert "kernel events:" in p.stderr and "KTAP" not in p.stderr
    assert test.counts.passed == sum(len(s["items"]) for s in doc["scenarios"])
    assert [p for p, s in leaves(test) if s.name != "SUCCESS"] == []
    print(f"kernel-diff on {built.release}: {doc['totals']}; kunit_parser: {test.counts}")


def test_an_edit_to_deferred_c_rebuilds_and_boots(tree, built, tmp_path):
    work, original = tree
    # a marker of this run's own: with tmp_path's name (the same every session) the second session
    # found the edited tree's build in the cache and made nothing, and the test failed at "it built"
    marker = f"harness-edit-{uuid.uuid4().hex[:12]}"
    edited = None
    try:
        line = edit(work, original, marker)
        assert (original / EDITED).read_text().count(marker) == 0  # the cached tree is untouched
        out = tmp_path / "run"
        p = _harness("run", "fp-syscall", "--kernel", f"tree:{work}", "--samples", "20", "--out", str(out),
                     timeout=BUILD_TIMEOUT)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert "make -j" in p.stderr and "bzImage in" in p.stderr, p.stderr[-3000:]  # it built
        edited = build_tree(work)  # now up to date: reused
        assert edited.reused and edited.identity != built.identity and edited.build_dir == built.build_dir
        assert marker.encode() in edited.vmlinux.read_bytes() and marker.encode() not in built.vmlinux.read_bytes()
        summary = json.loads((out / "summary.json").read_text())
        assert summary["run"]["kernel"]["vmlinux"] == str(edited.vmlinux), line
        rebuild = json.loads((edited.vmlinux.parent / "build.json").read_text())
        print(f"edit rebuild: {rebuild['seconds']} s, {rebuild['steps']} steps (cold: "
              f"{json.loads((built.vmlinux.parent / 'build.json').read_text())['seconds']} s)")
    finally:
        restore(work, original)
        if edited is not None and edited.vmlinux.parent != built.vmlinux.parent:
            shutil.rmtree(edited.vmlinux.parent, ignore_errors=True)  # one edited kernel less in the cache
    again = build_tree(work)  # the pristine tree again: its build, at once
    assert again.reused and again.key == built.key
