"""Rules of harness/deferred/check.py that mutmut found reached by no test (tests/MUTATION.md): the
mainline cookie's shape, a direct unwind_user_faultable() trace, a callback of an empty trace,
requests still owed when the task exits, a stack record matched through its entry, the end
record's cause counts.  Each log is written through EventLog, as the model writes one."""

from __future__ import annotations

import io
import re

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


# -- events checked in memory (the engine's, the perf oracle's): line numbers ---------------------


def test_events_without_seq_or_line_are_numbered_by_their_place():
    from harness.deferred.check import check_events

    events = [{"ev": "header", "profile": "mainline", "word_bits": 64, "max_entries": 510, "version": 2},
              {"ev": "enter", "task": 42, "entry": 1},
              {"ev": "request", "tracer": "perf", "task": 42, "entry": 1, "epoch": 0, "ret": 0, "cookie": 0}]
    assert check_events(events).messages() == ["line 3: task 42 entry 1 tracer perf: request has cookie 0"]
    # as the engine keeps them (seq, no line), from a later part of a log: numbered by their seq
    for n, e in enumerate(events, 7):
        e["seq"] = n
    assert check_events(events).violations[0].line == 9


def test_without_a_header_no_walk_is_too_deep():
    from harness.deferred.check import check_events

    walk_ = {"ev": "walk", "task": 42, "entry": 1, "epoch": 0, "nr": 600, "trace_hash": H}
    assert check_events([walk_]).clean
    assert check_events([{"ev": "header", "profile": "mainline"}, walk_]).clean  # nor with a header that has no limit


# -- tracers ----------------------------------------------------------------------------------------


def test_a_tracer_registered_again_after_its_cancel_may_be_called():
    v = check("mainline", ("cancel", dict(tracer="perf", bit=2)), ("cancel_done", dict(tracer="perf", bit=2)),
              ("init", dict(tracer="perf", bit=2, ret=0)), request(), walk(), callback(nr=2))
    assert v.clean, v.messages()
    v = check("mainline", ("cancel", dict(tracer="perf", bit=2)), ("init", dict(tracer="perf", bit=-1, ret=-16)),
              callback(nr=2))
    assert any("callback after the tracer's cancel (line 5)" in m for m in v.messages()), v.messages()


def test_a_request_after_the_task_began_exiting_must_be_einval():
    v = check("mainline", ("exit", dict(task=42, entry=1, epoch=0)), request())
    assert v.messages()[0] == ("line 6: task 42 entry 1 tracer perf: request returned 0 after the task began "
                               "exiting (line 5); must be -EINVAL")
    assert check("mainline", ("exit", dict(task=42, entry=1, epoch=0)), request(ret=-22, cookie=0)).clean


def test_a_reused_cookie_names_the_line_that_first_had_it():
    v = check("mainline", request(), walk(), callback(nr=2), ("reset", dict(task=42, entry=1, epoch=0, cleared=True)),
              ("enter", dict(task=42, entry=2, epoch=1)),
              ("request", dict(tracer="perf", task=42, entry=2, epoch=1, ret=0, cookie=COOKIE)))
    assert v.messages() == [f"line 10: task 42 entry 2 tracer perf: request cookie {COOKIE:#x} was already used by "
                            f"an earlier entry of this task (line 5)"]


def test_under_seed_v10_each_owed_request_is_named_unless_cancelled_after_it():
    v = check("seed-v10", request(), ("cancel", dict(tracer="perf", bit=2)), request(),
              ("exit", dict(task=42, entry=1, epoch=0)), ("exit_done", dict(task=42)))
    assert v.messages() == [
        "line 7: task 42 entry 1 tracer perf: request returned 0 after the tracer's cancel (line 6)",
        "line 9: task 42 entry 1 tracer perf: request at line 7 returned 0 but the callback never ran before the "
        "task exited"]


# -- stack records ------------------------------------------------------------------------------------


def verdicts_of(*verdicts):
    rec = stack(epoch=0)
    rec[1]["verdicts"] = list(verdicts)
    return rec


def test_a_verdict_without_divergences_field_has_none():
    v = check("mainline", request(), walk(), verdicts_of({"unwinder": "fp", "oracle": "cfi", "verdict": "agree"}))
    assert v.clean and v.verdicts[("fp", "cfi")]["agree"] == 1


