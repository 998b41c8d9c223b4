"""The log reader's and writer's errors (harness/deferred/log.py), each naming what is wrong, on
which line, and quoting that line (its first 120 characters) -- the lines the real writer writes
(:func:`tests.support.deferred_logs.stack_log`), one edited at a time.  The seal's own messages
are another branch's work (tests/unit/deferred/test_log_reader.py)."""

from __future__ import annotations

import io
import json
import os
import stat

import pytest

from harness.deferred import EventLog, LogFormatError
from harness.deferred.log import JsonlFile, LogDigestError, LogWriteError, parse_line, read_events
from tests.support.deferred_logs import index, stack_log, text

TASK = '{"seq":3,"ev":"task","task":1}'


def _lines(change: dict[int, str] | None = None, header: dict | None = None) -> list[str]:
    """The real log's lines (without their newlines), line N (1-based) replaced by change[N]."""
    events = stack_log()
    events[0].update(header or {})
    lines = text(events)
    for n, line in (change or {}).items():
        lines[n - 1] = line
    return lines


def _error(lines: list[str]) -> LogFormatError:
    with pytest.raises(LogFormatError) as e:
        list(read_events(lines))
    return e.value


@pytest.mark.parametrize("line, message", [
    ("{X", "not JSON (Expecting property name enclosed in double quotes)"),
    ("x", "not JSON (Expecting value)"),
    ("[1]", "not a JSON object"),
    ('{"seq":3,"ev":"nope"}', "unknown or missing event name 'nope'"),
    ('{"seq":"3","ev":"task","task":1}', "task record: seq must be an integer, not '3'"),
    ('{"seq":3,"ev":"task","task":-1}', "task record: task must be a non-negative integer, not -1"),
    ('{"seq":3,"ev":"task","task":1,"bogus":2}', "task record: bogus: no writer writes such a field"),
    ('{"seq":0,"ev":"task","task":1}', "task record has seq 0, not its line number 3 (seq counts lines from 1)"),
    ('{"seq":1,"ev":"task","task":1}', "task record has seq 1, not its line number 3 (a line is repeated or out of "
                                       "order)"),
    ('{"seq":5,"ev":"task","task":1}', "task record has seq 5, not its line number 3 (2 line(s) missing before it, "
                                       "or lines out of order)"),
    ('{"seq":3,"ev":"header","profile":"mainline","word_bits":64,"max_entries":510,"version":2}',
     "a second header (the header is the first line only)"),
    ('{"seq":3,"ev":"task","task":1,"flags":0,"comm":"' + "x" * 200 + '"}',
     "task record: comm: no writer writes such a field"),
])
def test_a_malformed_line_is_named_and_quoted(line, message):
    e = _error(_lines({3: line}))
    assert (e.line_no, e.text) == (3, line)
    assert str(e) == f"line 3: {message}: {line[:120]!r}"


@pytest.mark.parametrize("first, article", [('{"seq":1,"ev":"task","task":1}', "a task"),
                                            ('{"seq":1,"ev":"enter","task":1,"entry":1}', "an enter"),
                                            ('{"seq":1,"ev":"init","tracer":"t","bit":1,"ret":0}', "an init")])
def test_a_first_line_that_is_no_header_is_named_with_its_article(first, article):
    e = _error(_lines({1: first}))
    assert str(e) == f"line 1: the first line must be the header, not {article} record: {first!r}"


def test_a_blank_line_is_named_without_a_quote():
    e = _error(_lines({3: ""}))
    assert str(e) == "line 3: blank line (a log has none: a line was lost or cut)" and e.text == ""


