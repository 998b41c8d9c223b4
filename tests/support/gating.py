"""Test gating in one place: a test that needs something this machine may lack says so with
:func:`require`, which skips it with a readable reason -- except in CI (``CI`` set) or with
``HARNESS_REQUIRE_QEMU=1``, where a missing piece is a failure: a green CI must never hide a
missing install step.  A test does not call ``pytest.skip`` (or ``skipif``/``importorskip``)
itself unless the skip holds in CI too, and then a comment says why.
"""

from __future__ import annotations

import os

import pytest


def strict() -> bool:
    """Whether a missing requirement fails the test (CI) rather than skips it."""
    return bool(os.environ.get("CI")) or os.environ.get("HARNESS_REQUIRE_QEMU") == "1"


def require(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (in CI) when ``condition`` does not hold."""
    if condition:
        return
    if strict():
        pytest.fail(f"required for this test and missing: {reason}", pytrace=False)
    pytest.skip(reason)
