"""Rules of harness/deferred/check.py that mutmut found reached by no test (tests/MUTATION.md): the
mainline cookie's shape, a direct unwind_user_faultable() trace, a callback of an empty trace,
requests still owed when the task exits, a stack record matched through its entry, the end
record's cause counts.  Each log is written through EventLog, as the model writes one."""

from __future__ import annotations

import io

import pytest

from harness.deferred.check import check_lines
from harness.deferred.log import EventLog, trace_hash

TRACE = [0x401136, 0x401182]
H, EMPTY = trace_hash(TRACE), trace_hash([])
COOKIE = (1 << 32) | 1
FRAMES = [[a, "callchain-fp", f"f{i}+0x10"] for i, a in enumerate(TRACE)]


def check(profile: str, *records: tuple[str, dict], end: dict | None = None):
    fp = io.StringIO()
    log = EventLog(fp)
    log.emit("header", profile=profile, word_bits=64, max_entries=4, version=2)
    log.emit("init", tracer="perf", bit=2, ret=0)
    log.emit("task", task=42, flags=0)
    log.emit("enter", task=42, entry=1, epoch=0, how="syscall", cpu=0)
    for ev, fields in records:
        log.emit(ev, **fields)
    if end is not None:
        log.emit("end", **end)
    return check_lines(fp.getvalue().splitlines())


def request(cookie=COOKIE, ret=0):
    return "request", dict(tracer="perf", task=42, entry=1, epoch=0, cpu=0, context="irq", user_mode=True,
                           ret=ret, cookie=cookie)


def walk(trace=TRACE):
    return "walk", dict(task=42, entry=1, epoch=0, nr=len(trace), trace_hash=trace_hash(trace), trace=list(trace))


def callback(h=H, **nr):
    return "callback", dict(tracer="perf", task=42, entry=1, epoch=0, cookie=COOKIE, trace_hash=h, **nr)


def stack(frames=FRAMES, **epoch):
    return "stack", dict(task=42, entry=1, cookie=COOKIE, unwinder="fp", frames={"fp": frames},
                         verdicts=[{"unwinder": "fp", "oracle": "cfi", "verdict": "agree", "divergences": []}], **epoch)


# -- cookies ------------------------------------------------------------------------------------


def test_a_cookie_of_0_is_named_at_its_line():
    assert check("seed-v10", request(cookie=0)).messages() == ["line 5: task 42 entry 1 tracer perf: request has cookie 0"]


@pytest.mark.parametrize("cookie", [3 << 32, (2 << 32) | 1, 0xFFFFFFFF << 32], ids=["cpu 0", "even count", "cpu 0 high"])
def test_a_mainline_cookie_is_cpu_plus_1_low_and_an_odd_count_high(cookie):
    assert check("mainline", request(cookie=cookie)).messages() == [
        f"line 5: task 42 entry 1 tracer perf: request cookie {cookie:#x} is not {{cpu+1 (low), odd cnt (high)}}"]
    assert check("seed-v10", request(cookie=cookie)).clean  # a timestamp: any non-zero value
    assert check("mainline", request(cookie=(3 << 32) | 2)).clean


# -- walks and traces ---------------------------------------------------------------------------


def test_a_walk_deeper_than_max_entries_is_named():
    v = check("mainline", request(), walk(TRACE * 3))
    assert v.messages() == ["line 6: task 42 entry 1: walk returned 6 entries, more than UNWIND_MAX_ENTRIES = 4"]


def test_a_direct_faultable_trace_must_be_the_entrys_walk():
    def trace(ret=0, h=H, **nr):
        return "trace", dict(task=42, entry=1, epoch=0, ret=ret, cached=True, trace_hash=h, **nr)

    # before any walk of this entry: a stale cache
    assert check("mainline", trace(nr=2)).messages() == [
        "line 5: task 42 entry 1: direct unwind_user_faultable() got a trace that was not walked in this entry "
        "(stale cache from an earlier entry)"]
    assert check("mainline", walk(), trace(nr=2)).clean
    assert check("mainline", walk(), trace(nr=1, h=EMPTY)).messages() == [
        f"line 6: task 42 entry 1: direct unwind_user_faultable() got trace {EMPTY}, not the one walked in this "
        f"entry at line 5 ({H})"]
    # nothing to compare: it failed (-EINVAL, no mm), found no frame, or does not say how many
    assert check("mainline", trace(ret=-22, nr=2)).clean
    assert check("mainline", trace(ret=1, nr=2)).clean
    assert check("mainline", trace(nr=0, h=EMPTY)).clean
    assert check("mainline", trace()).clean


def test_a_callback_of_an_empty_trace_is_not_matched_with_a_walk():
    assert check("mainline", request(), callback(h=EMPTY, nr=0), ("callback_done", dict(tracer="perf", task=42))).clean
    # the count not given: the trace is compared
    assert check("mainline", request(), callback()).messages() == [
        "line 6: task 42 entry 1 tracer perf: callback got a trace that was not walked in this entry "
        "(stale cache from an earlier entry)"]
    assert check("mainline", request(), walk(), callback(h=EMPTY, nr=1)).messages() == [
        f"line 7: task 42 entry 1 tracer perf: callback got trace {EMPTY}, not the one walked in this entry at "
        f"line 6 ({H})"]


def test_cancel_done_names_the_line_of_the_callback_still_running():
    v = check("mainline", request(), walk(), callback(nr=2), ("cancel", dict(tracer="perf", bit=2)),
              ("cancel_done", dict(tracer="perf", bit=2)))
    assert v.messages() == ["line 9: tracer perf: cancel completed while its callback on task 42 (line 7) was still running"]


# -- stack records matched through the entry -------------------------------------------------------


def test_a_stack_record_without_epoch_is_matched_with_its_entrys_walk_or_callback():
    assert check("mainline", request(), walk(), stack()).clean  # the walk alone
    assert check("mainline", request(), callback(nr=2), stack()).messages()[-1].startswith(
        "line 6: task 42 entry 1 tracer perf: callback got a trace that was not walked")  # and no more
    v = check("mainline", request(), callback(nr=2), stack())
    assert len(v.violations) == 1  # the record itself matched through the callback's entry
    assert check("mainline", request(), walk([]), stack(frames=[])).clean  # an empty walk, nothing else


# -- the task's end, the log's end -----------------------------------------------------------------


def test_a_request_owed_when_the_task_exits_is_named():
    v = check("mainline", request(), ("exit", dict(task=42, entry=1, epoch=0)), ("exit_done", dict(task=42)))
    assert v.messages() == ["line 7: task 42 entry 1 tracer perf: request at line 5 returned 0 but the callback "
                            "never ran before the task exited"]


def test_the_end_records_cause_counts_name_a_missing_cause_as_0():
    explained = {"unwinder": "fp", "oracle": "cfi", "verdict": "explained",
                 "divergences": [{"kind": "lost", "cause": "leaf-no-frame", "text": "frame 1 lost"}]}
    rec = stack(epoch=0)
    rec[1]["verdicts"] = [explained]
    v = check("mainline", request(), walk(), rec, end={"reason": "complete", "stacks": 1, "failures": 0, "causes": {}})
    assert v.messages() == ["line 8: end record counts 0 divergence(s) explained by leaf-no-frame, the stack records 1"]
