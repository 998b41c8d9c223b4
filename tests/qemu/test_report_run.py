"""harness run --report on a real guest: a fresh run directory gets report.html and the collapsed
stacks beside its logs, and the page opens in headless Chromium with no JavaScript error."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.report.flame import parse_folded
from tests.support.browser import Browser, chromium
from tests.support.gating import require

pytestmark = pytest.mark.qemu


def test_run_with_report(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", "fp-syscall", "--samples", "12", "--out", str(out), "--report"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    end = json.loads((out / "fp-syscall.jsonl").read_text().splitlines()[-1])
    assert end["ev"] == "end" and end["reason"] == "complete"
    assert sum(parse_folded((out / "fp-syscall.folded").read_text()).values()) == end["stacks"]
    page = out / "report.html"
    assert f"{page} (" in printed
    require(chromium() is not None, "chromium is not installed (./dev installs it)")
    with Browser() as b:
        b.open(page.as_uri())
        assert b.errors() == []
        assert "fp-syscall" in b.eval("document.getElementById('summary').innerText")
        assert b.wait_for("document.querySelectorAll('#flames .holder svg g.f').length") > 3
        print(f"screenshot: {b.screenshot(tmp_path / 'report.png')}")
