"""A planted disagreement found, shrunk to a program of a few functions, kept as a reproducer
and replayed: a test-only broken SFrame reader (it misreads the CFA offset of rbp-based rules in
functions with alloca) injected through the static checker's SFrame provider."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from hypothesis import strategies as st

from harness.cli import main
from harness.fuzz.build import BuildConfig
from harness.fuzz.campaign import merge, replay, run
from harness.fuzz.static import StaticChecker, generated_functions
from harness.rule import FrameRule, ValueRule
from harness.unwind.maps import ElfImage
from tests.support.tiers import DEEP
from tests.support.toolchains import need

CONFIG = BuildConfig("host", "-O1", True, True, False, "bfd")


class MisreadsAlloca:
    """An SFrame reader that adds 8 to the CFA offset of fp-based rules inside the functions whose
    shape has alloca (the bug a reader could have: the wrong FRE offset field for that shape)."""

    def __init__(self, built, table):
        self.table = table
        alloca = {f"fz_f{i}" for i, f in enumerate(built.shape.funcs) if "alloca" in f.features}
        funcs = generated_functions(ElfImage.from_path(built.binary))
        self.ranges = [(f.start, f.start + f.size) for f in funcs if f.name in alloca]

    def rule_for(self, pc: int) -> FrameRule | None:
        rule = self.table.rule_for(pc)
        if rule is not None and rule.cfa.base == "fp" and any(a <= pc < b for a, b in self.ranges):
            return FrameRule(ValueRule("fp", rule.cfa.offset + 8), rule.ra, rule.fp, rule.signal_frame)
        return rule


def broken() -> StaticChecker:
    return StaticChecker(sframe_provider=MisreadsAlloca)


@functools.cache
def _campaign(root: Path):
    work, out = root / "work", root / "out"
    work.mkdir()
    # Bounded by its seeds, not by time: 8 seeds of 5 programs find the planted misreading and the
    # shrinker ends on its own (7.5 s here); the time budgets are far bounds no run reaches.  With
    # budget=50 s over 40 seeds the search filled its 50 s on every machine, and a shrink cut by
    # its time under load could stop before the few functions the test wants.
    camp = run(broken(), work, seeds=(0, 8), budget=600, toolchains=("host",), linkers=("bfd",), out=out,
               shrink_budget=300, shrink_share=0.7, matrix=st.just(CONFIG), examples_per_seed=5)
    return camp, out


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    need("host")
    return _campaign(tmp_path_factory.mktemp("fuzz-campaign"))


def _planted(camp):
    recs = [r for r in camp.records.values() if r.signature.kind == "sframe-step" and "cfa=fp+N" in r.signature.detail]
    assert recs, [r.signature.key for r in camp.records.values()]
    return recs


def _gas_240_probe_loop(rec) -> bool:
    """A real finding the host toolchain has, beside the planted one: gas 2.40 writes a stack-clash
    probe loop's CFA r11+N as sp+N (the bigframe shape; docs/findings.md row 8)."""
    finding = rec.finding or (rec.first[1] if rec.first else None)
    text = rec.signature.detail + " " + (finding.message if finding is not None else "")
    shape = (rec.example or (rec.first[0] if rec.first else None)).shape
    return "bigframe" in shape.features() and "r11+" in text


