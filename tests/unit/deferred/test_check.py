"""The standalone checker: a generated log replays clean; hand-corrupted logs are caught by name."""

from __future__ import annotations

import io
import json
import random

import pytest

from harness.cli import main
from harness.commands import build_parser, load
from harness.deferred import (
    IRQ,
    NMI,
    SYSCALL,
    Context,
    DeferredModel,
    EventLog,
    LogFormatError,
    UnwindWork,
    check_lines,
    mainline,
    seed_v10,
)
from harness.deferred.check import Checker, check_events
from tests.support.eventlog import relog


def generated_log(profile, seed: int = 7, steps: int = 300) -> str:
    """A random run through the synchronous API (no cancels of tracers with bits set under v10)."""
    rng = random.Random(seed)
    fp = io.StringIO()
    stacks: dict[int, list[int]] = {}
    model = DeferredModel(profile, lambda t: stacks[t.pid], log=EventLog(fp))
    works = []
    for i in range(4):
        w = UnwindWork(lambda *a: None, f"t{i}")
        model.init(w)
        works.append(w)
    tasks = [model.spawn(cpu=i % 2) for i in range(3)]
    for _ in range(steps):
        t = rng.choice([x for x in tasks if not x.dead] or [None])
        if t is None:
            break
        if not t.in_kernel:
            stacks[t.pid] = [rng.randrange(0x400000, 0x500000) for _ in range(rng.randint(1, 6))]
            model.enter_kernel(t, cpu=rng.randrange(2))
            continue
        op = rng.random()
        live = [w for w in works if w.bit >= 0]
        if op < 0.55 and live:
            model.request(rng.choice(live), t, t.cpu, Context(rng.choice([NMI, IRQ, SYSCALL])))
        elif op < 0.85:
            model.return_to_user(t)
        elif op < 0.9:
            model.unwind_user_faultable(t) if profile.name == "mainline" else None
        elif op < 0.97 and len(tasks) < 6:
            child = model.fork(t)
            stacks[child.pid] = [0x401000]
            tasks.append(child)
        elif op > 0.99:
            model.exit(t)
    for t in tasks:
        if t.in_kernel and not t.dead:
            model.return_to_user(t)
    return fp.getvalue()


@pytest.mark.parametrize("profile", [seed_v10(), mainline()], ids=lambda p: p.name)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_run_replays_clean(profile, seed):
    text = generated_log(profile, seed)
    events = [json.loads(line) for line in text.splitlines()]
    assert len(events) > 150
    live = Checker()
    for e in events:
        live.feed(dict(e))
    replay = check_lines(text.splitlines())
    assert replay.clean, replay.messages()[:5]
    assert replay.violations == live.violations and replay.events == live.count


# ----------------------------------------------------------------------------- corruptions

STACK = [0x401000, 0x401100]


def scenario() -> list[dict]:
    """Two tracers, two entries of one task, a cancel after the first entry."""
    fp = io.StringIO()
    m = DeferredModel(mainline(), lambda t: STACK, log=EventLog(fp))
    a, b = UnwindWork(lambda *x: None, "perf"), UnwindWork(lambda *x: None, "ftrace")
    m.init(a)
    m.init(b)
    t = m.spawn(pid=42)
    m.enter_kernel(t)
    m.request(a, t, 0, Context(IRQ))
    m.request(b, t, 0, Context(NMI))
    m.return_to_user(t)
    m.cancel(b)
    m.enter_kernel(t)
    m.request(a, t, 1, Context(IRQ))
    m.return_to_user(t)
    return [json.loads(x) for x in fp.getvalue().splitlines()]


def to_text(events: list[dict]) -> list[str]:
    return relog(events)  # each line with its seq: an edited log is checked, not the edit


def first(events, ev, **match):
    for i, e in enumerate(events):
        if e["ev"] == ev and all(e.get(k) == v for k, v in match.items()):
            return i
    raise AssertionError(f"no {ev} {match}")


def verdict(events):
    return check_lines(to_text(events))


def test_scenario_is_clean():
    assert verdict(scenario()).clean


def test_duplicated_callback_is_caught():
    ev = scenario()
    i = first(ev, "callback", tracer="perf")
    ev[i + 1 : i + 1] = [dict(ev[i]), dict(ev[i + 1])]  # callback + callback_done again
    msgs = verdict(ev).messages()
    assert len(msgs) == 1
    assert f"line {i + 2}: task 42 entry 1 tracer perf: callback ran again in one entry" in msgs[0]
    assert f"first callback at line {i + 1}" in msgs[0]


def test_missing_callback_is_caught():
    ev = scenario()
    i = first(ev, "callback", tracer="perf")
    req = first(ev, "request", tracer="perf")
    del ev[i : i + 2]
    msgs = verdict(ev).messages()
    assert len(msgs) == 1
    assert "task 42 entry 1 tracer perf" in msgs[0]
    assert f"request at line {req + 1} returned 0 but the callback never ran before the return to user space" in msgs[0]


def test_two_cookies_in_one_entry_are_caught():
    ev = scenario()
    i = first(ev, "callback", tracer="ftrace")
    ev[i]["cookie"] += 1 << 33
    msgs = verdict(ev).messages()
    assert len(msgs) == 1
    assert f"line {i + 1}: task 42 entry 1 tracer ftrace: callback cookie" in msgs[0]
    assert "two cookies in one entry" in msgs[0]


