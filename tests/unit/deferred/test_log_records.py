"""The ``stack`` and ``end`` records of the deferred event log: their validation (log.py), what the
checker verifies and sums up about them (check.py), and ``harness check``'s output and exit codes."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from harness.cli import main
from harness.deferred import EventLog, LogFormatError
from harness.deferred.check import StackFailure, check_events, check_lines
from harness.deferred.log import parse_line, stack_counts
from harness.report.check import verdict_lines
from tests.support.deferred_logs import agree, explained, failure, index, messages, stack_log, text

# ----------------------------------------------------------------------------- a complete log


def test_log_with_stack_records_and_end_is_clean_complete_and_summed_up():
    events = stack_log()
    assert events[-1]["ev"] == "end"
    assert {k: events[-1][k] for k in ("stacks", "failures", "causes")} == {
        "stacks": 3, "failures": 1, "causes": {"leaf-no-frame": 2, "plt-stub": 1}}
    v = check_lines(text(events))
    assert v.clean, v.messages()
    assert v.complete and v.incomplete is None and v.end_reason == "complete" and v.requests == 3
    assert v.stacks == 3 and v.failed_stacks == 1
    assert v.verdicts == {("fp", "cfi"): Counter(agree=1, explained=1, failure=1),
                          ("fp", "shadow"): Counter({"agree": 2, "not checked": 1})}
    assert v.causes == Counter({"leaf-no-frame": 2, "plt-stub": 1})
    last_stack = index(events, "stack", 2) + 1
    assert v.failures == [StackFailure(last_stack, 42, 3, "fp", "cfi", "frame 2: fp 0x401200, cfi 0x401300")]
    assert not v.ok  # a failure verdict


def test_stack_counts_and_eventlog_end_agree():
    events = stack_log()
    stacks = [e for e in events if e["ev"] == "stack"]
    end = events[-1]
    assert stack_counts(stacks) == {k: end[k] for k in ("stacks", "failures", "causes")}
    with pytest.raises(ValueError):
        EventLog().end("finished")


def test_failure_free_complete_log_is_ok_and_exits_0(tmp_path, capsys):
    events = stack_log()
    i = index(events, "stack", 2)
    events[i]["verdicts"] = [agree("cfi"), agree("shadow")]
    events[-1].update(failures=0, causes={"leaf-no-frame": 1, "plt-stub": 1})
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(text(events)) + "\n")
    assert check_lines(text(events)).ok
    assert main(["check", str(log)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{log}: 3 stack(s), 0 with a failure verdict"
    assert f"{log}: fp/cfi: agree 2, explained 1" in out
    assert f"{log}: causes: leaf-no-frame 1, plt-stub 1" in out
    assert out[-1] == f"{log}: clean ({len(events)} events)"


def test_cli_prints_summary_and_failures_and_exits_1_on_a_failure(tmp_path, capsys):
    events = stack_log()
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(text(events)) + "\n")
    assert main(["check", str(log)]) == 1
    out = capsys.readouterr().out.splitlines()
    line = index(events, "stack", 2) + 1
    assert out == [
        f"{log}: 3 stack(s), 1 with a failure verdict",
        f"{log}: fp/cfi: agree 1, explained 1, failure 1",
        f"{log}: fp/shadow: agree 2, not checked 1",
        f"{log}: causes: leaf-no-frame 2, plt-stub 1",
        f"{log}: failure: line {line}: task 42 entry 3 fp/cfi: frame 2: fp 0x401200, cfi 0x401300",
        f"{log}: run ended: complete, 3 request(s), 0 error(s)",
        f"{log}: clean ({len(events)} events)",
    ]


def test_run_that_ended_in_error_exits_1_and_prints_its_errors(tmp_path, capsys):
    events = stack_log()
    i = index(events, "stack", 2)
    events[i]["verdicts"] = [agree("cfi")]
    events[-1].update(failures=0, causes={"leaf-no-frame": 1, "plt-stub": 1}, reason="error",
                      errors=["guest died at request 3"])
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(text(events)) + "\n")
    assert main(["check", str(log)]) == 1
    out = capsys.readouterr().out
    assert "run ended: error, 3 request(s), 1 error(s)" in out and "error: guest died at request 3" in out


# ----------------------------------------------------------------------------- completeness


def test_log_cut_before_its_end_record_is_incomplete(tmp_path, capsys):
    events = stack_log()[:-1]
    v = check_lines(text(events))
    assert v.clean and not v.complete and not v.ok
    assert v.incomplete == f"no end record; the log stops after line {len(events)}"
    log = tmp_path / "cut.jsonl"
    log.write_text("\n".join(text(events)) + "\n")
    assert main(["check", str(log)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"{log}: incomplete: no end record; the log stops after line {len(events)}"


def test_empty_log_is_incomplete(tmp_path, capsys):
    v = check_lines([])
    assert not v.complete and v.incomplete == "no end record; the log is empty"
    log = tmp_path / "empty.jsonl"
    log.write_text("")
    assert main(["check", str(log)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == f"{log}: incomplete: no end record; the log is empty"


def test_log_without_stack_records_needs_an_end_record_too():
    events = [e for e in stack_log() if e["ev"] != "stack"]
    events[-1].update(stacks=0, failures=0, causes={})
    assert check_lines(text(events)).ok
    assert not check_lines(text(events[:-1])).complete


def test_end_record_not_last_is_a_violation():
    events = stack_log()
    events.append(dict(events[-1]))
    v = check_lines(text(events))
    assert v.complete
    assert v.messages() == [f"line {len(events) - 1}: end record is not the last line (line {len(events)} follows it)"]


def test_events_after_the_end_record_make_the_log_incomplete_too():
    events = stack_log()
    events.append({"ev": "task", "task": 7})
    v = check_lines(text(events))
    assert not v.complete and v.incomplete == f"no end record; the log stops after line {len(events)}"
    assert any("end record is not the last line" in m for m in v.messages())


# ----------------------------------------------------------------------------- stack records vs the walk


def test_stack_frames_that_are_not_the_walked_trace_are_a_violation():
    events = stack_log()
    i = index(events, "stack", 1)
    events[i]["frames"]["fp"][1][0] += 8
    msgs = messages(events)
    walk = [n for n, e in enumerate(events[:i]) if e["ev"] == "walk"][-1] + 1
    assert len(msgs) == 1
    assert msgs[0].startswith(f"line {i + 1}: task 42 entry 2: stack record's fp frames (2, trace ")
    assert f"are not the trace walked in epoch 1 at line {walk}" in msgs[0]


def test_the_oracles_frames_may_differ_from_the_walk():
    events = stack_log()
    events[index(events, "stack", 1)]["frames"]["cfi"][1][0] += 8
    assert messages(events) == []


def test_stack_record_of_an_epoch_without_walk_is_a_violation():
    events = stack_log()
    i = index(events, "stack", 0)
    events[i]["epoch"] = 7
    assert messages(events) == [
        f"line {i + 1}: task 42 entry 1: stack record, but no walk or callback of this task in epoch 7 before it"]


def test_stack_record_without_epoch_is_matched_by_its_entry():
    events = stack_log()
    for e in events:
        if e["ev"] == "stack":
            del e["epoch"]
    assert messages(events) == []
    events[index(events, "stack", 0)]["entry"] = 2  # entry 2's walk is another stack
    assert len(messages(events)) == 1


def test_stack_record_with_another_cookie_is_a_violation():
    events = stack_log()
    i = index(events, "stack", 0)
    events[i]["cookie"] += 2 << 32
    msgs = messages(events)
    assert len(msgs) == 1 and f"line {i + 1}: task 42 entry 1: stack record's cookie" in msgs[0]
    assert "is not the one the callback at line" in msgs[0]


def test_stack_record_without_frames_of_its_unwinder_is_a_violation():
    events = stack_log()
    i = index(events, "stack", 0)
    events[i]["frames"]["sframe"] = events[i]["frames"].pop("fp")
    assert messages(events) == [f"line {i + 1}: task 42 entry 1: stack record has no frames of its unwinder (fp)"]


# ----------------------------------------------------------------------------- verdicts and divergences


def test_failure_verdict_whose_divergences_all_have_a_cause_is_a_violation():
    events = stack_log()
    i = index(events, "stack", 2)
    events[i]["verdicts"][0]["divergences"][1]["cause"] = "plt-stub"
    events[-1].update(causes={"leaf-no-frame": 2, "plt-stub": 2})
    assert messages(events) == [
        f"line {i + 1}: task 42 entry 3: fp/cfi verdict is failure, but none of its 2 divergence(s) lacks a cause"]


def test_failure_verdict_without_divergence_needs_a_reason():
    events = stack_log()
    i = index(events, "stack", 0)
    events[i]["verdicts"].append({"unwinder": "fp", "oracle": "delivery", "verdict": "failure", "divergences": [],
                                  "reason": "pid 42: tracers got different traces in one entry"})
    events[-1]["failures"] = 2
    v = check_lines(text(events))
    assert v.clean, v.messages()
    assert v.failures[0] == StackFailure(i + 1, 42, 1, "fp", "delivery",
                                         "pid 42: tracers got different traces in one entry")
    del events[i]["verdicts"][-1]["reason"]
    assert messages(events) == [
        f"line {i + 1}: task 42 entry 1: fp/delivery verdict is failure, with neither a divergence nor a reason"]


def test_explained_verdict_with_an_unexplained_divergence_is_a_violation():
    events = stack_log()
    i = index(events, "stack", 1)
    events[i]["verdicts"][0]["divergences"][1]["cause"] = None
    events[-1].update(causes={"leaf-no-frame": 2})
    assert messages(events) == [f"line {i + 1}: task 42 entry 2: fp/cfi verdict is explained, but a lost divergence "
                                f"has no cause (frame 1 lost (plt-stub))"]


def test_agree_verdict_with_divergences_is_a_violation():
    events = stack_log()
    i = index(events, "stack", 0)
    events[i]["verdicts"][0]["divergences"] = explained("cfi", "plt-stub")["divergences"]
    events[-1]["causes"]["plt-stub"] += 1
    assert messages(events) == [f"line {i + 1}: task 42 entry 1: fp/cfi verdict is agree, with 1 divergence(s)"]


# ----------------------------------------------------------------------------- the end record's counts


@pytest.mark.parametrize(
    "change,message",
    [
        ({"stacks": 4}, "end record counts 4 stack(s), the log has 3 stack record(s)"),
        ({"failures": 0}, "end record counts 0 failure(s), the log has 1 stack record(s) with a failure verdict"),
        ({"causes": {"leaf-no-frame": 2}},
         "end record counts 0 divergence(s) explained by plt-stub, the stack records 1"),
        ({"causes": {"leaf-no-frame": 2, "plt-stub": 1, "vdso": 1}},
         "end record counts 1 divergence(s) explained by vdso, the stack records 0"),
    ],
)
def test_end_record_counts_must_be_the_stack_records(change, message):
    events = stack_log()
    events[-1].update(change)
    assert messages(events) == [f"line {len(events)}: {message}"]


def test_end_record_counts_zero_causes_as_absent():
    events = stack_log()
    events[-1]["causes"]["vdso"] = 0
    assert messages(events) == []


def test_dropped_stack_record_is_caught_by_the_end_counts():
    events = stack_log()
    del events[index(events, "stack", 0)]
    msgs = messages(events)
    assert any("end record counts 3 stack(s), the log has 2" in m for m in msgs), msgs


# ----------------------------------------------------------------------------- malformed records


def stack_line(**change) -> str:
    event = dict(stack_log()[index(stack_log(), "stack", 2)])
    event.update(change)
    return json.dumps(event)


BAD_FRAMES = [
    ([[1, "m", "s"]], "frames must be an object"),
    ({"fp": [[1, "m", "s"]], "cfi": "none"}, "frames['cfi'] must be a list"),
    ({"fp": [["0x401000", "m", "s"]]}, "frames['fp'][0] must be [address (int), module (str), symbol (str)]"),
    ({"fp": [[0x401000, "m"]]}, "frames['fp'][0] must be"),
    ({"fp": [[True, "m", "s"]]}, "frames['fp'][0] must be"),
    ({"fp": [[0x401000, None, "s"]]}, "frames['fp'][0] must be"),
    ({"fp": [0x401000]}, "frames['fp'][0] must be"),
]


@pytest.mark.parametrize("bad,fragment", BAD_FRAMES)
def test_bad_frames_shape_is_a_format_error(bad, fragment):
    with pytest.raises(LogFormatError) as info:
        parse_line(9, stack_line(frames=bad))
    assert info.value.line_no == 9 and f"line 9: stack record: {fragment}" in str(info.value)


def _verdicts(**change):
    v = failure("cfi")
    v.update(change)
    return [v]


def _divergence(**change):
    v = failure("cfi")
    v["divergences"][0].update(change)
    return [v]


@pytest.mark.parametrize(
    "line,fragment",
    [
        ('{"seq":1,"ev":[]}', "unknown or missing event name []"),
        ('{"seq":1,"ev":{"a":1}}', "unknown or missing event name {'a': 1}"),
        ('{"seq":1,"ev":5}', "unknown or missing event name 5"),
        ('{"seq":1,"ev":null}', "unknown or missing event name None"),
        ('{"seq":"1","ev":"task","task":1}', "task record: seq must be an integer"),
        ('{"seq":3,"ev":"init","tracer":["perf"],"bit":0,"ret":0}', "init record: tracer must be a string"),
        ('{"seq":3,"ev":"header","profile":"mainline","word_bits":64,"version":2,"max_entries":"510"}',
         "header record: max_entries must be a positive integer"),
        ('{"seq":3,"ev":"header","profile":"mainline","word_bits":7,"version":2,"max_entries":510}',
         "header record: word_bits must be one of 32, 64, not 7"),
        ('{"seq":3,"ev":"header","profile":"mainline","word_bits":64,"version":99,"max_entries":510}',
         "header record: version must be one of 1, 2, not 99"),
        ('{"seq":3,"ev":"header","profile":"mainline","word_bits":64,"version":2}',
         "header record: missing field(s) max_entries"),
        ('{"seq":3,"ev":"task","task":1,"pid":1}', "task record: pid: no writer writes such a field"),
        ('{"seq":3,"ev":"walk","task":1,"entry":1,"epoch":1,"nr":2,"trace_hash":"0000000000000000","trace":[1]}',
         "walk record: nr 2 but 1 address(es) in its trace"),
        ('{"seq":3,"ev":"walk","task":1,"entry":1,"epoch":1,"nr":1,"trace_hash":"0000000000000000","trace":[1]}',
         "walk record: the trace hashes to"),
        ('{"ev":"task","task":' + "1" * 5000 + "}", "not JSON"),
        ("[" * 100000 + "]" * 100000, "not JSON"),
        (stack_line(verdicts=_verdicts(verdict="passed")), "verdicts[0].verdict must be one of 'agree', 'explained', "
                                                           "'failure', 'not checked', not 'passed'"),
        (stack_line(verdicts=_verdicts(verdict=["agree"])), "verdicts[0].verdict must be one of"),
        (stack_line(verdicts={"cfi": "agree"}), "verdicts must be a list"),
        (stack_line(verdicts=["agree"]), "verdicts[0] must be an object"),
        (stack_line(verdicts=[{"unwinder": "fp", "verdict": "agree"}]), "verdicts[0]: missing field(s) oracle"),
        (stack_line(verdicts=_verdicts(oracle=3)), "verdicts[0].oracle must be a string"),
        (stack_line(verdicts=_verdicts(reason=1)), "verdicts[0].reason must be a string or null"),
        (stack_line(verdicts=_verdicts(divergences={})), "verdicts[0].divergences must be a list"),
        (stack_line(verdicts=_divergence(kind="moved")), "verdicts[0].divergences[0].kind must be one of"),
        (stack_line(verdicts=_divergence(cause=0)), "verdicts[0].divergences[0].cause must be a string or null"),
        (stack_line(verdicts=_divergence(got_index="1")), "verdicts[0].divergences[0].got_index must be an integer"),
        (stack_line(verdicts=_divergence(evidence="x")), "verdicts[0].divergences[0].evidence must be an object"),
        (stack_line(verdicts=[{**failure("cfi"), "divergences": [{"kind": "lost", "cause": None}]}]),
         "verdicts[0].divergences[0]: missing field(s) text"),
        (stack_line(regs={"ip": "0x1"}), "regs must be an object of unsigned 64-bit integers"),
        (stack_line(stops=["end"]), "stops must be an object of strings"),
        (stack_line(own=1), "own must be a string or null"),
        (stack_line(unwinder=None), "stack record: unwinder must be a string"),
        (stack_line(cookie="1"), "stack record: cookie must be an unsigned 64-bit integer"),
        ('{"seq":3,"ev":"stack","task":1,"entry":1,"frames":{}}', "stack record: missing field(s) verdicts"),
        ('{"seq":3,"ev":"end","reason":"done","stacks":0}', "end record: reason must be one of 'complete', 'error', "
                                                    "'interrupted', not 'done'"),
        ('{"seq":3,"ev":"end","reason":"complete","stacks":-1}', "end record: stacks must be a non-negative integer"),
        ('{"seq":3,"ev":"end","reason":"complete","stacks":1.0}', "end record: stacks must be a non-negative integer"),
        ('{"seq":3,"ev":"end","reason":"complete","stacks":0,"failures":true}', "end record: failures must be a non-negative"),
        ('{"seq":3,"ev":"end","reason":"complete","stacks":0,"requests":"3"}', "end record: requests must be a non-negative"),
        ('{"seq":3,"ev":"end","reason":"complete","stacks":0,"causes":[]}', "end record: causes must be an object"),
        ('{"seq":3,"ev":"end","reason":"complete","stacks":0,"causes":{"x":-2}}', "end record: causes['x'] must be a non-neg"),
        ('{"seq":3,"ev":"end","reason":"complete","stacks":0,"errors":"boom"}', "end record: errors must be a list of strings"),
        ('{"seq":3,"ev":"end","reason":"complete"}', "end record: missing field(s) stacks"),
    ],
)
def test_malformed_record_is_a_format_error_naming_the_line(line, fragment):
    with pytest.raises(LogFormatError) as info:
        parse_line(3, line)
    assert info.value.line_no == 3
    assert str(info.value).startswith("line 3: ") and fragment in str(info.value)


@pytest.mark.parametrize(
    "bad",
    ['{"seq":1,"ev":[]}', stack_line(frames={"fp": [["0x401000", "m", "s"]]}),
     stack_line(verdicts=_verdicts(verdict="passed")), '{"seq":3,"ev":"end","reason":"complete","stacks":-1}'],
    ids=["non-string ev", "bad frames", "unknown verdict", "negative count"],
)
def test_cli_reports_a_malformed_record_in_one_line_and_exits_2(tmp_path, capsys, bad):
    events = text(stack_log())
    events.insert(4, bad)
    log = tmp_path / "bad.jsonl"
    log.write_text("\n".join(events) + "\n")
    assert main(["check", str(log)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"harness check: {log}: line 5: ")
    assert "Traceback" not in err and "\\n'" not in err  # the line quoted without its newline


def test_cli_reports_a_line_cut_in_the_middle_as_unreadable(tmp_path, capsys):
    data = "\n".join(text(stack_log())) + "\n"
    log = tmp_path / "cut.jsonl"
    log.write_text(data[: data.rindex('"reason"')])
    assert main(["check", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not JSON" in err


# ----------------------------------------------------------------------------- rendering and events


def test_render_keeps_the_verdict_apart_from_its_text():
    v = check_events(stack_log())
    lines = verdict_lines(v, "x")
    assert lines[0] == "x: 3 stack(s), 1 with a failure verdict" and lines[-1] == "x: clean (31 events)"
    assert [ln for ln in lines if ln.startswith("x: failure: ")] == [f"x: failure: {v.failures[0]}"]


def test_check_events_takes_stack_records_as_written():
    events = stack_log()
    for e in events:
        e.pop("seq")
    v = check_events(events)
    assert v.clean and v.complete and v.stacks == 3