def test_a_failure_is_shown_by_its_first_unexplained_divergence_or_what_it_lacks():
    div = [{"kind": "lost", "cause": "plt-stub", "text": "first explained"},
           {"kind": "lost", "cause": "leaf-no-frame", "text": "second explained"}]
    v = check("mainline", request(), walk(), verdicts_of({"unwinder": "fp", "oracle": "cfi", "verdict": "failure",
                                                          "divergences": div}))
    assert [f.text for f in v.failures] == ["first explained"] and len(v.violations) == 1
    v = check("mainline", request(), walk(), verdicts_of({"unwinder": "fp", "oracle": "cfi", "verdict": "failure"}))
    assert [f.text for f in v.failures] == ["(no divergence, no reason)"]


def test_not_checked_may_carry_an_unexplained_divergence():
    nc = {"unwinder": "fp", "oracle": "shadow", "verdict": "not checked", "reason": "no shadow stack",
          "divergences": [{"kind": "differs", "cause": None, "text": "frame 1 differs"}]}
    assert check("mainline", request(), walk(), verdicts_of(nc)).clean


def test_a_stack_record_is_matched_by_the_frames_of_the_unwinder_it_names():
    rec = stack(epoch=0)
    rec[1]["unwinder"] = "sframe"  # its verdicts say fp, and it has fp frames only
    assert check("mainline", request(), walk(), rec).messages() == [
        "line 7: task 42 entry 1: stack record has no frames of its unwinder (sframe)"]


def test_a_stack_record_without_unwinder_takes_the_one_its_verdicts_name():
    rec = stack(epoch=0)
    del rec[1]["unwinder"]
    assert check("mainline", request(), walk(), rec).clean
    rec[1]["verdicts"].append({"unwinder": "sframe", "oracle": "cfi", "verdict": "agree"})
    assert check("mainline", request(), walk(), rec).messages() == [
        "line 7: task 42 entry 1: stack record has no frames of its unwinder (not named)"]


def test_a_stack_record_names_what_it_was_matched_with():
    assert check("mainline", request(), stack()).messages() == [
        "line 6: task 42 entry 1: stack record, but no walk or callback of this task in this entry before it"]
    v = check("mainline", request(), callback(h=EMPTY, nr=0), stack())
    assert v.messages() == [f"line 7: task 42 entry 1: stack record's fp frames (2, trace {H}) are not the trace "
                            f"delivered by the callback in this entry at line 6 ({EMPTY})"]
    other = stack(epoch=0)
    other[1]["cookie"] = COOKIE + (2 << 32)
    v = check("mainline", request(), walk(), callback(nr=2), other)
    assert v.messages() == [f"line 8: task 42 entry 1: stack record's cookie {COOKIE + (2 << 32):#x} is not the one "
                            f"the callback at line 7 delivered ({COOKIE:#x})"]


# -- the verdict and its text ---------------------------------------------------------------------------


def test_an_empty_log_stops_at_line_0():
    assert check_lines([]).last_line == 0


def test_render_orders_causes_by_count_then_name_and_keeps_the_summary_above_violations():
    from harness.report.check import verdict_lines as render

    def explained(*causes):
        return {"unwinder": "fp", "oracle": "cfi", "verdict": "explained",
                "divergences": [{"kind": "lost", "cause": c, "text": c} for c in causes]}

    v = check("mainline", request(), walk(), verdicts_of(explained("c-cause", "b-cause", "a-cause", "b-cause")),
              end={"reason": "complete", "stacks": 2, "failures": 0,
                   "causes": {"a-cause": 1, "b-cause": 2, "c-cause": 1}})
    lines = render(v, "x")
    assert "x: causes: b-cause 2, a-cause 1, c-cause 1" in lines
    assert "x: run ended: complete, 0 error(s)" in lines  # no request count in this end record
    assert lines[0] == "x: 1 stack(s), 0 with a failure verdict"
    assert lines[-2:] == ["x: line 8: end record counts 2 stack(s), the log has 1 stack record(s)",
                          "x: 1 violation(s) in 8 events"]


def test_harness_check_names_itself_and_its_argument(capsys):
    from harness.cli import main

    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: harness check [-h] LOG\n")
    assert re.search(r"\n  LOG +JSONL event log written by harness\.deferred\n", out), out


def test_an_unreadable_log_is_named_on_stderr(tmp_path, capsys):
    from harness.cli import main

    def _run_check(path) -> int:
        return main(["check", str(path)])

    missing = tmp_path / "missing.jsonl"
    assert _run_check(str(missing)) == 2
    assert capsys.readouterr().err == f"harness check: cannot read {missing}: No such file or directory\n"
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe")
    assert _run_check(str(binary)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"harness check: {binary} is not UTF-8 text: ") and err.count("\n") == 1