@DEEP  # the campaign fixture: a whole campaign, 10 s of CPU: the deep tier (tests/support/tiers.py)
def test_the_planted_disagreement_is_found_and_shrunk_to_a_few_functions(campaign):
    camp, out = campaign
    for rec in _planted(camp):
        assert rec.signature.toolchain == "host" and rec.signature.flags == CONFIG.flags
        assert rec.shrunk and rec.example is not None
        shape = rec.example.shape
        assert "alloca" in shape.features()
        assert len(shape.funcs) <= 3 and len(shape.features()) <= 2, shape.describe()
    # the reader is planted in the object's table too (the assembler's SFrame, stepped before any
    # linker): the same misreading there, a signature without a linker
    assert camp.per_toolchain == {"host": camp.programs} and camp.per_linker == {"bfd": camp.programs}
    obj = [r for r in camp.records.values() if r.signature.kind == "sframe-object" and not _gas_240_probe_loop(r)]
    assert obj and all(r.signature.linker == "-" and r.signature.detail.startswith("step ") and
                       "cfa=fp+N" in r.signature.detail for r in obj), [r.signature.key for r in obj]
    # the rest is the real checker's on the same builds: only gas 2.40's probe-loop rows, if a
    # bigframe shape was drawn (the planted reader leaves the rules it does not misread as they are)
    real = [r for r in camp.records.values() if r not in obj and r not in _planted(camp)]
    assert all(_gas_240_probe_loop(r) for r in real), [r.signature.key for r in real]


@DEEP  # the campaign fixture (above)
def test_the_reproducer_directory_holds_what_an_engineer_needs(campaign):
    camp, out = campaign
    rec = _planted(camp)[0]
    d = out / rec.signature.id
    meta = json.loads((d / "signature.json").read_text())
    assert meta["signature"]["key"] == rec.signature.key and meta["reproduced_when_written"]
    ev = meta["finding"]["evidence"]
    assert ev["cfi"] != ev["sframe"] and ev["cfi"]["sp"] + 8 == ev["sframe"]["sp"]
    assert (d / meta["source"]).read_text().count("alloca(") >= 1
    assert "gcc" in (d / "build.sh").read_text()
    tools = (d / "tools.txt").read_text()
    assert "objdump --sframe" in tools and "readelf --debug-dump=frames" in tools
    assert "DW_CFA_def_cfa_register: r6 (rbp)" in tools  # the FDE at the address, cut from readelf
    assert json.loads((out / "campaign.json").read_text())["programs"] == camp.programs


@DEEP  # the campaign fixture (above)
def test_replay_reproduces_with_the_broken_reader_and_not_with_the_real_one(campaign, tmp_path):
    camp, out = campaign
    d = out / _planted(camp)[0].signature.id
    assert replay(d, broken(), tmp_path / "a").reproduces
    assert not replay(d, StaticChecker(), tmp_path / "b").reproduces
    # the command: exit 0 once it no longer reproduces (the real checker is the command's)
    assert main(["fuzz", "replay", str(d)]) == 0


@DEEP  # the campaign fixture (above)
def test_merge_sums_counts_and_dedupes_signatures(campaign, tmp_path):
    camp, out = campaign
    merged = merge([out, out], tmp_path / "m")
    assert merged["programs"] == 2 * camp.programs
    assert len(merged["signatures"]) == len(camp.records)
    one = merged["signatures"][0]
    rec = next(r for r in camp.records.values() if r.signature.key == one["signature"]["key"])
    assert one["programs"] == 2 * rec.programs
    assert (tmp_path / "m" / one["reproducer"] / "signature.json").is_file()
    assert main(["fuzz", "merge", str(out), str(out)]) == 1


def test_usage_errors_exit_2(tmp_path, capsys):
    assert main(["fuzz", "replay", str(tmp_path)]) == 2
    assert "not a reproducer directory" in capsys.readouterr().err
    assert main(["fuzz", "merge"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["fuzz", "--samples", "0"])
    assert exc.value.code == 2 and "--samples: 0 is not a positive integer" in capsys.readouterr().err


def test_a_campaign_that_finds_nothing_searches_for_its_whole_budget(tmp_path):
    """No signature waits to be shrunk, so no share of the budget is kept for shrinking (the first
    live campaign of 1,200 s stopped after 721: its 40 % shrink share had nothing to do)."""
    need("host")
    budget = 6.0
    camp = run(lambda built: [], tmp_path, seeds=(0, 10_000), budget=budget, toolchains=("host",),
               linkers=("bfd",), matrix=st.just(CONFIG), examples_per_seed=2)
    assert camp.records == {} and camp.seeds_done >= 2
    assert camp.elapsed >= 0.9 * budget  # a lower bound: a loaded machine only lengthens it
