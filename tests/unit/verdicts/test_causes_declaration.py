"""What a run may show, declared once: each cause's facts (harness/verdicts/causes.py), each
scenario's and perf capture's facts, and the findings when a proven cause falls outside.

The facts of a guest program are checked against its C source (an exec, a signal handler, a
noreturn call are there to see), so a program that starts to exec or handle signals without its
facts saying so fails here, not as a flake on a loaded machine."""

from __future__ import annotations

import collections
import gzip
import json
import re
from pathlib import Path

import pytest

from harness.images.programs import PROGRAM_FACTS, program_facts
from harness.perf.oracle import PERFCC_FACTS, capture_facts, check_capture
from harness.perfparse.records import parse_capture
from harness.report.perf import perf_table
from harness.report.summary import summary
from harness.scenarios.catalog import CATALOG, user_scenario
from harness.scenarios.result import Result
from harness.verdicts.causes import CAUSES, FACTS, NAMED, allowed_causes, cause, named, undeclared

REPO = Path(__file__).resolve().parents[3]
SOURCES = REPO / "guest_programs"
DATA = REPO / "tests" / "data"
EVERY = {**CAUSES, **NAMED}


def _oracles(sc) -> tuple[str, ...]:
    """The oracles the engine builds for a catalog scenario (harness/oracles: regs and cfi always,
    the shadow stack for the instrumented builds)."""
    return ("regs", "cfi", *(("shadow",) if sc.variant.shadow else ()))


def test_every_cause_needs_only_known_facts():
    for c in EVERY.values():
        assert all(need and need <= set(FACTS) for need in c.needs), (c.name, c.needs)
    with pytest.raises(ValueError, match="unknown facts"):
        cause("never-registered", ("lost",), "a cause with a fact nobody declares", needs=("forks-twice",))
    with pytest.raises(ValueError, match="registered twice"):
        named("execve-replaced", "the same name again", oracles={"perf"})
    assert "never-registered" not in CAUSES
    with pytest.raises(ValueError, match="unknown facts"):
        allowed_causes(frozenset({"forks-twice"}), ("regs",), "fp")


@pytest.mark.parametrize("program", sorted(PROGRAM_FACTS))
def test_program_facts_follow_from_the_program(program):
    """Each fact that the source shows is declared, and none that it does not."""
    src = (SOURCES / f"{program}.c").read_text()
    facts = PROGRAM_FACTS[program]
    assert ("execs" in facts) == bool(re.search(r"\bSYS_execve\b|\bexecv[pe]?\(", src)), facts
    assert ("signals" in facts) == bool(re.search(r"\bsigaction\(|\bsignal\(", src)), facts
    assert ("noreturn-calls" in facts) == ("noreturn" in src), facts
    # deep: recursion past perf_event_max_stack (127) in every scenario that runs the program
    depths = [int(sc.args[0]) for sc in CATALOG.values() if sc.program == program == "recurse"]
    assert ("deep" in facts) == bool(depths and min(depths) > 127), (facts, depths)


def test_every_catalog_program_has_facts():
    assert {sc.program for sc in CATALOG.values()} <= set(PROGRAM_FACTS)
    assert all(sc.facts is not None for sc in CATALOG.values())


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_catalog_declaration_is_what_its_program_can_show(name):
    sc = CATALOG[name]
    allowed = sc.allowed_causes(_oracles(sc))
    execs = sc.program in ("forkexec", "soak")
    signals = sc.program == "signal"
    interrupts = bool({"nmi", "timer"} & set(sc.requests))
    assert ("execve-replaced" in allowed) == execs
    assert {"signal-frame", "signal-delivery", "sigreturn-restored"} & allowed == (
        {"signal-frame", "signal-delivery", "sigreturn-restored"} if signals else set())
    assert ("truncated" in allowed) == (sc.program == "recurse")
    assert ("request-in-entry-asm" in allowed) == interrupts
    assert ({"sframe-tail-call", "sframe-tail-call-next-fde"} <= allowed) == (name == "sframe-tailcall")
    assert ("fp-prologue-ip" in allowed) == (sc.unwinder == "fp")
    assert ("sframe-function-without-fde" in allowed) == (sc.unwinder == "sframe")
    assert ("shadow-uninstrumented" in allowed) == sc.variant.shadow
    assert "cfi-untracked-sp-change" not in allowed  # compiled C: GCC's CFI follows every move of rsp
    assert not {c for c in allowed if c.startswith("perf-")}, "no perf oracle in a scenario"


