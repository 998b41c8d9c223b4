"""harness/report/bench.py's deferred figures: how many requests landed beside how many were
asked, and the run's notes (why it fell short), so a short run is never read as a full one."""

from __future__ import annotations

import collections
from types import SimpleNamespace

import pytest

from harness.report.bench import HARNESS_MS_GOAL, deferred_lines, harness_ms
from harness.scenarios.catalog import CATALOG
from harness.scenarios.engine import LoopCost
from harness.scenarios.result import Result

OVERLAP = {"deliveries": 0, "seconds": 0.0, "late": 0}
NO_COST = LoopCost()


def _result(sampled: int, stacks: int, notes=()) -> Result:
    r = Result(CATALOG["fp-syscall"])
    r.sampled, r.stacks, r.stops, r.loop_seconds = sampled, stacks, 2 * stacks, 0.5
    r.notes = list(notes)
    return r


def test_a_full_run_says_all_its_requests_landed():
    lines = deferred_lines(_result(CATALOG["fp-syscall"].samples, 40), 1000.0, None, "no perf", 1000, NO_COST, OVERLAP)
    n = CATALOG["fp-syscall"].samples
    assert f"requests on the program:      {n:8d} of {n} asked for" in lines
    assert "deferred traces delivered:        80.0 traces/s (40 traces in 0.5s)" in lines
    assert not any(line.startswith("note: ") for line in lines)


def test_a_short_run_says_how_many_and_why():
    why = "sampling stopped after 500 requests and 900 stops: only 16 of them landed on the program's tasks"
    lines = deferred_lines(_result(16, 16, [why]), 1000.0, None, "no perf", 1000, NO_COST, OVERLAP)
    n = CATALOG["fp-syscall"].samples
    assert f"requests on the program:      {16:8d} of {n} asked for" in lines
    assert f"note: {why}" in lines


def _cost(cpu: float, packets: dict, trips: int, records: int) -> LoopCost:
    c = LoopCost()
    c.cpu, c.packets, c.round_trips, c.records = cpu, collections.Counter(packets), trips, records
    return c


def test_the_harness_time_a_trace_is_what_the_rate_leaves_beyond_two_stops_at_the_floor():
    # 40 traces in 0.5 s: 80 traces/s, 12.5 ms a trace; the floor 1000 stops/s: 2 ms of it stops
    assert harness_ms(80.0, 1000.0) == pytest.approx(10.5)
    assert harness_ms(0.0, 1000.0) is None and harness_ms(80.0, 0.0) is None
    kernel = SimpleNamespace(per_second=160.0, deferred=320, seconds=2.0, samples=320, cookies=320)
    cost = _cost(0.2, {"m": 40, "vCont;c": 80, "Z": 4}, 120, 480)
    lines = deferred_lines(_result(40, 40), 1000.0, kernel, "", 1000, cost, OVERLAP)
    assert any(line.startswith("harness time a trace:           10.500 ms") for line in lines), lines
    assert any(line.startswith("of the kernel's rate:             0.50") for line in lines), lines
    assert any(line.startswith("harness CPU a trace:             5.000 ms") for line in lines), lines
    assert "stub round trips per trace:       3.00" in lines
    assert "stub packets per trace:           3.10 (vCont;c 2.00, m 1.00, Z 0.10)" in lines
    assert "log records per trace:           12.00" in lines
    assert f"goal harness time a trace:       {HARNESS_MS_GOAL:.3f} ms -> NOT met" in lines


def test_without_a_kernel_rate_the_ratio_says_so():
    lines = deferred_lines(_result(40, 40), 1000.0, None, "no perf", 1000, NO_COST, OVERLAP)
    assert "of the kernel's rate:              n/a (no kernel rate)" in lines
    assert not any(line.startswith("stub packets per trace") for line in lines)


def test_a_floor_below_the_traces_own_stops_judges_no_harness_time():
    """QEMU 7.2 (2026-12-07): floor 229 stops/s, 163 traces/s of two stops each (326 stops/s):
    1/(traces/s) - 2/floor came out at -2.6 ms and the goal line said "met"; it says why it is no
    figure instead, and judges nothing."""
    r = _result(1000, 1000)
    r.loop_seconds = 1000 / 163.2
    lines = deferred_lines(r, 229.1, None, "no perf", 1000, NO_COST, OVERLAP)
    own = next(line for line in lines if line.startswith("harness time a trace:"))
    assert "-2.602 ms -> not measured here: the floor (229.1 stops/s) is below the traces' own stops (326.4/s)" \
        in own, own
    assert f"goal harness time a trace:       {HARNESS_MS_GOAL:.3f} ms -> not judged (no harness time)" in lines
    assert not any(line.endswith("-> met") for line in lines if line.startswith("goal harness"))
