"""harness report: reading a run directory (harness.report.run) and the HTML page (harness.report.html),
on a run directory trimmed from a real ``harness run all`` (tests/data/run-small: four scenarios'
logs cut to a few stacks each, forkexec's up to its first failing pair, recurse's 510-frame stacks)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from harness.cli import main
from harness.report.html import render_html
from harness.report.run import EXAMPLES_PER_CAUSE, HEAD_FRAMES, RunDirError, read_run
from tests.support.paths import TEST_DATA

DATA = TEST_DATA / "run-small"


@pytest.fixture(scope="module")
def run():
    return read_run(DATA)


def _records(name):
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines()]


def test_counts_match_the_logs(run):
    by_name = {s.name: s for s in run.scenarios}
    assert set(by_name) == {"fp-syscall", "prologues", "forkexec", "recurse"}
    for name, s in by_name.items():
        recs = _records(name)
        end = recs[-1]
        assert s.complete and s.stacks == end["stacks"] == sum(r["ev"] == "stack" for r in recs)
        assert sum(s.folded.values()) == s.stacks
        assert sum(n for (_, cause), n in s.causes.items()) == sum(end["causes"].values())
        for o in s.oracles:  # one verdict per stack and oracle; the regs oracle checks every task's stacks
            assert sum(s.oracle_counts(o).values()) == (s.stacks if o == "regs" else s.own)
    fe = by_name["forkexec"]
    assert fe.failed_pairs == _records("forkexec")[-1]["failures"] >= 1
    assert fe.failures[0].verdict == "failure" and fe.failures[0].oracle == "shadow"


def test_examples_are_bounded_and_cut_to_a_window(run):
    rec = next(s for s in run.scenarios if s.name == "recurse")
    for kept in rec.examples.values():
        assert 1 <= len(kept) <= EXAMPLES_PER_CAUSE
    ex = rec.examples[("cfi", "truncated")][0]
    assert ex.lengths["fp"] == 510
    kept_idx = [f[0] for f in ex.frames["fp"]]
    assert kept_idx[:HEAD_FRAMES] == list(range(HEAD_FRAMES)) and len(kept_idx) < 60
    d = ex.divergences[0]
    assert d["got_index"] in kept_idx or d["got_index"] == 510


def test_timeline_follows_the_deferred_events(run):
    fp = next(s for s in run.scenarios if s.name == "fp-syscall")
    main_task = next(t for t, v in fp.timelines.items() if v["comm"].startswith("callchain"))
    rows = fp.timelines[main_task]["entries"]
    first = rows[0]
    # two tracers asked, one walk served both callbacks, the stack was checked at the return
    assert first["seq"].startswith("RR") and "W" in first["seq"] and first["seq"].endswith("S")
    assert first["walks"] == 1 and first["callbacks"] == 2 and first["end"] == "user" and first["point"]
    assert first["cookie"] == next(r["cookie"] for r in _records("fp-syscall") if r["ev"] == "callback")


def test_page_is_self_contained_and_carries_the_facts(run):
    page = render_html(run)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "the page must fetch nothing"
    assert "<link" not in page and "@import" not in page
    facts = json.loads((DATA / "run.json").read_text())
    for text in (facts["kernel"]["package"], facts["kernel"]["sha256"], facts["qemu"], "tcg", "sid"):
        assert text in page
    for s in run.scenarios:
        assert f'data-scenario="{s.name}"' in page
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    data = json.loads(m.group(1))
    keys = set(re.findall(r'data-ex="(\w+)"', page))
    assert keys and keys <= set(data["examples"])
    assert "f0" in keys  # forkexec's failing pair
    # decoded instructions travel with the evidence for the page to show
    assert any(d["evidence"].get("prologue") or d["evidence"].get("code")
               for ex in data["examples"].values() for d in ex["divergences"])


def test_script_data_cannot_close_its_element():
    run = read_run(DATA)
    s = run.scenarios[0]
    ex = next(iter(s.examples.values()))[0]
    ex.divergences = [dict(ex.divergences[0], text="</script><script>alert(1)</script>")]
    page = render_html(run)
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert "alert(1)" in json.loads(m.group(1)).__repr__()


def test_cli_writes_report_into_the_run_directory(tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(DATA, d)
    assert main(["report", str(d)]) == 0
    assert (d / "report.html").stat().st_size > 10_000
    assert str(d / "report.html") in capsys.readouterr().out


def test_cli_bad_input_is_exit_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    (tmp_path / "x.jsonl").write_text('{"ev": "header"}\nnot json\n')
    assert main(["report", str(tmp_path)]) == 2
    assert "line 2" in capsys.readouterr().err
    with pytest.raises(RunDirError):
        read_run(tmp_path)


def test_progress_lines_one_per_log(capsys):
    lines = []
    run = read_run(DATA, progress=lines.append)
    assert len(lines) == len(run.scenarios) == 4
    assert lines[-1].startswith("[4/4] ") and "100% of" in lines[-1]
    assert main(["report", str(DATA), "--format", "perf-script", "-o", "/dev/null"]) == 0
    assert capsys.readouterr().err.count("report: [") == 4
    assert main(["report", str(DATA), "--format", "perf-script", "-o", "/dev/null", "-q"]) == 0
    assert "report: [" not in capsys.readouterr().err


def test_a_log_cut_short_is_shown_as_such(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(DATA, d)
    lines = (d / "fp-syscall.jsonl").read_text().splitlines(keepends=True)
    (d / "fp-syscall.jsonl").write_text("".join(lines[:-1]))  # no end record: the writer died
    run = read_run(d)
    s = next(s for s in run.scenarios if s.name == "fp-syscall")
    assert s.end is None and not s.complete and s.stacks == 4
    page = render_html(run)
    assert "Logs cut short" in page and "cut (no end record)" in page
