"""A matrix's table (``harness matrix``): scenarios x cells, each cell's stacks, failed stacks and
the causes that explained its divergences; as text for the terminal and as one HTML page
(``report.html`` over every cell, linking each cell's own run report).  Input: ``matrix.json``
as :meth:`harness.matrix.MatrixResult.to_json` writes it."""

from __future__ import annotations

from pathlib import Path

import jinja2

__all__ = ["format_matrix", "matrix_rows", "write_matrix_html"]

_env = jinja2.Environment(loader=jinja2.PackageLoader("harness.report", "templates"),
                          autoescape=jinja2.select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    return [line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def _scenario(cell: dict, name: str) -> dict | None:
    for s in (cell.get("summary") or {}).get("scenarios", []):
        if s["name"] == name:
            return s
    return None


def _cell_text(s: dict | None, cell: dict) -> str:
    if s is None:
        return "-" if cell.get("summary") else "no run"
    text = f"{s['stacks']}/{s['failed_stacks']}"
    if s.get("errors"):
        text += " err"
    return text


def matrix_rows(m: dict) -> tuple[list[str], list[list[str]]]:
    """The table: a row per scenario, a column per cell, ``STACKS/FAILED``; a row of causes
    (their divergences over the scenarios) and of exit codes."""
    cells = m["cells"]
    head = ["scenario", *(c["name"] for c in cells)]
    rows = [[sc, *(_cell_text(_scenario(c, sc), c) for c in cells)] for sc in m["scenarios"]]
    causes = []
    for c in cells:
        total: dict[str, int] = {}
        for s in (c.get("summary") or {}).get("scenarios", []):
            for cause, n in s.get("causes", {}).items():
                total[cause] = total.get(cause, 0) + n
        causes.append(len(total))
    rows.append(["causes (kinds)", *(str(n) for n in causes)])
    rows.append(["exit", *("-" if c["exit_code"] is None else str(c["exit_code"]) for c in cells)])
    return head, rows


def format_matrix(m: dict, out: str | None = None) -> str:
    head, rows = matrix_rows(m)
    lines = [f"matrix: {len(m['cells'])} cells x {len(m['scenarios'])} scenarios (stacks/failed stacks per cell)",
             *table(head, rows)]
    causes: dict[str, dict[str, int]] = {}
    for c in m["cells"]:
        for s in (c.get("summary") or {}).get("scenarios", []):
            for cause, n in s.get("causes", {}).items():
                causes.setdefault(cause, {})[c["name"]] = causes.get(cause, {}).get(c["name"], 0) + n
    if causes:
        lines.append("")
        lines.append("divergences by cause:")
        lines += table(["cause", *(c["name"] for c in m["cells"])],
                       [[cause, *(str(per.get(c["name"], "")) for c in m["cells"])]
                        for cause, per in sorted(causes.items())])
    for c in m["cells"]:
        outcome = (c.get("summary") or {}).get("outcome") or c.get("failed") or "no summary"
        lines.append(f"{c['name']}: exit {c['exit_code'] if c['exit_code'] is not None else '-'}: {outcome}")
    if out:
        lines.append(f"a run directory per cell, matrix.json and report.html in {out}")
    return "\n".join(lines)


def _bad(row: str, value: str) -> bool:
    """A cell of the table to mark: a scenario with failed stacks, none checked, errors, or no run;
    an exit code other than 0."""
    if row == "exit":
        return value != "0"
    if row.startswith("causes"):
        return False
    if "/" not in value:
        return value != "-"
    stacks, failed = value.split()[0].split("/")
    return stacks == "0" or failed != "0" or value.endswith(" err")


def write_matrix_html(m: dict, out: Path) -> Path:
    head, rows = matrix_rows(m)
    marked = [[(v, _bad(r[0], v)) for v in r[1:]] for r in rows]
    page = _env.get_template("matrix.html.j2").render(m=m, head=head, rows=rows, marked=marked,
                                                      title=f"unwind harness matrix: {out.name}")
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
