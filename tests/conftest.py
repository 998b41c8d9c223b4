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
