"""The log reader (harness/deferred/log.py LogReader) trusts nothing: the probes of issue 21, each
on a real sealed log, each refused with the line and what is wrong; a log cut short stays
incomplete; the digest; the writer refuses what the reader would."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.deferred.check import check_lines
from harness.deferred.log import LOG_VERSION, EventLog, LogDigestError, LogFormatError
from harness.report.check import verdict_lines as render
from tests.support.log_mutations import DATA, seeds


@pytest.fixture(scope="module")
def seed() -> list[str]:
    return seeds()["fp-syscall[:16]"]  # a real run's first records, one stack record, sealed


def write(tmp_path, lines: list[str]):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def edit(line: str, **change) -> str:
    d = json.loads(line)
    d.update(change)
    return json.dumps(d, separators=(",", ":"))


def refused(lines: list[str]) -> LogFormatError:
    with pytest.raises(LogFormatError) as info:
        check_lines(lines)
    return info.value


def test_the_sealed_seed_passes(seed, tmp_path, capsys):
    v = check_lines(seed)
    assert v.ok and v.sealed and v.version == LOG_VERSION == 2
    assert _run_check(write(tmp_path, seed)) == 0
    assert "unsealed" not in capsys.readouterr().out


# -- the probes of issue 21: each passed as clean (exit 0) before --------------------------------


def test_a_log_without_its_header_is_refused(seed, tmp_path, capsys):
    e = refused(seed[1:])
    assert e.line_no == 1 and "the first line must be the header, not an init record" in str(e)
    assert _run_check(write(tmp_path, seed[1:])) == 2
    assert "line 1: the first line must be the header" in capsys.readouterr().err


def test_a_line_repeated_with_its_seq_is_refused(seed):
    e = refused(seed[:5] + seed[4:])
    assert e.line_no == 6 and "has seq 5, not its line number 6 (a line is repeated or out of order)" in str(e)


def test_reversed_lines_are_refused(seed):
    e = refused(seed[:3] + seed[3:8][::-1] + seed[8:])
    assert e.line_no == 4 and "seq 8, not its line number 4 (4 line(s) missing before it, or lines out of order)" in str(e)


def test_a_missing_line_is_refused(seed):
    e = refused(seed[:6] + seed[7:])
    assert e.line_no == 7 and "has seq 8, not its line number 7" in str(e)


@pytest.mark.parametrize("change, fragment", [
    ({"version": 99}, "version must be one of 1, 2, not 99"),
    ({"word_bits": 7}, "word_bits must be one of 32, 64, not 7"),
    ({"version": 99, "word_bits": 7}, "word_bits must be one of 32, 64, not 7"),
    ({"version": "2"}, "version must be one of 1, 2, not '2'"),
    ({"profile": "v11"}, "profile must be one of 'seed-v10', 'mainline', not 'v11'"),
    ({"max_entries": 0}, "max_entries must be a positive integer, not 0"),
])
def test_a_header_of_unknown_version_or_word_size_is_refused(seed, change, fragment):
    e = refused([edit(seed[0], **change)] + seed[1:])
    assert e.line_no == 1 and f"line 1: header record: {fragment}" in str(e)


def test_a_second_header_is_refused(seed):
    e = refused(seed[:3] + [edit(seed[0], seq=4)] + [edit(x, seq=n) for n, x in enumerate(seed[3:], 5)])
    assert e.line_no == 4 and "a second header" in str(e)


def test_addresses_must_fit_the_headers_word_size(seed):
    e = refused([edit(seed[0], word_bits=32)] + seed[1:])  # the real stack's addresses are 0x7fff...
    assert "address 0x7fff" in str(e) and "does not fit the header's word size (32 bits)" in str(e)


def test_a_blank_line_is_refused(seed):
    e = refused(seed[:4] + [""] + seed[4:])
    assert e.line_no == 5 and "blank line" in str(e)


def test_a_record_of_unknown_kind_or_with_a_field_no_writer_writes_is_refused(seed):
    e = refused(seed[:3] + ['{"seq":4,"ev":"teleport"}'])
    assert e.line_no == 4 and "unknown or missing event name 'teleport'" in str(e)
    e = refused(seed[:3] + [edit(seed[3], colour="red")])
    assert "colour: no writer writes such a field" in str(e)


def test_a_field_of_another_type_is_refused(seed):
    line = next(i for i, x in enumerate(seed) if '"ev":"request"' in x)
    e = refused(seed[:line] + [edit(seed[line], cookie=str(json.loads(seed[line])["cookie"]))])
    assert e.line_no == line + 1 and "request record: cookie must be an unsigned 64-bit integer, not '" in str(e)


# -- cut short is incomplete, not corrupt -----------------------------------------------------------


@pytest.mark.parametrize("keep", [1, 5, 15, 16])
def test_a_log_cut_to_whole_lines_is_incomplete_not_corrupt(seed, tmp_path, capsys, keep):
    v = check_lines(seed[:keep])
    assert v.clean and not v.complete and v.sealed is None and not v.ok
    assert _run_check(write(tmp_path, seed[:keep])) == 1
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"incomplete: no end record; the log stops after line {keep}")


# -- the digest --------------------------------------------------------------------------------------


def test_a_value_changed_inside_a_well_formed_line_breaks_the_digest(seed, tmp_path, capsys):
    i = next(i for i, x in enumerate(seed) if '"ev":"stack"' in x)
    changed = seed[:i] + [seed[i].replace('"comm":"callchain-fp', '"comm":"callchain-xp')] + seed[i + 1:]
    assert changed != seed
    with pytest.raises(LogDigestError) as info:
        check_lines(changed)
    assert info.value.line_no == len(seed) and "a record was changed, added or removed after it was written" in str(info.value)
    assert _run_check(write(tmp_path, changed)) == 2


def test_the_end_records_own_fields_are_sealed_too(seed):
    with pytest.raises(LogDigestError):
        check_lines(seed[:-1] + [edit(seed[-1], requests=json.loads(seed[-1])["requests"] + 1)])


def test_a_version_1_log_reads_but_is_unsealed(tmp_path, capsys):
    lines = (DATA / "run-small" / "fp-syscall.jsonl").read_text().splitlines()  # written before the digest
    v = check_lines(lines)
    assert v.ok and v.version == 1 and v.sealed is False
    assert render(v, "x")[-1] == ("x: unsealed: a version 1 log carries no digest, so an edit that keeps it "
                                  "well-formed would go unseen")
    e = refused([edit(lines[0], version=2)] + lines[1:])
    assert e.line_no == len(lines) and "end record lacks the digest a version 2 log ends with" in str(e)


def test_a_digest_under_a_version_1_header_is_refused(seed):
    e = refused([edit(seed[0], version=1)] + seed[1:])
    assert e.line_no == len(seed) and "end record has a digest, but the header says version 1" in str(e)


# -- what the seal covers (issue 34) ------------------------------------------------------------------
#
# Each of these passed as clean (exit 0) before: the digest took in the end record as re-encoded
# from what json.loads made of it, not the line's bytes, and json.loads keeps a key's last value.


def _end_with(seed, text: str) -> list[str]:
    return seed[:-1] + [text]


def test_an_end_line_with_a_duplicate_key_is_refused(seed, tmp_path, capsys):
    end = seed[-1]
    stacks = json.loads(end)["stacks"]
    # "stacks":99 first, the real count after it: json.loads keeps the last, the digest agreed
    doubled = end.replace(f'"stacks":{stacks}', f'"stacks":99,"stacks":{stacks}', 1)
    assert doubled != end and json.loads(doubled) == json.loads(end)
    e = refused(_end_with(seed, doubled))
    assert e.line_no == len(seed) and "the key 'stacks' twice in one object" in str(e)
    assert _run_check(write(tmp_path, _end_with(seed, doubled))) == 2
    assert f"line {len(seed)}: the key 'stacks' twice in one object" in capsys.readouterr().err


def test_a_duplicate_key_anywhere_is_refused(seed):
    """Inside a stack record's nested objects too (a v1 log has no digest to see it at all)."""
    i = next(i for i, x in enumerate(seed) if '"ev":"stack"' in x)
    doubled = seed[i].replace('"regs":{"ip":', '"regs":{"ip":0,"ip":', 1)
    assert doubled != seed[i]
    e = refused(seed[:i] + [doubled] + seed[i + 1:])
    assert e.line_no == i + 1 and "the key 'ip' twice in one object" in str(e)
    v1 = (DATA / "run-small" / "fp-syscall.jsonl").read_text().splitlines()
    j = next(i for i, x in enumerate(v1) if '"ev":"stack"' in x)
    e = refused(v1[:j] + [v1[j].replace('"comm":', '"comm":"x","comm":', 1)] + v1[j + 1:])
    assert e.line_no == j + 1 and "the key 'comm' twice" in str(e)


