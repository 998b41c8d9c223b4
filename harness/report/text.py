"""Plain-text rendering of scenario results and stack records: the summary table, the totals per
cause, and a failing (or explained) stack with its frame lists side by side.

Renderers take structured results (:class:`harness.scenarios.result.Result`) and the JSONL stack
records, never engine internals; the CLI chooses and prints.
"""

from __future__ import annotations

import collections
from pathlib import Path

from ..oracles.base import ORACLES, load_all
from ..verdicts.causes import CAUSES

__all__ = ["format_table", "scenario_rows", "scenario_row", "cause_table", "side_by_side", "stack_columns", "qemu_line",
           "stack_failures", "run_lines"]


def format_table(rows: list[dict]) -> str:
    if not rows:
        return "(no scenarios)"
    cols = list(dict.fromkeys(c for r in rows for c in r))
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    out = ["  ".join(c.ljust(widths[c]) for c in cols).rstrip(), "  ".join("-" * widths[c] for c in cols)]
    out += ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in cols).rstrip() for r in rows]
    return "\n".join(out)


def _oracle_order(names) -> list[str]:
    load_all()
    known = [n for n in ORACLES if n in names]
    return known + sorted(set(names) - set(known))


def scenario_rows(results) -> list[dict]:
    """One summary row per result, with the same oracle columns in every row."""
    oracles = _oracle_order({o for r in results for o in r.oracles})
    return [scenario_row(r, oracles) for r in results]


def scenario_row(r, oracles: list[str] | None = None) -> dict:
    """One summary row: per oracle ``agree/explained`` of the stacks it judged ('-': it did not
    apply to this program)."""
    row = {"scenario": r.scenario.name, "stacks": r.stacks, "tasks": len(r.tasks),
           # the program's own stacks, and '!' when fewer requests landed on it than asked
           "own": f"{r.own_stacks}{'!' if r.short else ''}"}
    for o in oracles if oracles is not None else _oracle_order(r.oracles):
        row[f"{o} agree/expl"] = f"{r.agreed(o)}/{r.explained(o)}" if o in r.oracles else "-"
    row["causes"] = sum(r.causes.values())
    row["failures"] = r.failed_stacks + len(r.problems)
    row["on program"] = f"{r.sampled}/{sum(r.requests.values()) // max(1, r.scenario.tracers)}"
    row["req 0/1/-EINVAL"] = f"{r.requests[0]}/{r.requests[1]}/{r.requests[-22]}"
    row["callbacks"] = r.callbacks
    row["cookies"] = len(r.cookies)
    row["walks saved"] = r.callbacks - r.walks
    row["at exit"] = r.at_exit
    row["stops/trace"] = f"{r.stops / r.stacks:.1f}" if r.stacks else "-"
    row["invariants"] = "ok" if not r.invariant_violations else len(r.invariant_violations)
    return row


def cause_table(results) -> str:
    """Divergences each cause explained, per scenario and in all (causes in registry order)."""
    totals: collections.Counter = collections.Counter()
    for r in results:
        totals.update(r.causes)
    if not totals:
        return "(no divergence)"
    rows = []
    for name in [c for c in CAUSES if totals[c]]:
        row = {"cause": name, "total": totals[name]}
        for r in results:
            if r.causes[name]:
                row[r.scenario.name] = r.causes[name]
        rows.append(row)
    return format_table(rows)


def cross_table(crossed: collections.Counter) -> str:
    """Per cause, its divergences cross-examined: confirmed, unverifiable, contradicted."""
    rows = []
    for name in dict.fromkeys(c for c, _ in sorted(crossed)):
        row = {"cause": name}
        for outcome in ("confirmed", "unverifiable", "contradicted"):
            row[outcome] = crossed[(name, outcome)]
        rows.append(row)
    rows.append({"cause": "total", **{o: sum(n for (_, k), n in crossed.items() if k == o)
                                      for o in ("confirmed", "unverifiable", "contradicted")}})
    return format_table(rows)


def _frame(f) -> str:
    addr, module, sym = f
    where = sym or f"{addr:#x}"
    return f"{where} ({module})" if module else where


def side_by_side(rec: dict, unwinder: str, oracle: str, verdict: dict | None = None) -> str:
    """The two frame lists of one pair of a stack record, frame by frame, differences marked
    ``!!``, and each divergence's text under them."""
    got = rec["frames"].get(unwinder, [])
    want = rec["frames"].get(oracle, [])
    head = (f"{rec.get('scenario', '')} pid {rec['task']} cookie {rec.get('cookie', 0):#x} at {rec.get('point', '')}: "
            f"{unwinder} vs {oracle}")
    lines = [head.strip()]
    width = max([len(_frame(f)) for f in got] + [len(unwinder)]) + 2
    lines.append(f"       {unwinder:{width}} {oracle}")
    for i in range(max(len(got), len(want))):
        a = got[i] if i < len(got) else None
        b = want[i] if i < len(want) else None
        mark = "  " if a is not None and b is not None and a[0] == b[0] else "!!"
        lines.append(f"  {mark} #{i:<3} {_frame(a) if a else '':{width}} {_frame(b) if b else ''}")
    stops = rec.get("stops", {})
    if stops:
        lines.append(f"  {unwinder} stopped: {stops.get(unwinder, '?')}; {oracle} stopped: {stops.get(oracle, '?')}")
    for d in (verdict or {}).get("divergences", []):
        lines.append(f"  - [{d['cause'] or 'UNEXPLAINED'}] {d['text']}")
    return "\n".join(lines)


