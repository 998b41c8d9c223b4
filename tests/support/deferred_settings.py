"""Hypothesis settings for the deferred-unwinding stateful test (imported by that test only).

The shared tests/conftest.py loads a global profile; this module does not touch the global
profiles: it builds the settings the stateful test applies to itself.  The unit suite runs 150
examples a machine under every profile; ``DEFERRED_EXAMPLES=N`` sets another depth, and
``tox -e deep`` (which ``./dev test`` and CI run after the unit suite) runs the two machines alone
at 2,000 each: the deep search is a search of its own, about 75 s of CPU, which kept the unit
suite's wall time (issue 21 item 5: 90 s on 2 cores) out of reach.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

UNIT_EXAMPLES = 150  # the deep search's 2,000: tox.ini's [testenv:deep]


def deferred_examples() -> int:
    return int(os.environ.get("DEFERRED_EXAMPLES") or UNIT_EXAMPLES)


def deferred_settings() -> settings:
    return settings(
        max_examples=deferred_examples(),
        stateful_step_count=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
