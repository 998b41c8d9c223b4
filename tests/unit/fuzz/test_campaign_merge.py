"""``harness fuzz merge``: campaign result directories joined.  The inputs are what a campaign
writes (``campaign.json`` from :meth:`Campaign.to_json`, one reproducer directory per signature);
the merge sums what is counted, keeps each signature once with its counts summed, and keeps the
smallest reproducer of each, copied from the directory that holds it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from harness.cli import main
from harness.fuzz.build import BuildConfig
from harness.fuzz.campaign import CAMPAIGN_JSON, Campaign, CampaignError, Example, Record, load_campaign, merge
from harness.fuzz.finding import Finding
from harness.fuzz.shape import Func, Shape

HOST = BuildConfig("host", "-O1", True, True, False, "bfd")
SID = BuildConfig("sid", "-O2", False, True, True, "lld")
SMALL = Shape((Func(),))
BIG = Shape((Func("fp", callees=(1, 2)), Func("nofp", frozenset({"alloca"})), Func()))


def _record(kind: str, config: BuildConfig, shape: Shape | None, programs: int, occurrences: int, seed: int,
            message: str) -> Record:
    f = Finding(kind, "cfa", config, message)
    return Record(f.signature, programs, occurrences, seed, Example(shape, config) if shape else None,
                  f if shape else None, shrink_steps=seed * 10, shrunk=shape is not None)


def _write(d: Path, mode: str, seeds: tuple[int, int], records: list[Record], **counts) -> Path:
    camp = Campaign(mode, seeds, counts.pop("budget"), counts.pop("toolchains"), counts.pop("linkers"), **counts)
    camp.records = {r.signature: r for r in records}
    d.mkdir(parents=True)
    (d / CAMPAIGN_JSON).write_text(json.dumps(camp.to_json(), indent=1) + "\n")
    for r in records:
        if r.example is not None:
            (d / r.signature.id).mkdir()
            (d / r.signature.id / "from").write_text(str(d))
    return d


@pytest.fixture
def three(tmp_path):
    step_big = _record("sframe-step", HOST, BIG, 3, 7, 4, "big")
    step_small = _record("sframe-step", HOST, SMALL, 2, 5, 9, "small")
    fp_only_a = _record("fp-step", SID, None, 1, 1, 2, "unshrunk")  # no example: no reproducer
    fp_b = _record("fp-step", SID, SMALL, 4, 4, 3, "fp small")
    other = _record("sframe-no-fre", SID, BIG, 1, 2, 1, "other")
    a = _write(tmp_path / "a", "static", (0, 10), [step_big, fp_only_a], budget=60.0, toolchains=("host",),
               linkers=("bfd",), programs=20, builds=25, seeds_done=10, elapsed=59.94, instructions=1000,
               object_instructions=900, per_toolchain=Counter({"host": 20}), per_linker=Counter({"bfd": 20}),
               expected=Counter({"fp-prologue-ip": 5, "unsynthesizable": 1}))
    b = _write(tmp_path / "b", "static", (10, 20), [step_small, fp_b, other], budget=30.0, toolchains=("sid", "host"),
               linkers=("lld", "bfd"), programs=7, builds=9, seeds_done=3, elapsed=30.02, instructions=500,
               per_toolchain=Counter({"sid": 4, "host": 3}), per_linker=Counter({"lld": 7}),
               expected=Counter({"fp-prologue-ip": 2, "fp-drap-cfa": 4}))
    c = _write(tmp_path / "c", "live", (0, 10), [], budget=100.0, toolchains=("trixie",), linkers=("mold",),
               programs=4, builds=4, seeds_done=1, elapsed=100.0, stacks=80, vdso_stacks=6, perf_compared=900,
               perf_skipped=Counter({"no deferred callchains": 1}))
    return a, b, c, (step_big, step_small, fp_only_a, fp_b, other)


def test_merge_sums_the_counts_and_joins_the_matrix(three):
    a, b, c, _ = three
    m = merge([a, b, c])
    assert {k: m[k] for k in m if k != "signatures"} == {
        "mode": "live+static", "merged": [str(a), str(b), str(c)], "seeds": [(0, 10), (10, 20)], "budget": 190.0,
        "toolchains": ["host", "sid", "trixie"], "linkers": ["bfd", "lld", "mold"], "programs": 31, "builds": 38,
        "seeds_done": 14, "elapsed": 189.9, "instructions": 1500, "object_instructions": 900, "stacks": 80,
        "vdso_stacks": 6, "perf_compared": 900, "perf_skipped": {"no deferred callchains": 1},
        "per_toolchain": {"host": 23, "sid": 4}, "per_linker": {"bfd": 20, "lld": 7},
        "expected": {"fp-prologue-ip": 7, "unsynthesizable": 1, "fp-drap-cfa": 4}}


def test_each_signature_once_with_its_counts_summed_and_its_smallest_reproducer(three):
    a, b, c, (step_big, step_small, fp_only_a, fp_b, other) = three
    m = merge([a, b, c])
    by = {s["signature"]["key"]: s for s in m["signatures"]}
    assert [s["signature"]["key"] for s in m["signatures"]] == sorted(by)
    assert len(by) == 3
    step = by[step_big.signature.key]
    assert (step["programs"], step["occurrences"]) == (5, 12)
    # b's program is the smaller (1 function against 3): its reproducer, size, message, shrink steps, seed
    assert (step["reproducer"], step["size"]["score"], step["message"], step["shrink_steps"], step["first_seed"]) == (
        step_small.signature.id, SMALL.size, "small", 90, 9)
    fp = by[fp_b.signature.key]
    assert (fp["programs"], fp["occurrences"], fp["reproducer"], fp["message"]) == (5, 5, fp_b.signature.id, "fp small")
    assert by[other.signature.key]["programs"] == 1


def test_the_bigger_one_second_does_not_replace_the_smaller(three, tmp_path):
    a, b, _, (step_big, step_small, *_) = three
    m = merge([b, a], tmp_path / "out")
    step = next(s for s in m["signatures"] if s["signature"]["key"] == step_small.signature.key)
    assert (step["reproducer"], step["message"], step["programs"]) == (step_small.signature.id, "small", 5)
    assert (tmp_path / "out" / step_small.signature.id / "from").read_text() == str(b)


def test_the_merged_directory_holds_each_kept_reproducer_and_its_campaign_json(three, tmp_path):
    a, b, c, (step_big, step_small, fp_only_a, fp_b, other) = three
    out = tmp_path / "out"
    (out / step_small.signature.id).mkdir(parents=True)
    (out / step_small.signature.id / "stale").write_text("an earlier merge's")
    m = merge([a, b, c], out)
    assert load_campaign(out) == json.loads(json.dumps(m))
    kept = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert kept == sorted([step_small.signature.id, fp_b.signature.id, other.signature.id])
    assert not (out / step_small.signature.id / "stale").exists()  # replaced, not mixed
    for rid, src in ((step_small.signature.id, b), (fp_b.signature.id, b), (other.signature.id, b)):
        assert (out / rid / "from").read_text() == str(src)
    assert step_big.signature.id == step_small.signature.id  # one signature: b's smaller one was copied


def test_merging_into_one_of_the_inputs_keeps_its_reproducers(three):
    a, b, _, (_, step_small, *_) = three
    merge([a, b], b)
    assert (b / step_small.signature.id / "from").read_text() == str(b)
    assert load_campaign(b)["programs"] == 27


def test_a_directory_that_is_no_campaigns_is_an_error_naming_it(three, tmp_path, capsys):
    a, *_ = three
    with pytest.raises(CampaignError, match=f"^{tmp_path}: not a campaign result directory \\(no campaign.json\\)$"):
        merge([a, tmp_path])
    (tmp_path / CAMPAIGN_JSON).write_text("{")
    with pytest.raises(CampaignError, match="campaign.json: not JSON"):
        merge([tmp_path])
    assert main(["fuzz", "merge", str(a), str(tmp_path / "nowhere")]) == 2


def test_a_campaigns_json_names_each_signatures_counts_size_and_reproducer(three):
    a, _, _, (step_big, _, fp_only_a, *_) = three
    sigs = {s["signature"]["key"]: s for s in load_campaign(a)["signatures"]}
    assert sigs[step_big.signature.key] == {
        "signature": step_big.signature.to_json(), "programs": 3, "occurrences": 7, "first_seed": 4,
        "shrink_steps": 40, "shrunk": True, "reproducer": step_big.signature.id,
        "size": {"functions": 3, "features": ["alloca"], "shape": BIG.describe(), "score": BIG.size},
        "message": "big"}
    assert sigs[fp_only_a.signature.key] == {
        "signature": fp_only_a.signature.to_json(), "programs": 1, "occurrences": 1, "first_seed": 2,
        "shrink_steps": 20, "shrunk": False, "reproducer": None, "size": None, "message": None}
    # written as a campaign writes it: one space of indent
    assert (a / CAMPAIGN_JSON).read_text().startswith('{\n "mode": "static",\n "seeds": [\n  0,')


def test_of_two_reproducers_of_one_size_the_first_is_kept(tmp_path):
    first = _record("sframe-step", HOST, SMALL, 1, 1, 1, "first")
    second = _record("sframe-step", HOST, Shape((Func("nofp"),)), 1, 1, 2, "second")
    assert first.signature == second.signature and Shape((Func("nofp"),)).size == SMALL.size
    counts = dict(budget=1.0, toolchains=("host",), linkers=("bfd",))
    a = _write(tmp_path / "a", "static", (0, 1), [first], **counts)
    b = _write(tmp_path / "b", "static", (1, 2), [second], **counts)
    out = tmp_path / "deep" / "er" / "out"  # made with its parents
    (s,) = merge([a, b], out)["signatures"]
    assert (s["message"], s["first_seed"], s["programs"]) == ("first", 1, 2)
    assert (out / first.signature.id / "from").read_text() == str(a)
    assert (out / CAMPAIGN_JSON).read_text().startswith('{\n "mode": "static",')


def test_a_campaign_json_without_the_later_counts_merges_as_0(three):
    """campaign.json written before "instructions", "stacks" and "expected" were counted."""
    a, b, _, _ = three
    old = json.loads((a / CAMPAIGN_JSON).read_text())
    for key in ("instructions", "stacks", "expected"):
        del old[key]
    (a / CAMPAIGN_JSON).write_text(json.dumps(old))
    m = merge([a, b])
    assert (m["instructions"], m["stacks"], m["expected"]) == (500, 0, {"fp-prologue-ip": 2, "fp-drap-cfa": 4})


def test_the_summary_line_says_what_live_checked(three):
    """The vDSO's stacks, Debian perf's comparisons and why perf did not run are in the line."""
    from harness.report.fuzz import format_campaign

    _, _, c, _ = three
    first = format_campaign(load_campaign(c)).splitlines()[0]
    assert "80 stacks checked in a guest (6 in the vDSO)" in first
    assert "900 of Debian perf's deferred callchains against our unwinder" in first
    assert "Debian's perf oracle skipped on 1 program(s): no deferred callchains" in first
