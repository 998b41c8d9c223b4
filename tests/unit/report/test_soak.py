"""harness/report/soak.py: the figures of harness bench soak, from the soak's report (every field
set, then none)."""

from __future__ import annotations

import collections

from harness.report.soak import soak_lines
from harness.soak.engine import SoakReport
from harness.soak.spec import SoakSpec


def test_every_figure_of_a_full_report():
    rep = SoakReport(
        SoakSpec(requests=10, seed=7), 4, requests=collections.Counter(nmi=5, timer=6), foreign_requests=2,
        tasks_seen=9, most_live=3, forks=4, exits=5, cancels=collections.Counter({"at request": 1, "in delivery": 2}),
        ledger={"owed": 8, "ret 0": 8, "ret 1": 3, "callbacks": 9, "delivered": 7, "shared": 1, "lost": 1,
                "cookies": 5},
        ledger_messages=["lm"], still_owed=1, stacks=11, own_stacks=10, failed_stacks=1, causes={"c1": 1},
        undeclared={"u": 1}, seconds=3.25, stops=40, rss_series=[(0, 1024), (5, 2100)], peak_rss=3000,
        check_violations=0, check_messages=["cm"], errors=["e"], notes=["n"], log="x.jsonl")
    assert soak_lines(rep) == [
        "soak: 11 requests on the program's tasks (8 worker tasks, 4 vCPU(s), 2 tracers, profile mainline, seed 7)",
        "requests:          5 NMI, 6 timer (+2 on other tasks); tracer requests: ret 0 x8, ret 1 x3",
        "tasks seen:        9 (at most 3 alive at once)",
        "forks:             4",
        "exits:             5",
        "cancels:           3 (at request 1, in delivery 2), each followed by a new registration",
        "callbacks:         9",
        "requests ret 0:    8: delivered at return 7, delivered at exit 0, cancelled before the callback ran 0, "
        "still pending 1, served by a nested request's callback 1",
        "lost:              1",
        "duplicated:        0",
        "after cancel:      0",
        "cookie reuse:      0 (5 cookies; two in one entry: 0)",
        "stacks:            11 checked (10 of the program's), 1 failed (causes: c1 1) "
        "(outside the declaration, suspicious: u 1)",
        "log re-check:      0 violation(s) (x.jsonl)",
        "elapsed:           3.2 s",
        "requests/s:        3.38 (40 guest stops, 3.6 per request)",
        "peak RSS:          2.9 MiB",
        "RSS series:        0: 1.0, 5: 2.1 (requests done: MiB)",
        "ledger: lm",
        "check: cm",
        "error: e",
        "note: n",
    ]


def test_an_empty_report_divides_by_nothing_and_says_the_recheck_did_not_run():
    lines = soak_lines(SoakReport(SoakSpec(), 2))
    assert len(lines) == 18
    assert lines[7] == ("requests ret 0:    0: delivered at return 0, delivered at exit 0, cancelled before the "
                        "callback ran 0, still pending 0")
    assert lines[12] == "stacks:            0 checked (0 of the program's), 0 failed"
    assert lines[13:16] == ["log re-check:      not run", "elapsed:           0.0 s",
                            "requests/s:        0.00 (0 guest stops, 0.0 per request)"]
