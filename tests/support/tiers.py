"""The unit tier and the deep tier (issue 37 item 3: the unit tier within 90 s on two workers).

Volume runs (a check repeated over every catalog binary, 10^5 mutated logs, coverage-guided
fuzzing of every target) and the deepest property runs carry the ``deep`` mark: ``tox -e py``
(the unit tier, ``-m "not qemu and not deep"``) leaves them out and ``tox -e deep`` runs them,
as CI and ``./dev test`` do after the unit tier.  A parametrized volume test keeps a share of
its cases in the unit tier (:func:`unit_share`), so that the unit tier still runs every test
function; every case runs somewhere.  A single long case does the same with a cheaper one of its
kind beside it.  Whole heavy runs go to the deep tier whole, where the unit tier keeps cheaper
tests of the same code: a failing kernel make (tests/unit/images/test_kernel_build.py; the unit
tier keeps the kconfig checks before make), a whole fuzz campaign (a user's toolchain, KTAP of a
real campaign, the bug reports built from one), Dask clusters (tests/unit/campaign/test_spread.py;
the unit tier keeps the executor's failure paths on one cluster).  The 8 tests moved so on
2026-12-07 took 183 of the unit tier's 712 s of test time (measured under load 3-6); the
unit tier on two workers, quiet: 178.2 s before, 134.6 s after (2,785 tests).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

DEEP = pytest.mark.deep


def unit_share(values: Sequence, every: int, ids: Sequence[str] | None = None) -> list:
    """Each of ``values`` as a ``pytest.param`` (with its id from ``ids``): the first and then
    every ``every``-th one run in the unit tier, the others carry the ``deep`` mark."""
    if every < 1:
        raise ValueError(f"every must be 1 or more, not {every}")
    ids = list(ids) if ids is not None else [None] * len(values)
    return [pytest.param(*(v if isinstance(v, tuple) else (v,)), id=i, marks=() if k % every == 0 else DEEP)
            for k, (v, i) in enumerate(zip(values, ids, strict=True))]
