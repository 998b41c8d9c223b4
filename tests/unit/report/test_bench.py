"""harness/report/bench.py's deferred figures: how many requests landed beside how many were
asked, and the run's notes (why it fell short), so a short run is never read as a full one."""

from __future__ import annotations

from harness.report.bench import deferred_lines
from harness.scenarios.catalog import CATALOG
from harness.scenarios.result import Result

OVERLAP = {"deliveries": 0, "seconds": 0.0, "late": 0}


def _result(sampled: int, stacks: int, notes=()) -> Result:
    r = Result(CATALOG["fp-syscall"])
    r.sampled, r.stacks, r.stops, r.loop_seconds = sampled, stacks, 2 * stacks, 0.5
    r.notes = list(notes)
    return r


def test_a_full_run_says_all_its_requests_landed():
    lines = deferred_lines(_result(CATALOG["fp-syscall"].samples, 40), 1000.0, None, "no perf", 1000, None, OVERLAP)
    n = CATALOG["fp-syscall"].samples
    assert f"requests on the program:      {n:8d} of {n} asked for" in lines
    assert "deferred traces delivered:        80.0 traces/s (40 traces in 0.5s)" in lines
    assert not any(line.startswith("note: ") for line in lines)


def test_a_short_run_says_how_many_and_why():
    why = "sampling stopped after 500 requests and 900 stops: only 16 of them landed on the program's tasks"
    lines = deferred_lines(_result(16, 16, [why]), 1000.0, None, "no perf", 1000, None, OVERLAP)
    n = CATALOG["fp-syscall"].samples
    assert f"requests on the program:      {16:8d} of {n} asked for" in lines
    assert f"note: {why}" in lines
