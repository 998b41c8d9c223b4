"""Inputs the fuzzers (tests/fuzz/) found to crash a parser with an untyped exception, each now a
typed error of the harness's tree (harness/errors.py) that names what is wrong."""

from __future__ import annotations

import json

import pytest

from harness.deferred.check import check_lines
from harness.deferred.log import LogFormatError
from harness.errors import HarnessError
from harness.perfparse.records import PerfFormatError
from harness.perfparse.resolve import load_resolve
from harness.transport.errors import TargetError
from harness.transport.rsp import parse_target_xml
from tests.support.paths import TEST_DATA

# --- harness check ------------------------------------------------------------------------------


HEADER = json.dumps({"seq": 1, "ev": "header", "profile": "mainline", "word_bits": 64, "max_entries": 510,
                     "version": 2})


def _stack(address) -> str:
    return json.dumps({"seq": 2, "ev": "stack", "task": 1, "entry": 1, "unwinder": "fp",
                       "frames": {"fp": [[address, "m", "f+0x0"]]}, "verdicts": []})


@pytest.mark.parametrize("address", [1 << 64, 10 ** 30, -1])
def test_log_frame_address_beyond_64_bits_is_a_format_error(address):
    # was: OverflowError from trace_hash (int.to_bytes) while matching the stack to its walk
    with pytest.raises(LogFormatError, match="not a 64-bit address"):
        check_lines([HEADER + "\n", _stack(address) + "\n"])


def test_log_frame_address_at_the_top_of_64_bits_is_fine():
    r = check_lines([HEADER + "\n", _stack((1 << 64) - 1) + "\n"])
    assert not [m for m in r.messages() if "64-bit" in m or "address" in m], r.messages()


# --- harness perf --check: the resolve table ------------------------------------------------------


@pytest.mark.parametrize("text, what", [
    ("{", "not JSON"),
    ("[]", "JSON list, not an object"),
    ('"x"', "JSON str"),
    ('{"/bin/x": 3}', "not a string or null"),
    ('{"/bin/x": ["a"]}', "not a string or null"),
    ('{"/bin/x": "a\\u0000b"}', "NUL byte"),
    ("[" * 100000, "nests too deep|not JSON"),
])
def test_resolve_table_that_is_not_one_is_a_perf_format_error(text, what):
    # was: a json.JSONDecodeError traceback, or AttributeError ('list' object has no attribute 'get')
    with pytest.raises(PerfFormatError, match=what) as exc:
        load_resolve(text, "cap.resolve.json")
    assert exc.value.field == "resolve" and isinstance(exc.value, HarnessError)


def test_resolve_table_as_written_loads():
    assert load_resolve('{"/progs/a": "/host/a", "[vdso]": null}') == {"/progs/a": "/host/a", "[vdso]": None}


def test_perf_check_with_a_bad_resolve_file_exits_2_with_one_line(tmp_path, capsys):
    import gzip
    from types import SimpleNamespace

    from harness.commands.perf import _check_file

    cap = tmp_path / "c.perfcc"
    cap.write_bytes(gzip.decompress((TEST_DATA / "perf-callchain-7.3.4.perfcc.gz").read_bytes()))
    (tmp_path / "c.perfcc.resolve.json").write_text("[1, 2]")
    assert _check_file(SimpleNamespace(check=str(cap), examples=1)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "c.perfcc.resolve.json" in err[0] and "not an object" in err[0]


# --- RSP: target descriptions -------------------------------------------------------------------


@pytest.mark.parametrize("files, what", [
    ({"target.xml": "<target><feature"}, "not well-formed XML"),  # was: xml.etree ParseError
    ({"target.xml": '<target><reg name="rax"/></target>'}, "bitsize=None"),  # was: TypeError
    ({"target.xml": '<target><reg name="rax" bitsize="64bit"/></target>'}, "not a decimal number"),  # ValueError
    ({"target.xml": '<target><reg name="rax" bitsize="64" regnum="x"/></target>'}, "regnum='x'"),
    ({"target.xml": '<target><reg name="rax" bitsize="-8"/></target>'}, "bitsize=-8"),
    ({"target.xml": "<target><xi:include/></target>"}, "without href"),  # was: TypeError in fetch(None)
    ({"target.xml": '<target><xi:include href="a.xml"/></target>',
      "a.xml": '<feature><xi:include href="target.xml"/></feature>'}, "include loop"),  # was: RecursionError
])
def test_bad_target_description_is_a_target_error(files, what):
    def fetch(annex):
        if annex not in files:
            raise TargetError(f"qXfer of {annex} failed")
        return files[annex]

    with pytest.raises(TargetError, match=what):
        parse_target_xml(fetch)


def test_the_same_feature_included_twice_is_no_loop():
    files = {"target.xml": '<target><xi:include href="a.xml"/><xi:include href="a.xml"/></target>',
             "a.xml": '<feature><reg name="r" bitsize="64"/></feature>'}
    regs = parse_target_xml(files.__getitem__)
    assert [(r.regnum, r.offset) for r in regs] == [(0, 0), (1, 8)]


def _with_section(data: bytes, name: str, body: bytes) -> bytes:
    """A perfcc capture with section ``name`` replaced by ``body``."""
    import struct

    out, pos = data[:8], 8
    while pos + 16 <= len(data):
        raw, size = struct.unpack_from("<8sQ", data, pos)
        sec = data[pos + 16:pos + 16 + size]
        if raw.rstrip(b"\0").decode() == name:
            sec = body
        out += struct.pack("<8sQ", raw, len(sec)) + sec + b"\0" * (-len(sec) % 8)
        if raw.rstrip(b"\0") == b"end":
            break
        pos += 16 + size + (-size % 8)
    return out


@pytest.mark.parametrize("maps, line", [(b"zzz not a maps line\n", 1),
                                        (b"00400000-00401000 r-xp 0 08:01 12 /x\n\xff\xfe", 2),
                                        (b"ffffffffffffffffffff-1 r-xp 00000000 08:01 1 /x\n", 1)])
def test_perf_check_with_a_corrupt_maps_section_exits_2_with_one_line(tmp_path, capsys, maps, line):
    import gzip

    from harness.cli import main

    real = gzip.decompress((TEST_DATA / "perf-callchain-7.3.4.perfcc.gz").read_bytes())
    cap = tmp_path / "c.perfcc"
    cap.write_bytes(_with_section(real, "maps", maps))
    rc = main(["perf", "--check", str(cap)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"maps line {line} does not parse" in err[0], err
