"""Collapsed stacks and the SVG flame graph (harness.report.flame), on hand-made stacks and on the
trimmed real run (tests/data/run-small)."""

from __future__ import annotations

import collections
import xml.etree.ElementTree as ET

import pytest

from harness.cli import main
from harness.report.flame import MIN_FRACTION, build_tree, flame_svg, folded_lines, parse_folded, write_folded
from harness.report.run import fold_frames, frame_name, read_run
from tests.support.paths import TEST_DATA

DATA = TEST_DATA / "run-small"
SVG = "{http://www.w3.org/2000/svg}"


def test_frame_names_as_stackcollapse_perf_names_them():
    assert frame_name([0x401000, "prog", "main+0x3c"]) == "main"
    assert frame_name([0x401000, "libc.so.6", ""]) == "[libc.so.6]"
    assert frame_name([0x401000, "", ""]) == "[unknown]"
    assert frame_name([0x401000, "p", "a;b+0x1"]) == "a:b"
    frames = [[1, "p", "c+0x1"], [2, "p", "b+0x2"], [3, "p", "main+0x3"]]  # innermost first, as recorded
    assert fold_frames("my prog", frames) == ("my_prog", "main", "b", "c")


def test_folded_lines_one_per_distinct_stack_sorted_and_round_trip():
    folded = collections.Counter({("p", "main", "b"): 3, ("p", "main", "a"): 2, ("p", "main"): 1})
    lines = folded_lines(folded)
    assert lines == ["p;main 1", "p;main;a 2", "p;main;b 3"]
    assert parse_folded("\n".join(lines)) == folded


def test_tree_counts_add_up():
    folded = collections.Counter({("p", "main", "b"): 3, ("p", "main", "a"): 2, ("p", "main"): 1})
    root = build_tree(folded)
    assert root.count == 6
    main_ = root.children["p"].children["main"]
    assert main_.count == 6 and main_.children["a"].count == 2 and main_.children["b"].count == 3


def _frames(svg: str):
    root = ET.fromstring(svg)  # well-formed XML
    out = []
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "f":
            out.append((float(g.get("data-x")), float(g.get("data-w")), int(g.get("data-d")), g.get("data-n"),
                        g.find(f"{SVG}title").text, float(g.find(f"{SVG}rect").get("width"))))
    return root, out


def test_svg_widths_follow_counts_and_children_nest_in_their_parent():
    folded = collections.Counter({("p", "main", "b"): 3, ("p", "main", "a"): 1})
    root, frames = _frames(flame_svg(folded, "t"))
    by = {(d, n): (x, w, title, px) for x, w, d, n, title, px in frames}
    assert by[(0, "all")][1] == pytest.approx(1.0)
    assert by[(3, "b")][1] == pytest.approx(0.75) and by[(3, "a")][1] == pytest.approx(0.25)
    assert by[(3, "a")][0] == pytest.approx(0.0) and by[(3, "b")][0] == pytest.approx(0.25)  # siblings by name
    assert "3 stacks, 75.00%" in by[(3, "b")][2]
    width = float(root.get("width")) - 2 * float(root.get("data-pad"))
    assert by[(3, "b")][3] == pytest.approx(0.75 * width, abs=0.01)
    # deeper frames are drawn higher (root at the bottom)
    ys = {n: float(g.find(f"{SVG}rect").get("y")) for g in root.iter(f"{SVG}g") if (n := g.get("data-n"))}
    assert ys["all"] > ys["p"] > ys["main"] > ys["b"]


def test_svg_escapes_names_and_drops_slivers():
    folded = collections.Counter({("p", "<b>&\"x\""): 1, ("p", "big"): int(2 / MIN_FRACTION), ("p", "op<&>"): 4000})
    svg = flame_svg(folded, "<title>")
    _, frames = _frames(svg)  # parses: every name was escaped
    names = {n for _, _, _, n, _, _ in frames}
    assert "big" in names and "op<&>" in names and '<b>&"x"' not in names


def test_real_run_folded_files_and_flames(tmp_path):
    run = read_run(DATA)
    for s in run.scenarios:
        path = write_folded(s.folded, tmp_path / f"{s.name}.folded")
        back = parse_folded(path.read_text())
        assert sum(back.values()) == s.stacks and back == s.folded
        _, frames = _frames(flame_svg(s.folded, s.name))
        assert frames[0][3] == "all" and frames[0][1] == pytest.approx(1.0)
    rec = next(s for s in run.scenarios if s.name == "recurse")
    assert max(len(k) for k in rec.folded) > 500  # the 510-frame stacks, every frame kept


def test_cli_writes_folded_beside_the_logs(tmp_path):
    import shutil

    d = tmp_path / "run"
    shutil.copytree(DATA, d)
    assert main(["report", str(d), "--format", "folded"]) == 0
    assert sorted(p.name for p in d.glob("*.folded")) == sorted(p.name[:-6] + ".folded" for p in DATA.glob("*.jsonl"))
    assert not (d / "report.html").exists()
    assert main(["report", str(d)]) == 0
    assert 'class=\\"flamegraph' in (d / "report.html").read_text()  # in the page's data, escaped