@pytest.mark.parametrize("respell", [
    pytest.param(lambda d: json.dumps(d), id="spaces"),  # json.dumps' default separators
    pytest.param(lambda d: json.dumps(d, separators=(",", ":"), ensure_ascii=False), id="raw-utf8"),
    pytest.param(lambda d: json.dumps(d, separators=(",", ":")).replace('"complete"', '"\\u0063omplete"'),
                 id="escaped-letter"),
    pytest.param(lambda d: json.dumps(d, separators=(",", ":")) + " ", id="trailing-space"),
    pytest.param(lambda d: json.dumps({"digest": d["digest"], **{k: v for k, v in d.items() if k != "digest"}},
                                      separators=(",", ":")), id="digest-first"),
])
def test_an_end_line_not_as_the_writer_writes_it_is_refused(seed, respell, tmp_path):
    """The same record spelt otherwise: bytes the digest never covered."""
    end = json.loads(seed[-1])
    end["errors"] = ["gu\u00e9st"]  # a non-ASCII error text (the writer escapes it): sealed again
    lines = relog_end(seed, end)
    assert check_lines(lines).ok  # the writer's own spelling passes
    text = respell(json.loads(lines[-1]))
    assert text != lines[-1] and json.loads(text) == json.loads(lines[-1])
    e = refused(_end_with(lines, text))
    assert e.line_no == len(seed)
    assert ("not written as the writer writes it" in str(e)) or ("digest is not its last field" in str(e))
    assert _run_check(write(tmp_path, _end_with(lines, text))) == 2


