"""The text of ``harness perf``: a :class:`~harness.perf.oracle.PerfReport` (perfcc captures) and a
:class:`~harness.perf.debian.DebianReport` (Debian's perf) as lines.

The reports are taken duck-typed, not imported: the report floor sits below the drivers (``perf``
among them), see pyproject.toml's ``[tool.importlinter]``.  Each report gives its figures as
``rows()``, (label, value) pairs in print order, which the tables here align.
"""

from __future__ import annotations

__all__ = ["debian_lines", "debian_table", "nothing_compared", "perf_lines", "perf_table"]


def _aligned(rows: list[tuple[str, object]]) -> str:
    """One line per (label, value), the values in one column."""
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def perf_table(report) -> str:
    """A perfcc capture's figures (``PerfReport.rows()``), one aligned line each."""
    return _aligned(report.rows())


def debian_table(report) -> str:
    """The comparison of Debian's perf with ours (``DebianReport.rows()``), one aligned line each."""
    return _aligned(report.rows())


def nothing_compared(report) -> bool:
    """No sample of the capture (nor of its deferred records) could be compared."""
    d = report.deferred
    return report.compared == 0 and (d is None or d.compared == 0)


def perf_lines(report, examples: int, header: str) -> list[str]:
    """The header, the table, an example of each expected difference (``examples`` > 0), the first
    failures, the deferred records' failures and violations, the notes."""
    lines = [header, perf_table(report), *_examples(report.examples, examples, "")]
    lines += _first_five(report.failures, "FAILURE", " failures")
    d = report.deferred
    if d is not None:
        lines += _examples(d.examples, examples, "deferred ")
        lines += [f"\nDEFERRED FAILURE: {f}" for f in d.failures[:5]]
        lines += [f"\nDEFERRED VIOLATION: {v}" for v in d.violations[:10]]
    lines += [f"note: {n}" for n in report.notes]
    if nothing_compared(report):
        lines.append("\nnothing was compared: no sample had a user callchain and user registers")
    return lines


def debian_lines(report, examples: int, header: str) -> list[str]:
    """One scenario's (or the totals') comparison of Debian's perf script with ours."""
    lines = [header, debian_table(report), *_examples(report.examples, examples, "")]
    return lines + _first_five(report.unexplained, "UNEXPLAINED", "")


def _examples(found: dict, examples: int, what: str) -> list[str]:
    """An example of each expected difference (``examples`` > 0), by kind."""
    return [f"\nexample of {what}'{kind}':\n{text}" for kind, text in sorted(found.items())] if examples > 0 else []


def _first_five(items: list, label: str, more: str) -> list[str]:
    """The first five ``items`` under ``label``, and how many more there are."""
    lines = [f"\n{label}: {x}" for x in items[:5]]
    if len(items) > 5:
        lines.append(f"\n... and {len(items) - 5} more{more}")
    return lines
