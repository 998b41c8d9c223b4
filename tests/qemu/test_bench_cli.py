"""``harness bench deferred`` on a real guest, as a person runs it: every figure and anchor it
prints, their arithmetic, and ``--rt`` (QEMU's main loop at SCHED_FIFO).  Its speed is a figure
it prints (benchmarks, README), never asserted here."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.gating import require

pytestmark = pytest.mark.qemu

HARNESS = [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())"]


def _figure(out: str, label: str) -> re.Match:
    m = re.search(rf"^{re.escape(label)}:\s+(.*)$", out, re.M)
    assert m, f"no {label!r} line in:\n{out}"
    return m


def test_bench_deferred_prints_its_figures_and_anchors_with_rt():
    require(os.geteuid() == 0, "--rt needs CAP_SYS_NICE (root)")
    p = subprocess.run([*HARNESS, "bench", "deferred", "--samples", "40", "--perf-seconds", "1", "--rt"],
                       capture_output=True, text=True, timeout=900)
    out = p.stdout
    assert p.returncode == 0, out[-3000:] + p.stderr[-3000:]
    stub = _figure(out, "stub").group(1)
    pid = int(re.match(r"QEMU's main loop \(pid (\d+)\) at SCHED_FIFO 1", stub).group(1))
    assert pid > 0
    floor = float(re.match(r"([\d.]+) stops/s", _figure(out, "raw stop rate (floor)").group(1)).group(1))
    kernel = re.match(r"([\d.]+) deferred callchains/s \((\d+) in ([\d.]+)s; perf at \d+ Hz with defer_callchain: "
                      r"(\d+) samples, (\d+) with a cookie\)", _figure(out, "guest kernel's deferred rate").group(1))
    assert kernel, out
    assert float(kernel.group(1)) > 0 and int(kernel.group(2)) <= int(kernel.group(4))
    landed, asked = map(int, re.match(r"(\d+) of (\d+) asked for", _figure(out, "requests on the program").group(1))
                        .groups())
    assert asked == 40, out
    # All 40 land on the program, or a note says why the loop stopped short (a count of live
    # events: on a loaded host the loop's bounds may end it first, campaign run b1 of issue 21).
    assert landed == 40 or re.search(r"^note: (sampling stopped|the program exited)", out, re.M), out
    delivered = _figure(out, "deferred traces delivered").group(1)
    rate, traces = re.match(r"([\d.]+) traces/s \((\d+) traces in", delivered).groups()
    assert int(traces) >= 1, out
    # Every trace costs at least its request stop and its delivery stop; how many more (requests on
    # other tasks, NMIs left at once) depends on the load, so no upper bound: CI saw 4.98 with the
    # other xdist worker booting guests beside it.
    assert float(_figure(out, "stops per trace").group(1)) >= 1.9
    goal = re.match(r"([\d.]+) traces/s -> (met|NOT met) \(([\d.]+) of it[;)]",
                    _figure(out, "goal 0.8 * floor / 2").group(1))
    assert goal, out
    # each printed to one decimal: 0.4 x the floor's rounding (0.05) + the goal's own (0.05); 0.06 failed
    # at 669.5 against 0.4 x 1673.9 = 669.56 (issue 21's flake campaign, run b2)
    assert float(goal.group(1)) == pytest.approx(0.4 * floor, abs=0.4 * 0.05 + 0.05 + 1e-9)
    # The share of the goal is printed to two decimals from the unrounded rate and goal, which are
    # printed to one: recomputed from the printed ones it may differ by its own rounding (0.005) plus
    # what theirs make of it, 0.05 x (1 + share) / goal, which a slow floor makes large (campaign
    # run k1, 2026-12-06, 7.2 at load 6: 31.2 traces/s of a goal of 13.7, 2.27 printed, 2.2774 recomputed).
    r_p, g_p, share = float(rate), float(goal.group(1)), float(goal.group(3))
    assert share == pytest.approx(r_p / g_p, abs=0.005 + 0.05 * (1 + r_p / g_p) / (g_p - 0.05) + 1e-9)
    if abs(r_p - g_p) > 0.1:  # "met" is decided on the unrounded figures
        assert (goal.group(2) == "met") == (r_p >= g_p)
    assert "error in the sampling run" not in out
    # The figures the harness holds itself to (issue 37), each from the same run's printed ones.
    # The harness's time a trace: 1/(traces/s) - 2/floor, in ms to three decimals; recomputed
    # from the printed rate and floor (one decimal each) it moves by their rounding.
    own_line = _figure(out, "harness time a trace").group(1)
    own = float(re.match(r"(-?[\d.]+) ms (\(1/\(traces/s\) - 2/floor|-> not measured here)", own_line).group(1))
    # a floor below the traces' own stop rate (QEMU 7.2) leaves no figure, and no judgement
    assert (own <= 0) == ("not measured here" in own_line), own_line
    want = 1000 * (1 / r_p - 2 / floor)
    slack = 1000 * (0.05 / (r_p - 0.05) ** 2 + 2 * 0.05 / (floor - 0.05) ** 2) + 0.0005
    assert own == pytest.approx(want, abs=slack)
    ratio = float(re.match(r"([\d.]+) \(traces/s over", _figure(out, "of the kernel's rate").group(1)).group(1))
    k_rate = float(kernel.group(1))
    assert ratio == pytest.approx(r_p / k_rate, abs=0.005 + 0.05 * (1 + r_p / k_rate) / (k_rate - 0.05) + 1e-9)
    cpu = re.match(r"([\d.]+) ms \(the process's CPU time over the sampling loop: ([\d.]+)s for (\d+) traces\)",
                   _figure(out, "harness CPU a trace").group(1))
    assert cpu and int(cpu.group(3)) == int(traces), out
    # CPU spent: more than nothing, and (the loop's wall time bounds one thread's CPU; the process
    # has a few threads, mostly asleep) of the order of that wall time, not of minutes
    assert float(cpu.group(1)) > 0
    assert float(cpu.group(1)) == pytest.approx(1000 * float(cpu.group(2)) / int(traces),
                                                abs=1000 * 0.005 / int(traces) + 0.0005)
    packets = re.match(r"([\d.]+) \((.*)\)$", _figure(out, "stub packets per trace").group(1))
    assert packets, out
    kinds = dict((k, float(v)) for k, v in (item.rsplit(" ", 1) for item in packets.group(2).split(", ")))
    # every trace continues the guest at least once and reads its stack: m and vCont;c are there
    assert kinds.get("vCont;c", 0) >= 1 and kinds.get("m", 0) > 0, kinds
    assert float(packets.group(1)) == pytest.approx(sum(kinds.values()), abs=0.005 * (len(kinds) + 1))
    trips = float(_figure(out, "stub round trips per trace").group(1))
    assert 1 <= trips <= float(packets.group(1))  # a round trip carries one packet or more
    # the model's events and the stack record: a few records a trace, at least the stack's
    assert float(_figure(out, "log records per trace").group(1)) >= 1
    goal_own = re.match(r"([\d.]+) ms -> (met|NOT met|not judged \(no harness time\))$",
                        _figure(out, "goal harness time a trace").group(1))
    assert goal_own, out
    assert (own <= 0) == goal_own.group(2).startswith("not judged"), out
    if own > 0 and abs(own - float(goal_own.group(1))) > 0.001:  # decided on the unrounded figure
        assert (goal_own.group(2) == "met") == (own <= float(goal_own.group(1))), out