def relog_end(seed, end: dict) -> list[str]:
    """``seed`` with its end record's fields replaced by ``end``'s, sealed again by the writer."""
    from tests.support.eventlog import relog
    return relog([json.loads(x) for x in seed[:-1]] + [end])


def test_a_recomputed_digest_is_not_seen_as_the_docs_say(seed):
    """What the seal does not prove (docs/running.md, log.py): an edit whose author recomputed the
    sha256 reads as clean.  If this ever fails, the seal became keyed: say so in the docs."""
    i = next(i for i, x in enumerate(seed) if '"ev":"stack"' in x)
    edited = [json.loads(x) for x in seed]
    edited[i]["comm"] = "someone-else"
    resealed = relog_end(seed[:i] + [json.dumps(edited[i], separators=(",", ":"))] + seed[i + 1:], json.loads(seed[-1]))
    assert resealed != seed and check_lines(resealed).ok


# -- the writer --------------------------------------------------------------------------------------


def test_the_writer_refuses_what_the_reader_would():
    log = EventLog()
    with pytest.raises(ValueError, match="not declared in RECORDS"):
        log.emit("teleport", task=1)
    with pytest.raises(ValueError, match="not declared in RECORDS"):
        log.emit("task", task=1, colour="red")
    assert log.seq == 0 and not log.events


def _run_check(path) -> int:
    """``harness check PATH``'s exit status."""
    return main(["check", str(path)])
