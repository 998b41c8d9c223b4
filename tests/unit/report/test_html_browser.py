"""report.html in a real headless Chromium (Debian's ``chromium``; ``./dev`` installs it), on the
run directory trimmed from a real run (tests/data/run-small): the page loads with no
JavaScript error, shows the summary, draws a failure's and a divergence's stacks side by side with
the evidence's decoded instructions, draws the flame graph and zooms it, filters and draws a
timeline.  Screenshots go to the test's tmp directory (their paths are printed: ``pytest -s``)."""

from __future__ import annotations

import shutil

import pytest

from harness.cli import main
from tests.support.browser import Browser, chromium
from tests.support.gating import require
from tests.support.paths import TEST_DATA

DATA = TEST_DATA / "run-small"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    require(chromium() is not None, "chromium is not installed (./dev installs it)")
    d = tmp_path_factory.mktemp("report") / "run"
    shutil.copytree(DATA, d)
    assert main(["report", str(d)]) == 0
    with Browser(size=(1400, 1000)) as b:
        b.shots = d.parent
        b.url = (d / "report.html").as_uri()
        b.load_seconds = b.open(b.url)
        yield b


def _shot(b, name):
    path = b.screenshot(b.shots / name)
    print(f"screenshot: {path}")
    return path


def test_error_capture_sees_an_uncaught_exception(tmp_path):
    """The check below means something: a page that throws is caught."""
    require(chromium() is not None, "chromium is not installed (./dev installs it)")
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>nosuchfunction();</script><script>console.error('boom')</script></body></html>")
    with Browser() as b:
        b.open(bad.as_uri())
        errors = b.errors()
    assert any("nosuchfunction" in e for e in errors) and any("boom" in e for e in errors)


def test_page_opens_without_error_and_shows_the_summary(page):
    assert page.errors() == []
    assert page.eval("document.documentElement.getAttribute('data-ready')") is not None
    assert page.eval("document.getElementById('report-data') !== null")
    text = page.eval("document.getElementById('summary').innerText")
    for name in ("fp-syscall", "prologues", "forkexec", "recurse", "cfi", "shadow", "regs"):
        assert name in text
    assert "linux-binary-7.3.4" in page.eval("document.getElementById('facts').innerText")
    assert page.eval("document.querySelectorAll('#summary tr.badrow').length") >= 1  # forkexec's failure
    _shot(page, "summary.png")
    print(f"page load (navigate to load event): {page.load_seconds * 1000:.0f} ms")


def test_a_failure_side_by_side(page):
    page.open(page.url + "#ex-f0")
    assert page.wait_for("document.querySelector('#ex-f0 table.sbs') !== null")
    assert page.eval("document.getElementById('ex-f0').open")
    rows = page.eval("document.querySelectorAll('#ex-f0 table.sbs tr').length")
    assert rows >= 2
    assert page.eval("document.querySelectorAll('#ex-f0 table.sbs tr.first').length") == 1
    ev = page.eval("document.querySelector('#ex-f0 .evidence').innerText")
    assert "UNEXPLAINED" in ev and "shadow" in ev
    assert page.errors() == []
    _shot(page, "failure.png")


def test_a_divergence_with_its_decoded_prologue(page):
    key = page.eval("""(function () {
        var d = JSON.parse(document.getElementById('report-data').textContent).examples;
        for (var k in d) if (k[0] === 'e' && d[k].divergences.some(function (v) {
            return v.cause === 'fp-prologue-ip' && (v.evidence.code || []).length; })) return k;
        return null; })()""")
    assert key
    page.open(page.url + f"#ex-{key}")
    assert page.wait_for(f"document.querySelector('#ex-{key} table.sbs') !== null")
    heads = page.eval(f"Array.from(document.querySelectorAll('#ex-{key} table.sbs th'))"
                      ".map(function (t) { return t.innerText; })")
    assert any(h.startswith("fp ") for h in heads) and any(h.startswith("cfi ") for h in heads)
    assert page.eval(f"document.querySelectorAll('#ex-{key} table.sbs tr.first').length") == 1
    code = page.eval(f"document.querySelector('#ex-{key} pre.insns').innerText")
    assert "push" in code and "mov" in code
    assert "fp-prologue-ip" in page.eval(f"document.querySelector('#ex-{key} .evidence').innerText")
    assert page.errors() == []
    _shot(page, "divergence.png")


