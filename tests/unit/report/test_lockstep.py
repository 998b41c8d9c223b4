"""harness/report/lockstep.py: the printout of harness kernel-diff, on a recording of the real 7.3
kernel (``tests/data/kernel-diff/``) replayed under the seed-v10 control, whose named differences
give every part of the printout something to show."""

from __future__ import annotations

import collections
import json

from harness.deferred.profile import seed_v10
from harness.lockstep.compare import Difference, Event, Summary, replay
from harness.report.lockstep import lockstep_lines
from tests.support.paths import TEST_DATA

RECORDING = TEST_DATA / "kernel-diff" / "forkexec.smp1.events.jsonl"
COOKIE = ("seed-v10 cookie scheme: a local_clock() timestamp, not mainline's (cpu + 1) | per-CPU "
          "counter << 32")


def seed_v10_summary() -> Summary:
    header, events = {}, []
    for line in RECORDING.read_text().splitlines():
        d = json.loads(line)
        if "header" in d:
            header = d
        else:
            events.append(Event.from_dict(d))
    return replay(events, seed_v10(), {int(k): v for k, v in header["tracers"].items()},
                  {int(k): v for k, v in header["percpu_ctr"].items()})


def test_totals_table_and_named_differences_of_a_recording():
    lines = lockstep_lines(seed_v10_summary(), show=3)
    assert lines[:15] == [
        "kernel events: 268 requests (-22: 8, 0: 25, 1: 235), 23 task works, 23 walks, 0 cache reuses, "
        "23 callbacks, 537 returns to user, 11 forks, 5 exits (0 with work pending)",
        "profile seed-v10: events compared 681, equal 351, differences 330 (330 expected, 0 unexplained)",
        "  compared           count   equal  differ",
        "  request.ret          268     221      47",
        "  request.cookie       268       8     260",
        "  task_work             23      23       0",
        "  walks                 23      23       0",
        "  callbacks             23       0      23",
        "  trace                 23      23       0",
        "  entry_walks           24      24       0",
        "  entry_callbacks       24      24       0",
        "  exit_pending           5       5       0",
        f"expected: 260 x {COOKIE}",
        "expected: 47 x seed-v10 returns UNWIND_ALREADY_EXECUTED (2) where mainline returns 1",
        "expected: 23 x seed-v10 cookie scheme (the callbacks get the request's timestamp)",
    ]
    assert lines[15] == f"  #13 pid 104 entry 1: request.cookie: kernel 0x300000001 | model 0xf4240  [expected ({COOKIE})]"
    assert len(lines) == 19 and lines[18] == "  ... and 327 more differences"


def test_show_none_prints_every_difference_and_zero_none():
    s = seed_v10_summary()
    assert sum(line.startswith("  #") for line in lockstep_lines(s)) == 330
    zero = lockstep_lines(s, show=0)
    assert not any(line.startswith("  #") for line in zero) and zero[-1] == "  ... and 330 more differences"


def test_rows_in_the_lockstep_order_unexplained_first_notes_last():
    # counters filled in another order than COMPARED's; an item never compared is left out
    s = Summary("mainline", compared=collections.Counter({"trace": 2, "request.ret": 3}),
                equal=collections.Counter({"request.ret": 3, "trace": 1}), notes=["a note"])
    s.differences = [Difference(5, "trace", 7, 1, (1, 2), (1, 3), expected="named"),
                     Difference(6, "trace", 7, 1, (1,), (2,))]
    lines = lockstep_lines(s)
    assert lines[0].startswith("kernel events: 0 requests (none), 0 task works")
    assert lines[1] == "profile mainline: events compared 5, equal 4, differences 2 (1 expected, 1 unexplained)"
    assert lines[3:] == [
        "  request.ret            3       3       0",
        "  trace                  2       1       1",
        "expected: 1 x named",
        "  #6 pid 7 entry 1: trace: kernel [1] | model [2]  [UNEXPLAINED]",
        "  #5 pid 7 entry 1: trace: kernel [1, 2] | model [1, 3]  [expected (named)]",
        "note: a note",
    ]
