"""Two rules of harness/deferred/check.py that mutation testing found unpinned (issue 21): a second
callback of one tracer in one mainline entry, and an empty walk after a real one.  Each log is
written record by record through EventLog (as the model writes them) and read back as a file."""

from __future__ import annotations

import io

from harness.deferred.check import check_lines
from harness.deferred.log import EventLog, trace_hash

TRACE = [0x401136, 0x401182]
COOKIE = (1 << 32) | 1  # mainline: cpu 0 + 1 in the low half, an odd count in the high half
FRAMES = [[a, "callchain-fp", f"f{i}+0x10"] for i, a in enumerate(TRACE)]


def log_of(profile: str, records: list[tuple[str, dict]]) -> list[str]:
    fp = io.StringIO()
    log = EventLog(fp)
    log.emit("header", profile=profile, word_bits=64, max_entries=510, version=2)
    log.emit("init", tracer="perf", bit=2, ret=0)
    log.emit("task", task=42, flags=0)
    log.emit("enter", task=42, entry=1, epoch=0, how="syscall", cpu=0)
    for ev, fields in records:
        log.emit(ev, **fields)
    log.emit("reset", task=42, entry=1, epoch=0, cleared=True)
    log.end("complete", requests=sum(ev == "request" for ev, _ in records))
    return fp.getvalue().splitlines()


def request() -> tuple[str, dict]:
    return "request", dict(tracer="perf", task=42, entry=1, epoch=0, cpu=0, context="irq", user_mode=True, ret=0,
                           cookie=COOKIE)


def walk(trace: list[int]) -> tuple[str, dict]:
    return "walk", dict(task=42, entry=1, epoch=0, nr=len(trace), truncated=False, trace_hash=trace_hash(trace),
                        trace=trace)


def callback() -> list[tuple[str, dict]]:
    return [("callback", dict(tracer="perf", task=42, entry=1, epoch=0, bit=2, cookie=COOKIE, nr=len(TRACE),
                              trace_hash=trace_hash(TRACE))),
            ("callback_done", dict(tracer="perf", task=42))]


def stack() -> tuple[str, dict]:
    return "stack", dict(task=42, entry=1, epoch=0, cookie=COOKIE, unwinder="fp", frames={"fp": FRAMES},
                         verdicts=[{"unwinder": "fp", "oracle": "cfi", "verdict": "agree", "divergences": []}])


def test_mainline_calls_a_tracer_once_per_entry_even_for_a_second_request_returning_0():
    # mainline: a request returning 0 after the callback ran (the entry's work done) queues no second
    # call; seed-v10 may call again for it (its bit dropped and set again)
    records = [request(), walk(TRACE), *callback(), request(), *callback()]
    mainline = check_lines(log_of("mainline", records))
    first, second = 5 + 2, 5 + 5  # the records start at line 5
    assert mainline.messages() == [
        f"line {second}: task 42 entry 1 tracer perf: callback ran twice in one entry (first at line {first})"]
    assert check_lines(log_of("seed-v10", records)).clean


def test_an_empty_walk_does_not_replace_the_real_walk_a_stack_record_is_matched_with():
    # the kernel's cache cannot remember an empty trace: a walk that found nothing may follow a real
    # one in the entry; the stack record is the real walk's trace
    v = check_lines(log_of("mainline", [request(), walk(TRACE), walk([]), *callback(), stack()]))
    assert v.clean and v.ok, v.messages()
    # and the other way round: the real walk after an empty one is the one the record is matched with
    v = check_lines(log_of("mainline", [request(), walk([]), walk(TRACE), *callback(), stack()]))
    assert v.clean and v.ok, v.messages()
    # a record of another trace is still caught
    wrong = ("stack", {**stack()[1], "frames": {"fp": FRAMES[:1]}})
    v = check_lines(log_of("mainline", [request(), walk(TRACE), walk([]), *callback(), wrong]))
    assert len(v.violations) == 1 and "are not the trace walked in epoch 0" in v.messages()[0]
