"""The log writer's fast encoder (harness/deferred/log.py's ``_line``: orjson where it gives the
json module's bytes, the json module where it would not) writes every record byte for byte as
``json.dumps(record, separators=(",", ":"))`` does: the lines the digest covers and the end
record's canonical form are the same as before orjson."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.deferred import EventLog
from harness.deferred.log import JsonlFile, LogReader, _line
from tests.support.deferred_logs import stack_log


def _json(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


INTS = st.integers(min_value=-(1 << 70), max_value=1 << 70)  # past 64 bits: orjson refuses them
TEXT = st.text(max_size=12)  # outside ASCII, DEL, controls
FLOATS = (st.floats(allow_nan=True, allow_infinity=True)
          # floats orjson spells otherwise (hypothesis draws few of them by itself)
          | st.sampled_from([1e-05, 2.5e-06, -3e-07, float("nan"), float("-inf")]))
KEYS = TEXT | st.integers(min_value=-5, max_value=5)  # an int key: orjson refuses it
NESTED = st.recursive(st.none() | st.booleans() | INTS | TEXT,
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                      max_leaves=20)
#: what a typed field may hold, and anything without a float below it (a float nested in a typed
#: field is a record the reader refuses: only the stack's free-form evidence may hold one, below)
VALUES = FLOATS | NESTED
ANY = st.recursive(st.none() | st.booleans() | INTS | TEXT | FLOATS,
                   lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                   max_leaves=20)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(ev=st.sampled_from(["request", "walk", "stack", "end"]),
       fields=st.dictionaries(st.text(min_size=1, max_size=8), VALUES, max_size=6))
@example(ev="request", fields={"comm": "del\x7f"})
@example(ev="walk", fields={"comm": "na\u00efve", "nr": 1 << 64})
@example(ev="request", fields={"ratio": 1e-05, "nested": {"k": [1, {"2": None}]}})
def test_any_record_is_written_as_the_json_module_writes_it(ev, fields):
    """Floats (1e-05, NaN) in a field, strings outside ASCII, ints past 64 bits, keys that are
    not strings anywhere in a record: the same bytes."""
    event = {"seq": 1, "ev": ev, **fields}
    assert _line(event) == _json(event)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(evidence=st.dictionaries(st.text(max_size=8), ANY, max_size=4))
@example(evidence={"ratio": 1e-05, "nan": float("nan")})
def test_a_stack_record_with_divergences_is_written_as_the_json_module_writes_it(evidence):
    stack = next(e for e in stack_log() if e["ev"] == "stack")
    stack["verdicts"] = [{"unwinder": "fp", "oracle": "cfi", "verdict": "explained", "divergences": [
        {"kind": "differs", "cause": "c", "text": "t", "evidence": evidence}]}]
    assert _line(stack) == _json(stack)


def test_the_real_writers_records_are_written_as_the_json_module_writes_them():
    events = stack_log()
    assert any(e["ev"] == "stack" for e in events)
    for event in events:
        assert _line(event) == _json(event)


def test_a_log_written_to_a_file_reads_back_sealed(tmp_path):
    """Through JsonlFile's bytes path: every line the json module's, the end record's digest
    that of the lines, and the reader's own checks (canonical end line, seq, schema) pass."""
    path = tmp_path / "log.jsonl"
    events = [e for e in stack_log() if e["ev"] != "end"]
    with JsonlFile(path) as f:
        log = EventLog(f, keep=True)
        for event in events:
            log.emit(event["ev"], **{k: v for k, v in event.items() if k not in ("seq", "ev")})
        log.end(errors=["na\u00efve"])
    lines = path.read_text().splitlines()
    assert [line.encode() + b"\n" for line in lines] == [_json(e) for e in log.events]
    reader = LogReader()
    assert [e["ev"] for e in reader.events(lines)] == [e["ev"] for e in log.events]
    assert reader.sealed is True
    assert f.lines == len(lines) and f.size == path.stat().st_size