def test_two_declarations_pinned():
    """The registry's lines read together for two scenarios: a change to a cause's facts shows here."""
    fp_spin = CATALOG["fp-spin"]
    assert fp_spin.allowed_causes(_oracles(fp_spin)) == {
        "fp-prologue-ip", "fp-epilogue-ip", "fp-frameless-function", "request-in-entry-asm", "cfi-no-fde",
        "shadow-in-hooks", "shadow-uninstrumented", "shadow-hook-window"}
    fe = CATALOG["forkexec-syscall"]  # syscall-entry requests: no interrupt lands in the entry code
    assert fe.allowed_causes(_oracles(fe)) == {
        "fp-prologue-ip", "fp-epilogue-ip", "fp-frameless-function", "execve-replaced", "cfi-no-fde",
        "shadow-in-hooks", "shadow-uninstrumented", "shadow-hook-window"}


def test_a_users_binary_declares_every_cause_its_oracles_allow(tmp_path):
    # /bin/true is a real ELF of this machine; user_scenario reads its variant from it
    sc = user_scenario("/bin/true", [])
    assert sc.facts is None
    allowed = sc.allowed_causes(("regs", "cfi"))
    assert {"execve-replaced", "signal-frame", "truncated", "request-in-entry-asm", "cfi-untracked-sp-change"} <= allowed
    assert not {c for c in allowed if c.startswith(("perf-", "shadow-"))}
    assert program_facts("callchain", "user") is None  # a user's binary named like ours is not ours


def test_perf_captures_declare_execve_replaced():
    """perfcc starts its target by fork + exec: a sample in that window is on the registers the
    exec replaced, proven as execve-replaced, whatever the target does."""
    assert {"execs", "exits"} <= PERFCC_FACTS
    for defer in (False, True):
        facts = capture_facts(program_facts("callchain"), defer)
        allowed = allowed_causes(facts, ("perf", "cfi"), "fp")
        assert "execve-replaced" in allowed and "perf-ran-off-dump" in allowed and "perf-unchecked-fp" in allowed
        assert ("perf-exit-unanswered" in allowed) == defer and ("perf-after-callback" in allowed) == defer
        assert "perf-max-stack" not in allowed and "signal-frame" not in allowed  # callchain: 5 deep, no handler
    assert "perf-max-stack" in allowed_causes(capture_facts(program_facts("recurse"), False), ("perf",), "fp")
    assert capture_facts(None, True) is None  # a user's binary: unknown


def test_real_captures_are_inside_their_declaration():
    for name in ("perf-callchain-7.3.4.perfcc.gz", "perf-callchain-defer-7.3.4.perfcc.gz"):
        cap = parse_capture(gzip.decompress((DATA / name).read_bytes()))
        r = check_capture(cap, None, program_facts("callchain"))
        assert r.facts == capture_facts(program_facts("callchain"), cap.defer)
        assert "execve-replaced" in r.declared and r.undeclared == {}
        assert not any("outside the declaration" in k for k, _ in r.rows())
        unknown = check_capture(cap, None)  # no program facts: nothing declared, nothing reported
        assert unknown.declared is None and unknown.undeclared == {}


def test_a_cause_outside_the_declaration_is_reported():
    # a real capture's counts (11 perf-unchecked-fp), held to a declaration without that cause
    cap = parse_capture(gzip.decompress((DATA / "perf-callchain-7.3.4.perfcc.gz").read_bytes()))
    r = check_capture(cap, None, program_facts("callchain"))
    assert r.causes["perf-unchecked-fp"] == 11
    r.declared = r.declared - {"perf-unchecked-fp"}
    assert r.undeclared == {"perf-unchecked-fp": 11}
    assert ("outside the declaration (suspicious): perf-unchecked-fp", 11) in r.rows()
    assert "outside the declaration (suspicious): perf-unchecked-fp  11" in perf_table(r)
    # the function itself: counts outside the allowed names, zero counts left out
    assert undeclared(collections.Counter({"a": 2, "b": 1, "c": 0}), frozenset({"b"})) == {"a": 2}


def test_an_undeclared_cause_is_said_in_the_run_output_and_summary():
    sc = CATALOG["fp-spin"]
    r = Result(sc, oracles=list(_oracles(sc)), declared=sc.allowed_causes(_oracles(sc)))
    r.causes["execve-replaced"] += 1
    r.undeclared["execve-replaced"] += 1
    notes = r.undeclared_notes()
    assert len(notes) == 1 and "execve-replaced" in notes[0] and "fp-spin" in notes[0]
    assert "facts: interrupts" in notes[0] and "needs execs" in notes[0] and "suspicious" in notes[0]
    r.notes += notes
    out = json.loads(json.dumps(summary([r], {})))
    (scen,) = out["scenarios"]
    assert scen["undeclared"] == {"execve-replaced": 1} and notes[0] in scen["notes"]
