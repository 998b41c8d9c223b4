"""harness/report/ktap.py: KTAP of real run data -- the run directory ``tests/data/run-small``
(a real 7.3 guest's logs, one failing shadow stack among them) and the real 7.3 kernel's
kernel-diff recordings replayed -- read back with the kernel's own ``kunit_parser.py`` (from the
linux-source-7.3 package: tests/support/kunit.py), its counts checked against the data."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harness.cli import main
from harness.deferred.profile import get_profile
from harness.lockstep.compare import replay
from harness.lockstep.driver import read_recording
from harness.report.ktap import kernel_diff_doc, kernel_diff_ktap, run_doc, run_ktap
from harness.report.run import read_run
from tests.support.kunit import leaves, parse_ktap
from tests.support.paths import TEST_DATA
from tests.support.tiers import DEEP

RUN = TEST_DATA / "run-small"


@pytest.fixture(scope="module")
def parsed():
    data = read_run(RUN)
    text = run_ktap(run_doc(data))
    test, printed = parse_ktap(text)
    return data, text, test, printed


def test_run_ktap_parses_with_the_kernels_parser(parsed):
    data, text, test, printed = parsed
    assert text.startswith("KTAP version 1\n")
    assert test.counts.errors == 0, printed  # no parse error: plan, numbering, names all as the parser wants
    assert [t.name for t in test.subtests] == [s.name for s in data.scenarios]
    # one test case per (scenario, oracle), and one for the delivery
    assert test.counts.total() == sum(len(s.oracles) + 1 for s in data.scenarios)


def test_counts_match_the_run(parsed):
    data, _, test, printed = parsed
    ok_status = {"SUCCESS", "SKIPPED"}
    for sc, t in zip(data.scenarios, test.subtests, strict=True):
        by_name = {sub.name: sub for sub in t.subtests}
        assert list(by_name) == [*sc.oracles, "delivery"]
        for oracle in sc.oracles:
            counts = sc.oracle_counts(oracle)
            status = by_name[oracle].status.name
            assert (status == "FAILURE") == bool(counts["failure"]), (sc.name, oracle, counts)
            checked = counts["agree"] + counts["explained"] + counts["failure"]
            assert (status == "SKIPPED") == (checked == 0), (sc.name, oracle)
        assert (t.status.name in ok_status) == (sc.end["failures"] == 0), sc.name
    # run-small's one failing pair: forkexec's shadow oracle
    failed = [p for p, s in leaves(test) if s.name == "FAILURE"]
    assert failed == ["main/forkexec/shadow"]
    assert test.status.name == "FAILURE" and test.counts.failed == 1
    assert test.counts.passed == test.counts.total() - 1
    assert "[FAILED] shadow" in printed


def test_diagnostics_carry_counts_and_causes(parsed):
    data, text, test, _ = parsed
    forkexec = next(t for t in test.subtests if t.name == "forkexec")
    sc = data.scenarios[0]
    log = "\n".join(forkexec.log)
    assert f"# stacks {sc.stacks} (own {sc.own}), failed 1" in log
    assert "# causes: execve-replaced 1, fp-frameless-function 22, shadow-uninstrumented 1" in log
    # the stacks shadow could not check, with the reason, before its result line
    assert "    # 4 not checked: its page is not present yet (fresh exec)\n    not ok 2 shadow # " in text


def test_report_format_ktap_from_a_run_directory(capsys, tmp_path):
    assert main(["report", str(RUN), "--format", "ktap"]) == 0
    out = capsys.readouterr().out
    test, _ = parse_ktap(out)
    assert test.counts.failed == 1 and test.counts.errors == 0
    # a directory with a summary.json: rendered from it (here: the one this KTAP's data gives)
    run = tmp_path / "run"
    run.mkdir()
    doc = run_doc(read_run(RUN))
    doc["scenarios"] = doc["scenarios"][1:]  # a run whose scenarios all passed
    (run / "summary.json").write_text(json.dumps(doc))
    assert main(["report", str(run), "--format", "ktap", "--output", str(tmp_path / "k.tap")]) == 0
    test, _ = parse_ktap((tmp_path / "k.tap").read_text())
    assert test.status.name == "SUCCESS" and test.counts.total() == 12
    (run / "summary.json").write_text("{not json")
    assert main(["report", str(run), "--format", "ktap"]) == 2


@pytest.mark.parametrize("profile", ["mainline", "seed-v10"])
def test_kernel_diff_ktap_of_real_recordings(profile):
    """Both recordings of the real 7.3 kernel replayed: under mainline every item equal at every
    event; under the seed-v10 control the cookies differ, each difference named, so still ok."""
    results = []
    for path in sorted((TEST_DATA / "kernel-diff").glob("*.events.jsonl")):
        events, header = read_recording(path)
        summary = replay(events, get_profile(profile), {int(k): v for k, v in header["tracers"].items()},
                         {int(k): v for k, v in header.get("percpu_ctr", {}).items()})
        results.append(SimpleNamespace(scenario=path.name.split(".")[0], smp=int(path.name.split(".")[1][3:]),
                                       summary=summary, requests=summary.kernel["request"], stops=0, seconds=0.0,
                                       errors=[], events_path=str(path)))
    doc = kernel_diff_doc(results, profile, "7.3.4+deb13-cloud-amd64", 0, "replayed")
    test, printed = parse_ktap(kernel_diff_ktap(doc))
    assert test.counts.errors == 0 and test.status.name == "SUCCESS", printed
    assert [t.name for t in test.subtests] == ["forkexec", "threads"]
    for sc, t in zip(doc["scenarios"], test.subtests, strict=True):
        assert [s.name for s in t.subtests] == [it["what"] for it in sc["items"]]
        assert sc["compared"] == sum(it["compared"] for it in sc["items"]) > 0
        if profile == "mainline":
            assert sc["differences"] == 0 and sc["equal"] == sc["compared"]
        else:
            assert sc["differences"] > 0 and sc["unexplained"] == 0
    assert test.counts.passed == sum(len(sc["items"]) for sc in doc["scenarios"])


def test_kernel_diff_skip_is_a_skip():
    doc = {"release": "6.1.0-50-cloud-amd64", "profile": "mainline", "skipped": "no unwind_deferred (6.17+)",
           "scenarios": []}
    test, _ = parse_ktap(kernel_diff_ktap(doc))
    assert test.status.name == "SKIPPED" and test.subtests[0].skip_reason == "no unwind_deferred (6.17+)"


@DEEP  # a whole static campaign (10-25 s): the deep tier (tests/support/tiers.py)
def test_fuzz_ktap_of_a_real_static_campaign(tmp_path, capsys):
    """A short static campaign on the host toolchain (real builds, every instruction checked),
    its KTAP on stdout: one ok test for the campaign, one not-ok test per signature."""
    out = tmp_path / "camp"
    code = main(["fuzz", "--static", "--budget", "20", "--seeds", "0:3", "--toolchains", "host", "--linkers", "bfd",
                 "--out", str(out), "--ktap"])
    captured = capsys.readouterr()
    campaign = json.loads((out / "campaign.json").read_text())
    assert code == (1 if campaign["signatures"] else 0)
    assert captured.out.startswith("KTAP version 1\n") and "fuzz (static):" in captured.err
    test, printed = parse_ktap(captured.out)
    assert test.counts.errors == 0, printed
    assert (test.counts.failed, test.counts.passed) == (len(campaign["signatures"]), 1)
    assert test.subtests[-1].name == "fuzz-static" and campaign["programs"] > 0
    assert f"ok {len(campaign['signatures']) + 1} fuzz-static # programs {campaign['programs']}, instructions " \
           f"{campaign['instructions']}" in captured.out


@pytest.mark.parametrize("command", [["run", "fp-syscall"], ["kernel-diff"], ["fuzz", "--static"]])
def test_a_ktap_file_that_cannot_be_written_is_refused_first(command, tmp_path, capsys):
    """Before any guest, build or run directory: exit 2 naming the option."""
    out = tmp_path / "out"
    assert main([*command, "--ktap", str(tmp_path / "no" / "x.ktap"), "--out", str(out)]) == 2
    assert f"--ktap {tmp_path / 'no' / 'x.ktap'}: no directory" in capsys.readouterr().err
    assert not out.exists()


def test_matrix_ktap_a_test_per_cell_with_its_scenarios_and_oracles():
    """matrix.json as harness matrix writes it: two real cells of a six-cell run on this machine
    (tests/data/matrix.json, summaries cut to their counts), a cell whose summary is run-small's
    (a real run with one failing shadow stack) and a cell that never came back."""
    from harness.report.ktap import matrix_ktap
    from tests.support.paths import TEST_DATA as DATA

    doc = json.loads((DATA / "matrix.json").read_text())
    small = run_doc(read_run(RUN))
    doc["cells"].append({"name": "small-host-smp1", "kernel": "small", "qemu": "host", "smp": 1, "exit_code": 1,
                         "elapsed": 1.0, "worker": "vm", "failed": None, "summary": small})
    doc["cells"].append({"name": "lost-host-smp2", "kernel": "lost", "qemu": "host", "smp": 2, "exit_code": None,
                         "failed": "worker tcp://127.0.0.1:1 lost while it held the task", "summary": None})
    test, printed = parse_ktap(matrix_ktap(doc))
    assert test.counts.errors == 0, printed
    assert [t.name for t in test.subtests] == [c["name"] for c in doc["cells"]]
    status = {t.name: t.status.name for t in test.subtests}
    for c in doc["cells"][:-2]:
        assert status[c["name"]] == ("SUCCESS" if c["exit_code"] == 0 else "FAILURE"), c["name"]
        assert [t.name for t in next(t for t in test.subtests if t.name == c["name"]).subtests] == \
            [s["name"] for s in c["summary"]["scenarios"]]
    assert status["small-host-smp1"] == "FAILURE" and status["lost-host-smp2"] == "FAILURE"
    # run-small's one failing pair, three levels down: cell / scenario / oracle
    failed = [p for p, s in leaves(test) if s.name == "FAILURE"]
    assert "main/small-host-smp1/forkexec/shadow" in failed and "main/lost-host-smp2" in failed
    lost = next(t for t in test.subtests if t.name == "lost-host-smp2")
    assert any("worker tcp://127.0.0.1:1 lost" in ln for ln in lost.log)