def test_callback_after_cancel_is_caught():
    ev = scenario()
    cb = dict(ev[first(ev, "callback", tracer="perf", entry=2)])
    cb["tracer"] = "ftrace"
    j = first(ev, "callback_done", tracer="perf") + 0
    k = [n for n, e in enumerate(ev) if e["ev"] == "callback_done"][-1]
    ev.insert(k + 1, cb)
    msgs = verdict(ev).messages()
    cancel_line = first(ev, "cancel", tracer="ftrace") + 1
    want = f"line {k + 2}: task 42 entry 2 tracer ftrace: callback after the tracer's cancel (line {cancel_line})"
    assert any(want in m for m in msgs), msgs
    assert j < k


def test_second_walk_in_one_entry_is_caught():
    ev = scenario()
    i = first(ev, "walk")
    ev.insert(i + 1, dict(ev[i]))
    msgs = verdict(ev).messages()
    assert len(msgs) == 1
    assert (f"line {i + 2}: task 42 entry 1: stack walked a second time in one entry (first walk at line {i + 1})"
            in msgs[0])


def test_request_after_exit_must_fail():
    ev = scenario()
    i = first(ev, "request", entry=2)
    ev.insert(i, {"ev": "exit", "task": 42, "entry": 2, "epoch": 1})
    msgs = verdict(ev).messages()
    assert any("after the task began exiting" in m and "must be -EINVAL" in m for m in msgs), msgs


def test_cookie_reused_by_a_later_entry_is_caught():
    ev = scenario()
    c1 = ev[first(ev, "request", entry=1)]["cookie"]
    for e in ev:
        if e.get("entry") == 2 and "cookie" in e:
            e["cookie"] = c1
    msgs = verdict(ev).messages()
    assert any("was already used by an earlier entry" in m for m in msgs), msgs


def test_wrong_trace_in_callback_is_caught():
    ev = scenario()
    i = first(ev, "callback", tracer="ftrace")
    ev[i]["trace_hash"] = "0" * 16
    msgs = verdict(ev).messages()
    assert len(msgs) == 1 and "not the one walked in this entry" in msgs[0]


def test_cancel_done_while_callback_runs_is_caught():
    ev = scenario()
    i = first(ev, "callback", tracer="ftrace")
    ev.insert(i + 1, {"ev": "cancel_done", "tracer": "ftrace"})
    msgs = verdict(ev).messages()
    assert any("cancel completed while its callback on task 42" in m for m in msgs), msgs


# ----------------------------------------------------------------------------- malformed input


@pytest.mark.parametrize(
    "bad,fragment",
    [
        ("{not json", "line 3: not JSON"),
        ("[1, 2]", "line 3: not a JSON object"),
        ('{"seq": 3, "ev": "callback", "tracer": "x"}', "line 3: callback record: missing field(s) task, entry"),
        ('{"ev": "teleport"}', "line 3: unknown or missing event name 'teleport'"),
        ('{"seq": 3, "ev": "request", "tracer": "x", "task": "42", "entry": 1, "epoch": 0, "ret": 0, "cookie": 1}',
         "line 3: request record: task must be a non-negative integer"),
    ],
)
def test_malformed_line_names_the_line(bad, fragment):
    lines = to_text(scenario())
    lines.insert(2, bad)
    with pytest.raises(LogFormatError) as info:
        check_lines(lines)
    assert fragment in str(info.value)
    assert info.value.line_no == 3
    assert not isinstance(info.value, KeyError)


def test_check_events_accepts_dicts_without_line_numbers():
    ev = scenario()
    for e in ev:
        e.pop("seq")
    assert check_events(ev).clean


# ----------------------------------------------------------------------------- command line


END = {"ev": "end", "reason": "complete", "stacks": 0, "failures": 0, "causes": {}, "requests": 3, "errors": []}


def main_check(argv: list[str]) -> int:
    return main(["check", *argv])


def test_main_check_exit_codes(tmp_path, capsys):
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(to_text(scenario() + [END])) + "\n")
    assert main_check([str(good)]) == 0
    assert "clean" in capsys.readouterr().out

    ev = scenario() + [END]
    i = first(ev, "walk")
    ev.insert(i + 1, dict(ev[i]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(to_text(ev)) + "\n")
    assert main_check([str(bad)]) == 1
    out = capsys.readouterr().out
    assert "stack walked a second time" in out and "1 violation(s)" in out

    broken = tmp_path / "broken.jsonl"
    broken.write_text(to_text(scenario())[0] + '\n{"ev": "walk"\n')
    assert main_check([str(broken)]) == 2
    assert "line 2: not JSON" in capsys.readouterr().err
    assert main_check([str(tmp_path / "missing.jsonl")]) == 2
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    assert main_check([str(tmp_path / "bin.jsonl")]) == 2


def test_the_registry_has_check(tmp_path):
    load()
    parser = build_parser("harness")
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(to_text(scenario() + [END])) + "\n")
    args = parser.parse_args(["check", str(good)])
    assert args.cmd == "check" and args.command.func(args) == 0
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(to_text(scenario())) + "\n")  # a log written before end records existed
    args = parser.parse_args(["check", str(cut)])
    assert args.command.func(args) == 1
