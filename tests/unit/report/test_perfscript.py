"""harness report --format perf-script: perf script's text layout, read back by stackcollapse-perf's
grammar (tests/support/stackcollapse_perf.py) into exactly our SCENARIO.folded."""

from __future__ import annotations

import collections
import io
import re
import shutil

from harness.cli import main
from harness.report.flame import folded_lines, parse_folded
from harness.report.perfscript import sample_text, write_perf_script
from harness.report.run import read_run
from tests.support.paths import TEST_DATA
from tests.support.stackcollapse_perf import collapse

DATA = TEST_DATA / "run-small"

# perf script's own layout: "comm tid time: period event:" then "\t<hex ip> <sym+off> (<dso>)"
PERF_HEADER = re.compile(r"^\S.*?\s+\d+\s+\d+\.\d{6}:\s+\d+ [\w-]+:$")
PERF_FRAME = re.compile(r"^\t\s*[0-9a-f]+ (\S+\+0x[0-9a-f]+|\[unknown\]) \(\S+\)$")


def test_sample_layout():
    text = sample_text("prog", 42, 16, [[0x4016E9, "prog", "c+0x60"], [0x7F00, "", ""], [0x4017, "libc.so.6", ""]])
    lines = text.split("\n")
    assert PERF_HEADER.match(lines[0]) and lines[0].startswith("prog ") and " 42 " in lines[0]
    assert "0.000016:" in lines[0] and lines[0].endswith(" 1 cpu-clock:")
    assert lines[1] == "\t          4016e9 c+0x60 (prog)"
    assert lines[2] == "\t            7f00 [unknown] ([unknown])"
    assert lines[3] == "\t            4017 [unknown] (libc.so.6)"
    assert lines[4:] == ["", ""]  # the blank line that ends the sample
    assert collapse(text) == "prog;[libc.so.6];[unknown];c 1\n"


def test_every_line_follows_perf_scripts_grammar():
    run = read_run(DATA, keep_samples=True)
    out = io.StringIO()
    n = write_perf_script((x for s in run.scenarios for x in s.samples), out)
    assert n == run.stacks
    samples = out.getvalue().split("\n\n")
    assert samples[-1] == "" and len(samples) == n + 1
    for sample in samples[:-1]:
        head, *frames = sample.split("\n")
        assert PERF_HEADER.match(head), head
        for f in frames:
            assert PERF_FRAME.match(f), f


def test_stackcollapse_perf_reads_back_our_folded_files(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(DATA, d)
    assert main(["report", str(d), "--format", "folded"]) == 0
    run = read_run(d, keep_samples=True)
    total: collections.Counter = collections.Counter()
    for s in run.scenarios:
        out = io.StringIO()
        write_perf_script(s.samples, out)
        ours = (d / f"{s.name}.folded").read_text()
        assert collapse(out.getvalue()) == ours, s.name
        total += parse_folded(ours)
    # the whole run's text, as `harness report --format perf-script` writes it
    assert main(["report", str(d), "--format", "perf-script", "-o", str(tmp_path / "all.txt")]) == 0
    got = collapse((tmp_path / "all.txt").read_text())
    assert got == "".join(line + "\n" for line in folded_lines(total))


def test_perf_script_on_stdout(capsys):
    assert main(["report", str(DATA), "--format", "perf-script"]) == 0
    out = capsys.readouterr().out
    assert out.count(" cpu-clock:\n") == read_run(DATA).stacks
