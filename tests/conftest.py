"""Test gating in one place.

Tests marked ``qemu`` boot real guests.  Where QEMU, GDB or the images are missing they are
skipped with a readable reason, except in CI (``CI`` set) or with ``HARNESS_REQUIRE_QEMU=1``,
where a missing piece is a failure: a green CI must never hide a missing install step.
"""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import settings

# "ci": more examples for every property test; the deferred stateful test takes 2,000 of its
# own under this profile (tests/unit/conftest_deferred.py).
settings.register_profile("ci", max_examples=500, deadline=None)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

REQUIRED_TOOLS = ("qemu-system-x86_64", "gdb", "socat", "busybox", "debootstrap", "zstd")


def strict() -> bool:
    return bool(os.environ.get("CI")) or os.environ.get("HARNESS_REQUIRE_QEMU") == "1"


def require(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (in CI) when ``condition`` does not hold."""
    if condition:
        return
    if strict():
        pytest.fail(f"required for this test and missing: {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_runtest_setup(item):
    if item.get_closest_marker("qemu"):
        missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
        require(not missing, f"tools not installed: {', '.join(missing)} (run ./dev test)")


# --- pytest-xdist (tox -e qemu runs `-n 2 --dist loadgroup`) ---------------------------------
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
        group = _guest_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """An xdist worker tells the controller an item's group by the suffix ``@GROUP`` of the node
    id it reports.  pytest-xdist 3.8 (the latest) sets it through ``Item._nodeid``, which pytest
    9.2 no longer reads (``Node._id``, a ``NodeId``): loadgroup then ran every test on its own
    and both workers booted a module's guest (measured: most module-scoped guests were set
    up twice).  Done here where xdist's did not take."""
    if not getattr(config.option, "loadgroup", False):  # set in xdist's workers only
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(names)}")