def test_flame_graph_draws_and_zooms(page):
    page.open(page.url + "#flames")
    n = page.wait_for("document.querySelectorAll('#flames .holder svg g.f').length")
    assert n > 3  # the first scenario's graph is open from the start
    # open forkexec's graph (parsed from the page's data when opened) and click parent_round:
    # it takes the whole width, its ancestors stay (faded), frames outside it go
    page.eval("document.querySelector('details.flame').open = false;"
              "document.querySelector('details.flame[data-scenario=\"forkexec\"]').open = true")
    sel = "details.flame[data-scenario=\"forkexec\"] .holder svg"
    frame = f"{sel} g.f[data-n=\"parent_round\"]"
    assert page.wait_for(f"document.querySelectorAll('{sel} g.f').length") > 10
    title = page.eval(f"document.querySelector('{frame} title').textContent")
    assert title.startswith("parent_round (13 stacks")
    before = page.eval(f"+document.querySelector('{frame} rect').getAttribute('width')")
    page.eval(f"document.querySelector('{frame} rect').dispatchEvent(new MouseEvent('click', {{bubbles: true}}))")
    after = page.eval(f"+document.querySelector('{frame} rect').getAttribute('width')")
    full = page.eval(f"+document.querySelector('{sel}').getAttribute('width')"
                     f" - 2 * document.querySelector('{sel}').getAttribute('data-pad')")
    assert before == pytest.approx(full * 13 / 22, abs=0.1) and after == pytest.approx(full, abs=0.1)
    assert page.eval(f"document.querySelector('{sel} g.f[data-n=\"_start\"]').style.display") == "none"
    assert page.eval(f"document.querySelector('{sel} g.f[data-n=\"main\"]').style.display") == ""
    assert page.errors() == []
    page.eval("document.getElementById('flames').scrollIntoView()")
    _shot(page, "flame.png")
    page.eval(f"document.querySelector('{sel} .reset').dispatchEvent(new MouseEvent('click', {{bubbles: true}}))")
    assert page.eval(f"+document.querySelector('{frame} rect').getAttribute('width')") == pytest.approx(before, abs=0.1)


def test_filters_and_timeline(page):
    page.open(page.url)
    page.eval("var s = document.getElementById('f-scenario'); s.value = 'recurse';"
              " s.dispatchEvent(new Event('change'))")
    shown = page.eval("Array.from(document.querySelectorAll('#summary tbody tr'))"
                      ".filter(function (r) { return !r.classList.contains('hidden'); })"
                      ".map(function (r) { return r.dataset.scenario; })")
    assert shown and set(shown) == {"recurse"}
    page.eval("""(function () { var box = document.querySelector('div.tl[data-tl="fp-syscall"]');
        var s = box.querySelector('select'); s.value = s.options[1].value;
        s.dispatchEvent(new Event('change')); })()""")
    # fp-syscall is hidden by the filter, but its timeline was drawn
    rows = page.eval("document.querySelectorAll('div.tl[data-tl=\"fp-syscall\"] .tl-body tr').length")
    assert rows >= 2
    assert page.eval("document.querySelectorAll('div.tl[data-tl=\"fp-syscall\"] .tl-body b.ev-W').length") >= 1
    page.eval("var s = document.getElementById('f-scenario'); s.value = ''; s.dispatchEvent(new Event('change'))")
    page.eval("document.querySelector('div.tl[data-tl=\"fp-syscall\"]').scrollIntoView()")
    assert page.errors() == []
    _shot(page, "timeline.png")