@pytest.mark.parametrize("record, what", [
    ({"seq": 3, "ev": "walk", "task": 42, "entry": 1, "epoch": 0, "nr": 1, "trace_hash": "", "trace": [1 << 32]},
     "walk record's trace address 0x100000000"),
    ({"seq": 3, "ev": "stack", "task": 42, "entry": 1, "regs": {"ip": 1, "sp": 1 << 40, "bp": 0},
      "frames": {}, "verdicts": []}, "stack record's regs.sp address 0x10000000000"),
    ({"seq": 3, "ev": "stack", "task": 42, "entry": 1, "frames": {"fp": [[1, "m", "s"], [1 << 33, "m", "s"]]},
      "verdicts": []}, "stack record's frames['fp'] address 0x200000000"),
])
def test_an_address_past_a_32_bit_logs_word_is_named(record, what):
    from harness.deferred.log import trace_hash

    if record["ev"] == "walk":
        record["trace_hash"] = trace_hash(record["trace"])
    line = json.dumps(record, separators=(",", ":"))
    e = _error(_lines({3: line}, header={"word_bits": 32}))
    assert str(e) == f"line 3: {what} does not fit the header's word size (32 bits): {line[:120]!r}"


def test_a_32_bit_log_without_a_trace_or_registers_reads():
    walk = '{"seq":3,"ev":"walk","task":42,"entry":1,"epoch":0,"nr":0,"trace_hash":"0000000000000000"}'
    stack = '{"seq":4,"ev":"stack","task":42,"entry":1,"frames":{"fp":[[4096,"m","s"]]},"verdicts":[]}'
    lines = _lines(header={"word_bits": 32})[:2] + [walk, stack]
    assert [e["ev"] for e in read_events(lines)] == ["header", "init", "walk", "stack"]


def test_nested_records_name_their_place():
    events = stack_log()
    i = index(events, "stack")
    stack = dict(events[i])
    for change, message in (
            ({"verdicts": [{**stack["verdicts"][0], "bogus": 1}]}, "verdicts[0].bogus: no writer writes such a field"),
            ({"verdicts": [{**stack["verdicts"][0], "divergences": [3]}]}, "verdicts[0].divergences[0] must be an "
                                                                            "object, not 3"),
            ({"request": "x"}, "request must be an object, not 'x'")):
        line = json.dumps({**stack, "seq": 3, **change})
        with pytest.raises(LogFormatError) as e:
            parse_line(3, line)
        assert str(e.value) == f"line 3: stack record: {message}: {line[:120]!r}"


def test_a_trailing_space_is_an_edit_of_a_sealed_log():
    lines = _lines()
    list(read_events(lines))  # as written: read, sealed
    lines[2] += " "
    with pytest.raises(LogDigestError):
        list(read_events(lines))


# ------------------------------------------------------------------------------ the writer


def test_end_writes_complete_by_default_and_refuses_another_reason():
    fp = io.StringIO()
    log = EventLog(fp)
    log.emit("header", profile="mainline", word_bits=64, max_entries=510, version=2)
    with pytest.raises(ValueError) as e:
        log.end("done")
    assert str(e.value) == "end reason must be one of ('complete', 'error', 'interrupted'), not 'done'"
    end = log.end(errors=[OSError(5, "Input/output error"), "plain"])
    assert (end["reason"], end["errors"]) == ("complete", ["[Errno 5] Input/output error", "plain"])


def test_a_log_file_is_made_anew(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text("an older, longer log\n" * 10)
    f = JsonlFile(path)
    f.write('{"seq":1}\n')
    f.close()
    assert path.read_text() == '{"seq":1}\n'  # truncated


def test_a_new_log_file_has_mode_0644(tmp_path):
    path = tmp_path / "new.jsonl"
    old = os.umask(0o022)
    try:
        JsonlFile(path).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_closed_log_file_refuses_writes_and_its_descriptor_is_closed(tmp_path):
    f = JsonlFile(tmp_path / "log.jsonl")
    fd = f.fd
    f.close()
    assert f.closed and f.fd is None
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(ValueError) as e:
        f.write("x\n")
    assert str(e.value) == f"{tmp_path / 'log.jsonl'}: write to a closed log"


def test_a_device_that_is_always_full_and_cannot_be_cut_back_says_both():
    """/dev/full: every write is ENOSPC, and ftruncate is EINVAL (a character device)."""
    f = JsonlFile("/dev/full")
    with pytest.raises(LogWriteError) as e:
        f.write('{"seq":1}\n')
    assert str(e.value) == ("cannot write /dev/full: No space left on device; cutting it back to its last whole "
                            "line failed too (Invalid argument)")
    f.close()