def stack_columns(rec: dict, width: int = 48) -> str:
    """Every frame list of a stack record side by side (each unwinder, then each oracle), frame by
    frame as :func:`side_by_side` draws a pair, ``!!`` where the lists do not all agree; then
    where each walk stopped, and each pair's verdict with its divergences and causes."""
    names = list(rec["frames"])
    cols = [rec["frames"][n] for n in names]
    widths = [min(width, max([len(f[2] or hex(f[0])) for f in c] + [len(_frame(c[0])) if c else 0, len(n)])) + 2
              for n, c in zip(names, cols, strict=True)]

    def cell(text: str, w: int) -> str:
        return (text if len(text) <= w - 2 else text[: w - 3] + "~").ljust(w)

    head = (f"{rec.get('scenario', '')} pid {rec['task']} {rec.get('comm', '')} cookie {rec.get('cookie', 0):#x} "
            f"at {rec.get('point', '')}")
    lines = [" ".join(head.split())]
    regs = rec.get("regs")
    if regs:
        lines.append("  regs: " + " ".join(f"{k}={v:#x}" for k, v in regs.items()))
    lines.append("       " + "".join(cell(n, w) for n, w in zip(names, widths, strict=True)).rstrip())
    def short(col: list, i: int) -> str:
        # The module once per run of frames in it: the columns stay narrow.
        if i >= len(col):
            return ""
        f = col[i]
        if i and col[i - 1][1] == f[1]:
            return f[2] or f"{f[0]:#x}"
        return _frame(f)

    for i in range(max((len(c) for c in cols), default=0)):
        row = [c[i] if i < len(c) else None for c in cols]
        addrs = {f[0] if f else None for f in row}
        mark = "  " if len(addrs) == 1 else "!!"
        text = "".join(cell(short(c, i), w) for c, w in zip(cols, widths, strict=True))
        lines.append(f"  {mark} #{i:<3}{text}".rstrip())
    for n, why in rec.get("stops", {}).items():
        lines.append(f"  {n} stopped: {why}")
    for v in rec.get("verdicts", []):
        extra = f" ({v['reason']})" if v.get("reason") else ""
        lines.append(f"  {v['unwinder']} vs {v['oracle']}: {v['verdict']}{extra}")
        for d in v.get("divergences", []):
            lines.append(f"    - [{d['cause'] or 'UNEXPLAINED'}] {d['text']}")
    return "\n".join(lines)


def stack_failures(rec: dict) -> list[str]:
    """Each failing pair of a stack record, side by side (or its reason)."""
    out = []
    for v in rec["verdicts"]:
        if v["verdict"] != "failure":
            continue
        if v["oracle"] in rec["frames"] and v["divergences"]:
            out.append(side_by_side(rec, v["unwinder"], v["oracle"], v))
        else:
            out.append(f"{rec.get('scenario', '')} pid {rec['task']}: {v['unwinder']} vs {v['oracle']}: "
                       f"{v.get('reason') or '; '.join(d['text'] for d in v['divergences'])}")
    return out


def _relative(path, out) -> str:
    try:
        return str(Path(path).relative_to(out))
    except ValueError:
        return str(path)


def qemu_line(q) -> str:
    """One line naming the QEMU a session runs (:class:`harness.images.qemu.Qemu`)."""
    return f"qemu {q.name}: {q.banner}" + (f" [{q.package}]" if q.package else "") + f" ({q.why})"


def run_lines(results, out) -> list[str]:
    """What ``harness run`` prints after its scenarios: the summary table, the divergences per
    cause, then per scenario its oracles, what was not checked, its first failures, problems and
    notes (``out``: the run directory)."""
    lines = [format_table(scenario_rows(results)),
             "\ndivergences by cause (each proven at its stop; `harness check LOG` lists them again):",
             cause_table(results)]
    crossed = collections.Counter()
    for r in results:
        crossed.update(r.cross)
    if crossed:
        lines += ["\ncauses cross-examined by the toolchain's own tools (readelf, objdump):", cross_table(crossed)]
    for r in results:
        lines.append(f"{r.scenario.name}: oracles {', '.join(r.oracles)}")
        if r.own_stacks and "cfi" in r.oracles:
            lines.append(f"{r.scenario.name}: the CFI oracle stepped through {r.own_frames_checked} frame(s) of the "
                         f"program's own text" + ("" if r.own_frames_checked else
                                                  ": none of its own frames was checked by CFI"))
        if r.program_output:
            lines.append(f"{r.scenario.name}: program output in {out / r.program_output}")
        for (oracle, reason), n in sorted(r.not_checked.items()):
            lines.append(f"{r.scenario.name}: {oracle} did not check {n} stack(s): {reason}")
        for rec in r.failures[:5]:
            lines += [f"\nFAILURE {text}" for text in stack_failures(rec)]
        if r.kept_snapshots:
            kept = ", ".join(_relative(p, out) for p in r.kept_snapshots[:3])
            lines.append(f"{r.scenario.name}: the snapshots of {len(r.kept_snapshots)} failing stack(s), to replay "
                         f"without a guest (docs/running.md): {kept}"
                         + (" ..." if len(r.kept_snapshots) > 3 else ""))
        lines += [f"\n{r.scenario.name}: {f}" for f in r.problems[:5] + r.errors[:5] + r.invariant_violations[:5]]
        lines += [f"{r.scenario.name}: note: {note}" for note in r.notes]
        if r.output_tail and (r.short or not r.own_stacks):
            lines.append(f"{r.scenario.name}: the program's output ends:")
            lines += [f"    {line}" for line in r.output_tail]
    return lines
