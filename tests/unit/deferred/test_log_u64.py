"""The log's unsigned 64-bit fields (harness/deferred/log.py): every one takes 0 and 2**64 - 1,
and refuses 2**64 and -1 with a format error naming the record, the field and the value.

The kernel's types decide which fields are u64: a request's, a task work's and a callback's
cookie (``u64 cookie`` of unwind_deferred_request), a task work's pending bits (an unsigned
long), a stack record's cookie, its registers and those of its request, a walk's trace and a
stack's frames (user addresses: ``unsigned long`` entries, which trace_hash packs in 8 bytes).
The records are the real writer's (:func:`tests.support.deferred_logs.stack_log`), one field
changed."""

from __future__ import annotations

import json

import pytest

from harness.deferred import LogFormatError
from harness.deferred.log import RECORDS, U64, parse_line, trace_hash
from tests.support.deferred_logs import index, stack_log

TOP = (1 << 64) - 1
OK = (0, 1, TOP)
BAD = (1 << 64, (1 << 64) + 1, -1, -(1 << 64))


def _record(ev: str) -> dict:
    events = stack_log()
    return dict(events[index(events, ev)])


def _with(ev: str, path: tuple, value) -> dict:
    """The first ``ev`` record of the real log, the field at ``path`` set to ``value``."""
    event = json.loads(json.dumps(_record(ev)))
    if ev == "stack" and path[0] == "request":
        event["request"] = {"where": "syscall", "regs": {"ip": 0x401000, "sp": 0x7FFE0000, "bp": 0x7FFE0010}}
    if ev == "walk":  # a trace of one address, counted and hashed as the writer does
        event.update(trace=[value], nr=1, trace_hash=trace_hash([value]) if 0 <= value <= TOP else "0" * 16)
        return event
    inner = event
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return event


# (record, where the value goes, how the message names it, what the message says it must be)
FIELDS = [
    ("request", ("cookie",), "cookie", "an unsigned 64-bit integer"),
    ("task_work", ("bits",), "bits", "an unsigned 64-bit integer"),
    ("task_work", ("cookie",), "cookie", "an unsigned 64-bit integer"),
    ("callback", ("cookie",), "cookie", "an unsigned 64-bit integer"),
    ("stack", ("cookie",), "cookie", "an unsigned 64-bit integer"),
    ("stack", ("regs", "ip"), "regs", "an object of unsigned 64-bit integers (ip, sp, bp)"),
    ("stack", ("regs", "bp"), "regs", "an object of unsigned 64-bit integers (ip, sp, bp)"),
    ("stack", ("request", "regs", "sp"), "request.regs", "an object of unsigned 64-bit integers (ip, sp, bp)"),
    ("walk", ("trace",), "trace", "a list of unsigned 64-bit integers"),
]


def test_the_u64_fields_are_the_kernels_u64_fields():
    """Every field typed U64 is one of FIELDS (a new one is tested here when it is declared)."""
    typed = {(ev, f) for ev, fields in RECORDS.items() for f, (t, _) in fields.items() if t is U64}
    assert typed == {(ev, path[0]) for ev, path, _, must in FIELDS if must == U64.name}


@pytest.mark.parametrize("ev, path, name, must", FIELDS, ids=[f"{f[0]}.{'.'.join(f[1])}" for f in FIELDS])
def test_a_u64_field_takes_0_to_2_64_minus_1_and_refuses_the_rest(ev, path, name, must):
    for value in OK:
        event = parse_line(7, json.dumps(_with(ev, path, value)))
        got = event
        for key in path:
            got = got[key]
        assert got == ([value] if ev == "walk" else value)
    for value in BAD:
        bad = _with(ev, path, value)
        with pytest.raises(LogFormatError) as e:
            parse_line(7, json.dumps(bad))
        inner = bad
        for key in path[:-1] if ev != "walk" else ():
            inner = inner[key]
        shown = inner if name.endswith("regs") else inner[path[-1]]
        assert str(e.value).startswith(f"line 7: {ev} record: {name} must be {must}, not {shown!r}"), e.value


@pytest.mark.parametrize("value", BAD)
def test_a_frame_address_outside_u64_is_refused_and_the_top_one_taken(value):
    event = _record("stack")
    event["frames"] = {"fp": [[TOP, "m", "f"], [value, "m", "g"]]}
    with pytest.raises(LogFormatError) as e:
        parse_line(7, json.dumps(event))
    assert str(e.value).startswith(f"line 7: stack record: frames['fp'][1]: address {value} is not a 64-bit address")
    event["frames"] = {"fp": [[TOP, "m", "f"], [0, "m", "g"]]}
    assert parse_line(7, json.dumps(event))["frames"]["fp"][0][0] == TOP
