"""The HTML report of a run directory: one self-contained page (inline CSS and JS, nothing fetched
when it is viewed) drawn with jinja2 from :class:`harness.report.run.RunData`.

What stays small on a run of thousands of stacks: agreeing stacks are counted, never drawn; the
divergences are grouped by cause with a few examples per (scenario, oracle, cause) and the
failures up to :data:`harness.report.run.FAILURES_KEPT` per scenario, and these examples, like
the per-task timelines, travel as one compact JSON document that the page's script draws from
only when a reader opens them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import jinja2

from .run import TIMELINE_COLUMNS, RunData, compact_timeline

__all__ = ["render_html", "write_html", "REPORT_NAME"]

log = logging.getLogger(__name__)

REPORT_NAME = "report.html"

_env = jinja2.Environment(loader=jinja2.PackageLoader("harness.report", "templates"),
                          autoescape=jinja2.select_autoescape(["html", "j2"]),
                          trim_blocks=True, lstrip_blocks=True)


def _facts(facts: dict) -> list[tuple[str, str]]:
    k = facts.get("kernel") or {}
    rows = [
        ("kernel", f"{k.get('package', '?')}={k.get('version', '?')}" if k else "?"),
        ("kernel release", facts.get("release", "")),
        ("kernel sha256", k.get("sha256", "")),
        ("QEMU", facts.get("qemu", "")),
        ("QEMU image", (facts.get("qemu_image") or {}).get("why", "")),
        ("accelerator", facts.get("accel", "") + (f" ({facts['accel_why']})" if facts.get("accel_why") else "")),
        ("CPUs", str(facts.get("smp", ""))),
        ("PTI", str(facts.get("pti", ""))),
        ("transport", facts.get("transport", "")),
        ("Python", facts.get("python", "")),
    ]
    progs = facts.get("programs") or {}
    tcs = sorted({p.get("toolchain", "") for p in progs.values()} - {""})
    if tcs:
        rows.append(("toolchains", ", ".join(tcs)))
    missing = facts.get("missing_stop_points") or {}
    if missing:
        rows.append(("missing stop points", ", ".join(f"{a}: {b}" for a, b in missing.items())))
    return [(a, b) for a, b in rows if b]


def _json_for_script(data) -> str:
    """JSON that is safe inside <script type="application/json">: no '</' can close the element."""
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")


def render_html(run: RunData, flames: dict[str, str] | None = None) -> str:
    """The page.  ``flames`` maps a scenario to its flame graph's SVG (:mod:`harness.report.flame`)."""
    examples: dict[str, dict] = {}
    failures = []  # (scenario, example id, example)
    groups = {}  # cause -> [(scenario, oracle, count, [(id, example)])]
    for s in run.scenarios:
        for ex in s.failures:
            key = f"f{len(failures)}"
            examples[key] = ex.as_json()
            failures.append((s.name, key, ex))
        for (oracle, cause), kept in s.examples.items():
            ids = []
            for ex in kept:
                key = f"e{len(examples) - len(failures)}"
                examples[key] = ex.as_json()
                ids.append((key, ex))
            groups.setdefault(cause, []).append((s.name, oracle, s.causes[(oracle, cause)], ids))
    totals = run.causes
    cause_order = sorted(groups, key=lambda c: (-totals[c], c))
    timelines = {s.name: {str(t): compact_timeline(v) for t, v in s.timelines.items()} for s in run.scenarios}
    # the flame graphs travel as strings, parsed only when their <details> opens
    data = {"examples": examples, "timelines": timelines, "timeline_columns": TIMELINE_COLUMNS,
            "flames": flames or {}}
    failed = sum(s.failed_pairs for s in run.scenarios)
    cut = [s.name for s in run.scenarios if not s.complete]
    return _env.get_template("report.html.j2").render(
        run=run, facts=_facts(run.facts), programs=sorted((run.facts.get("programs") or {}).items()),
        oracles=run.oracles, verdicts=("agree", "explained", "failure", "not checked"),
        totals=totals, cause_order=cause_order, groups=groups, failures=failures, failed=failed,
        cut=cut, flames=flames or {}, data=_json_for_script(data),
        title=f"unwind harness: {run.path.name}")


def write_html(run: RunData, out: Path | None = None, flames: dict[str, str] | None = None) -> Path:
    out = Path(out) if out else run.path / REPORT_NAME
    out.write_text(render_html(run, flames), encoding="utf-8")
    log.info("wrote %s (%d bytes)", out, out.stat().st_size)
    return out
