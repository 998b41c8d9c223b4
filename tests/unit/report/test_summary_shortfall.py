"""harness/report/summary.py and Result.shortfall: a run never passes without the stacks it was
asked for.  A user's program that gave no stack is exit 2 with why and its output's end; one
with fewer than asked is judged on those, and says how many."""

from __future__ import annotations

import json

from harness.report.summary import run_exit_code, summary
from harness.report.text import scenario_rows
from harness.scenarios.catalog import Scenario
from harness.scenarios.engine import output_tail
from harness.scenarios.result import Result
from harness.verdicts.types import AGREE

USER = Scenario("user:xz", program="xz", toolchain="user", samples=30, user_path="/usr/bin/xz")


def _result(sc=USER, stacks=0, sampled=0, exit_status=None, tail=()):
    r = Result(sc)
    r.stacks = stacks
    r.sampled = sampled
    r.program_exit = exit_status
    r.output_tail = list(tail)
    if stacks:
        r.pairs[("cfi", AGREE)] = stacks
        r.oracles = ["cfi"]
    return r


def test_a_program_that_cannot_start_is_exit_2_with_its_output():
    r = _result(exit_status=127, tail=["/user/xz: error while loading shared libraries: liblzma.so.5: "
                                       "cannot open shared object file: No such file or directory"])
    code, why = run_exit_code([r])
    assert code == 2
    assert why.startswith("user:xz: the program exited with status 127 before its first checked stack "
                          "(0 of 30 requests landed on the program)")
    assert "liblzma.so.5: cannot open shared object file" in why and "\n" not in why
    s = json.loads(json.dumps(summary([r])))
    assert s["exit_code"] == 2 and s["scenarios"][0]["output_tail"] == r.output_tail


def test_a_program_that_sleeps_is_exit_2_too():
    code, why = run_exit_code([_result(sampled=0)])
    assert code == 2 and "no stack of the program was checked" in why


def test_some_stacks_but_fewer_than_asked_pass_with_a_note():
    r = _result(stacks=12, sampled=12, exit_status=0)
    assert run_exit_code([r]) == (0, "every stack agrees or is explained")
    assert r.short and r.shortfall() == ("the program exited with status 0 after 12 checked stack(s) "
                                         "(12 of 30 requests landed on the program)")
    assert scenario_rows([r])[0]["own"] == "12!"
    full = _result(stacks=25, sampled=30)
    assert not full.short and full.shortfall() is None and scenario_rows([full])[0]["own"] == "25"


def test_a_catalog_scenario_without_stacks_stays_a_failure():
    r = _result(sc=Scenario("fp-spin"), sampled=0)
    assert run_exit_code([r]) == (1, "failures in fp-spin")


def test_output_tail_reads_the_last_lines(tmp_path):
    out = tmp_path / "p.out"
    out.write_bytes(b"".join(b"line %d\n" % i for i in range(100000)) + b"\n\nlast\n")
    assert output_tail(out, 3) == ["line 99998", "line 99999", "last"]
    assert output_tail(tmp_path / "missing") == [] and output_tail(None) == []
