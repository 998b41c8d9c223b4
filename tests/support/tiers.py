"""The unit tier and the deep tier (issue 37 item 3: the unit tier within 90 s on two workers).

Volume runs (a check repeated over every catalog binary, 10^5 mutated logs, coverage-guided
fuzzing of every target) and the deepest property runs carry the ``deep`` mark: ``tox -e py``
(the unit tier, ``-m "not qemu and not deep"``) leaves them out and ``tox -e deep`` runs them,
as CI and ``./dev test`` do after the unit tier.  A parametrized volume test keeps a share of
its cases in the unit tier (:func:`unit_share`), so that the unit tier still runs every test
function; every case runs somewhere.  A single long case does the same with a cheaper one of its
kind beside it: the failing kernel make (tests/unit/images/test_kernel_build.py) breaks a file
make compiles first in the unit tier and, in the deep tier, objtool's, whose error lands behind
libbpf's whole build (about 20 s of CPU more).
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
