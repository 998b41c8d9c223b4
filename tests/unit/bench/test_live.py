"""harness/bench/live.py without a guest: a benchmark of no program is refused (its figures would
divide by zero).  Its figures on a guest: the lead's benchmarks, built on check_live (tests/qemu/test_fuzz_live.py)."""

from __future__ import annotations

import pytest

from harness.bench.live import bench_live


def test_no_program_no_benchmark():
    with pytest.raises(ValueError, match="at least one program"):
        bench_live([])
