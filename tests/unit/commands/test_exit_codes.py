"""The exit-code contract of every subcommand (harness/cli.py): 0 agree or explained, 1 failures,
2 bad usage or input (one line, no traceback; --debug shows it), 3 infrastructure.  And the
machine-readable outputs of a run: JUnit XML (read back by junitparser, a maintained consumer)
and summary.json."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from harness.cli import exit_code, main
from harness.transport.errors import GuestDied, GuestTimeout, TargetDied
from tests.support.deferred_logs import agree, index, stack_log, text


def _run(argv, capsys) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own exit on bad usage
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _log(tmp_path, events) -> str:
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(text(events)) + "\n")
    return str(path)


def test_check_exits_0_for_a_clean_complete_log_and_1_for_a_failure(tmp_path, capsys):
    events = stack_log()
    assert _run(["check", _log(tmp_path, events)], capsys)[0] == 1  # its third stack fails
    events[index(events, "stack", 2)]["verdicts"] = [agree("cfi"), agree("shadow")]
    events[-1].update(failures=0, causes={"leaf-no-frame": 1, "plt-stub": 1})
    assert _run(["check", _log(tmp_path, events)], capsys)[0] == 0


def test_check_exits_1_for_a_log_without_its_end_record(tmp_path, capsys):
    rc, out, _ = _run(["check", _log(tmp_path, stack_log(end=False))], capsys)
    assert rc == 1 and "incomplete" in out


def _truncated_elf(tmp_path) -> str:
    p = tmp_path / "trunc"
    p.write_bytes(open("/bin/true", "rb").read()[:100])
    return str(p)


def _garbage_log(tmp_path) -> str:
    p = tmp_path / "garbage.jsonl"
    p.write_text('{"seq":1,"ev":[]}\n')
    return str(p)


def _not_a_kernel(tmp_path) -> str:
    p = tmp_path / "bzImage"
    p.write_bytes(b"\0" * 4096)
    return str(p)


BAD_USAGE = {
    "samples 0": lambda t: ["run", "--samples", "0"],
    "negative samples": lambda t: ["run", "--samples", "-5"],
    "negative rate": lambda t: ["run", "--rate", "-1"],
    "smp 0": lambda t: ["run", "--smp", "0"],
    "bench samples": lambda t: ["bench", "deferred", "--samples", "x"],
    "unknown subcommand": lambda t: ["bogus"],
    "unknown scenario": lambda t: ["run", "no-such-scenario"],
    "missing program": lambda t: ["run", "--program", "/nonexistent/program"],
    "truncated program": lambda t: ["run", "--program", _truncated_elf(t)],
    "not a kernel": lambda t: ["run", "--kernel-path", _not_a_kernel(t), "fp-spin"],
    "missing log": lambda t: ["check", "/nonexistent/log.jsonl"],
    "garbage log": lambda t: ["check", _garbage_log(t)],
    "missing capture": lambda t: ["perf", "--check", "/nonexistent/capture"],
}


@pytest.mark.parametrize("case", list(BAD_USAGE))
def test_bad_usage_or_input_exits_2_with_one_line_and_no_traceback(case, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))  # a --kernel-path build writes there
    rc, _, err = _run(BAD_USAGE[case](tmp_path), capsys)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[images]")]
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and "Traceback" not in err, err


def test_debug_shows_the_traceback(tmp_path, capsys):
    rc, _, err = _run(["--debug", "run", "--program", "/nonexistent/program"], capsys)
    assert rc == 2 and "Traceback (most recent call last)" in err and "ProgramError" in err


@pytest.mark.parametrize("exc, code", [
    (GuestTimeout("no ready line in 60 s"), 3),
    (GuestDied("QEMU exited with status 1"), 3),
    (TargetDied("connection closed"), 3),
    (OSError(errno.ENOSPC, "No space left on device"), 3),
    (FileNotFoundError(errno.ENOENT, "No such file or directory"), 2),
    (KeyError("a bug"), None),
])
def test_exit_code_of_an_error(exc, code):
    assert exit_code(exc) == code


def test_an_infrastructure_error_in_a_subcommand_exits_3(capsys, monkeypatch):
    from harness.commands import load

    def boom(args):
        raise GuestTimeout("guest did not print its ready line within 60 s")

    monkeypatch.setattr(load()["doctor"], "func", boom)
    rc, _, err = _run(["doctor"], capsys)
    assert rc == 3 and err.strip() == "harness doctor: guest did not print its ready line within 60 s"


def test_a_bug_keeps_its_traceback(monkeypatch):
    from harness.commands import load

    def bug(args):
        raise AttributeError("a bug in the harness")

    monkeypatch.setattr(load()["doctor"], "func", bug)
    with pytest.raises(AttributeError):
        main(["doctor"])


# -- JUnit XML and summary.json, on results made of real stack records ----------------------------
def _results():
    from harness.scenarios.catalog import CATALOG
    from harness.scenarios.result import Result

    events = stack_log()
    records = [e for e in events if e["ev"] == "stack"]
    ok = Result(CATALOG["fp-spin"], oracles=["cfi", "shadow", "regs"], stacks=3, seconds=1.5)
    ok.pairs.update({("cfi", "agree"): 2, ("cfi", "explained"): 1})
    ok.causes.update({"fp-frameless-function": 1})
    bad = Result(CATALOG["fp-syscall"], oracles=["cfi"], stacks=3, failed_stacks=1, failures=[records[2]])
    bad.pairs.update({("cfi", "failure"): 1})
    bad.kept_snapshots = [Path("/runs/r1/failing/fp-syscall-3/delivery.json")]
    broken = Result(CATALOG["signal"], stacks=1, errors=["TargetDied: the gdb stub closed its connection\nmore"])
    return ok, bad, broken


def test_junit_xml_one_case_per_scenario_failures_carry_the_stacks(tmp_path):
    import junitparser

    from harness.report.junit import junit_xml

    ok, bad, broken = _results()
    path = tmp_path / "junit.xml"
    path.write_bytes(junit_xml([ok, bad, broken]))
    xml = junitparser.JUnitXml.fromfile(str(path))
    suite = next(iter(xml))
    cases = {c.name: c for c in suite}
    assert set(cases) == {"fp-spin", "fp-syscall", "signal"}
    assert suite.tests == 3 and suite.failures == 1 and suite.errors == 1
    assert cases["fp-spin"].is_passed
    failure = cases["fp-syscall"].result[0]
    assert isinstance(failure, junitparser.Failure) and "1 failing stack(s)" in failure.message
    # the failing pair side by side, with the divergence no cause proves
    assert "fp vs cfi" in failure.text and "UNEXPLAINED" in failure.text and "f2+0x10" in failure.text
    error = cases["signal"].result[0]
    assert isinstance(error, junitparser.Error) and error.message == "TargetDied: the gdb stub closed its connection"


def test_summary_json_and_the_run_exit_code():
    from harness.report.summary import run_exit_code, summary

    ok, bad, broken = _results()
    assert run_exit_code([ok])[0] == 0
    assert run_exit_code([ok, bad]) == (1, "failures in fp-syscall")
    assert run_exit_code([ok, bad, broken])[0] == 3
    s = json.loads(json.dumps(summary([ok, bad], {"kernel": {"package": "linux-image-x"}})))
    assert s["exit_code"] == 1 and s["run"]["kernel"]["package"] == "linux-image-x"
    by_name = {sc["name"]: sc for sc in s["scenarios"]}
    assert by_name["fp-spin"]["pairs"] == {"cfi": {"agree": 2, "explained": 1}}
    assert by_name["fp-spin"]["causes"] == {"fp-frameless-function": 1}
    assert by_name["fp-syscall"]["failed_stacks"] == 1
    assert by_name["fp-syscall"]["failing_snapshots"] == ["/runs/r1/failing/fp-syscall-3/delivery.json"]
    assert by_name["fp-spin"]["failing_snapshots"] == []
    assert s["totals"] == {"stacks": 6, "failed_stacks": 1, "causes": {"fp-frameless-function": 1},
                           "cross_examined": {}, "contradicted": {}}
    # cross-examined (harness run --cross-examine): the outcomes per scenario and in total, and the
    # causes a tool contradicted
    ok.cross[("fp-frameless-function", "confirmed")] += 1
    bad.cross[("fp-frameless-function", "contradicted")] += 2
    s = summary([ok, bad])
    assert [sc["cross_examined"] for sc in s["scenarios"]] == [{"confirmed": 1}, {"contradicted": 2}]
    assert s["scenarios"][1]["contradicted"] == {"fp-frameless-function": 2}
    assert s["totals"]["cross_examined"] == {"confirmed": 1, "contradicted": 2}
    assert s["totals"]["contradicted"] == {"fp-frameless-function": 2}


def test_the_run_text_names_the_failing_stacks_snapshots():
    from harness.report.text import run_lines

    ok, bad, _ = _results()
    text = "\n".join(run_lines([ok, bad], Path("/runs/r1")))
    assert "fp-syscall: the snapshots of 1 failing stack(s)" in text
    assert "failing/fp-syscall-3/delivery.json" in text and "/runs/r1/failing" not in text
    assert "fp-spin: the snapshots" not in text
