"""Hypothesis settings for the deferred-unwinding stateful test (imported by that test only).

The shared tests/conftest.py loads a global profile; this module does not touch the global
profiles: it builds the settings the stateful test applies to itself.  ``HYPOTHESIS_PROFILE=ci``
runs 2,000 examples; the default is modest so the local unit run stays fast.
``DEFERRED_EXAMPLES=N`` overrides both.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

CI_EXAMPLES = 2000
DEV_EXAMPLES = 150


def deferred_examples() -> int:
    if os.environ.get("DEFERRED_EXAMPLES"):
        return int(os.environ["DEFERRED_EXAMPLES"])
    return CI_EXAMPLES if os.environ.get("HYPOTHESIS_PROFILE") == "ci" else DEV_EXAMPLES


def deferred_settings() -> settings:
    return settings(
        max_examples=deferred_examples(),
        stateful_step_count=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
