"""KTAP version 1 (Documentation/dev-tools/ktap.rst) for kernel CI systems: KernelCI, LKFT and
``kunit.py parse`` read it.

Rendered from the same documents the run directory keeps (``summary.json``: :func:`run_ktap`;
kernel-diff's ``summary.json``: :func:`kernel_diff_ktap`), so a run's KTAP can be written again
from its directory later.  The shape:

    KTAP version 1
    # harness run: kernel ... (kvm), 2 scenarios
    1..2
        KTAP version 1
        # Subtest: fp-syscall
        # stacks 300 (own 300), failed 0; 12.3 s
        # causes: fp-frameless-function 301
        1..3
        ok 1 cfi # explained 300
        ok 2 shadow # agree 300
        ok 3 regs # agree 300
    ok 1 fp-syscall
    ...

One test per scenario, one subtest per oracle: ``not ok`` where the oracle has a failing stack,
``ok ... # SKIP REASON`` where it checked none (every stack not checked, with the reasons), else
``ok`` with its verdict counts.  A scenario is ``not ok`` where the run's exit-code contract calls
it a failure (a failing stack, a delivery problem, an invariant violation, no stack delivered)
or an infrastructure error (its first line follows as a diagnostic).  Names keep to what
``kunit_parser`` reads: no ``#`` in them.
"""

from __future__ import annotations

import re

__all__ = ["KTAP_VERSION", "fuzz_ktap", "kernel_diff_doc", "kernel_diff_ktap", "matrix_ktap", "run_doc", "run_ktap"]

KTAP_VERSION = 1
INDENT = "    "
DIAGNOSTICS_SHOWN = 10  # problems, violations or differences per test; the logs have them all


def _name(text: str) -> str:
    """A test name: no ``#`` (it starts a directive), no line breaks, not empty."""
    return re.sub(r"[#\s]+", " ", str(text)).strip() or "unnamed"


def _diag(text: str) -> str:
    return "# " + " ".join(str(text).split())


def _counts(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items())


def _result(ok: bool, n: int, name: str, directive: str = "") -> str:
    return f"{'ok' if ok else 'not ok'} {n} {_name(name)}" + (f" # {directive}" if directive else "")


def _oracle_lines(sc: dict, i: int, oracle: str) -> list[str]:
    verdicts = sc.get("pairs", {}).get(oracle, {})
    reasons = [nc for nc in sc.get("not_checked", []) if nc.get("oracle") == oracle]
    failed = verdicts.get("failure", 0)
    checked = sum(n for v, n in verdicts.items() if v != "not checked")
    lines = [_diag(f"{r['stacks']} not checked: {r['reason']}") for r in reasons]
    if failed:
        return [*lines, _result(False, i, oracle, _counts(verdicts))]
    if not checked:
        why = "; ".join(f"{r['reason']} ({r['stacks']} stacks)" for r in reasons) or "no stack was checked"
        return [*lines, _result(True, i, oracle, f"SKIP {' '.join(why.split())}")]
    return [*lines, _result(True, i, oracle, _counts(verdicts))]


def _scenario_failed(sc: dict) -> bool:
    return bool(sc.get("errors") or sc.get("failed_stacks") or sc.get("problems")
                or sc.get("invariant_violations") or not sc.get("stacks"))


def _scenario(sc: dict, n: int) -> list[str]:
    body = [f"KTAP version {KTAP_VERSION}", f"# Subtest: {_name(sc['name'])}"]
    if sc.get("description"):
        body.append(_diag(sc["description"]))
    body.append(_diag(f"stacks {sc.get('stacks', 0)} (own {sc.get('own_stacks', 0)}), failed "
                      f"{sc.get('failed_stacks', 0)}; {sc.get('seconds', 0):.1f} s"))
    if sc.get("causes"):
        body.append(_diag("causes: " + _counts(sc["causes"])))
    for what in ("errors", "problems", "invariant_violations"):
        items = sc.get(what) or []
        for text in items[:DIAGNOSTICS_SHOWN]:
            first = str(text).splitlines()[0] if text else ""
            body.append(_diag(f"{what.rstrip('s').replace('_', ' ')}: {first}"))
        if len(items) > DIAGNOSTICS_SHOWN:
            more = len(items) - DIAGNOSTICS_SHOWN
            body.append(_diag(f"... and {more} more {what.replace('_', ' ')} in {sc.get('log')}"))
    if sc.get("shortfall"):
        body.append(_diag(sc["shortfall"]))
    oracles = list(sc.get("oracles") or [])
    if not oracles:  # nothing was checked (the guest was lost first): a test case of its own
        return [*body[2:], _result(not _scenario_failed(sc), n, sc["name"])]
    body.append(f"1..{len(oracles) + 1}")
    for i, oracle in enumerate(oracles, 1):
        body += _oracle_lines(sc, i, oracle)
    body.append(_delivery(sc, len(oracles) + 1))
    return [*(INDENT + ln for ln in body), _result(not _scenario_failed(sc), n, sc["name"])]


def _delivery(sc: dict, i: int) -> str:
    """The subtest for what no oracle judges: the stacks were delivered, every delivery was
    well-formed, the invariants held, the guest stayed up."""
    bad = [f"{len(sc[k])} {k.replace('_', ' ')}" for k in ("errors", "problems", "invariant_violations")
           if sc.get(k)]
    if not sc.get("stacks"):
        bad.append("no stack was delivered")
    if bad:
        return _result(False, i, "delivery", ", ".join(bad))
    return _result(True, i, "delivery", f"stacks {sc['stacks']}, requests "
                   f"{sum((sc.get('requests') or {}).values())}")


def run_ktap(doc: dict, title: str = "harness run") -> str:
    """KTAP of a run's ``summary.json`` (:func:`harness.report.summary.summary`)."""
    scenarios = doc.get("scenarios") or []
    run = doc.get("run") or {}
    kernel = run.get("kernel") or {}
    what = kernel.get("release") or run.get("release") or kernel.get("package") or "?"
    lines = [f"KTAP version {KTAP_VERSION}",
             _diag(f"{title}: kernel {what} ({run.get('accel', '?')}), {len(scenarios)} scenario(s)"),
             f"1..{len(scenarios)}"]
    for n, sc in enumerate(scenarios, 1):
        lines += _scenario(sc, n)
    totals = doc.get("totals") or {}
    if totals:
        lines.append(_diag(f"totals: stacks {totals.get('stacks', 0)}, failed {totals.get('failed_stacks', 0)}"))
    lines.append(_diag(f"exit {doc.get('exit_code')}: {doc.get('outcome', '')}"))
    return "\n".join(lines) + "\n"


def run_doc(data) -> dict:
    """A ``summary.json``-shaped document from a run directory read back
    (:func:`harness.report.run.read_run`): for a directory whose run wrote none (it was cut
    short) or to render an old run's logs.  Counts only: no timing, descriptions or notes."""
    scenarios = []
    for s in data.scenarios:
        end = s.end or {}
        errors = list(end.get("errors") or [])
        if not s.complete:
            errors.append(f"the log ends {'with ' + repr(end.get('reason')) if end else 'without its end record'}")
        causes: dict = {}
        for (_, cause), n in s.causes.items():
            causes[cause] = causes.get(cause, 0) + n
        scenarios.append({
            "name": s.name, "log": str(s.path), "oracles": list(s.oracles), "stacks": s.stacks, "own_stacks": s.own,
            "failed_stacks": end.get("failures", sum(1 for _ in s.failures)),
            "pairs": {o: {v: n for v, n in s.oracle_counts(o).items() if n} for o in s.oracles},
            "causes": dict(sorted((end.get("causes") or causes).items())),
            "not_checked": [{"oracle": o, "reason": why, "stacks": n} for (o, why), n in sorted(s.not_checked.items())],
            "requests": {str(k): v for k, v in sorted(s.requests.items())}, "errors": errors,
            "problems": [], "invariant_violations": [], "seconds": 0.0})
    return {"run": data.facts, "scenarios": scenarios,
            "totals": {"stacks": sum(x["stacks"] for x in scenarios),
                       "failed_stacks": sum(x["failed_stacks"] for x in scenarios)},
            "exit_code": None, "outcome": f"read back from {data.path}"}


def kernel_diff_doc(results, profile: str, release: str, code: int, why: str) -> dict:
    """kernel-diff's ``summary.json``: per scenario its counts and compared items
    (:class:`harness.lockstep.driver.KernelDiffResult`), and the exit code."""
    scenarios = []
    for r in results:
        sm = r.summary
        expected = {}
        for d in sm.expected:
            expected[d.what] = expected.get(d.what, 0) + 1
        scenarios.append({
            "name": r.scenario, "smp": r.smp, "requests": r.requests, "stops": r.stops,
            "seconds": round(r.seconds, 3), "compared": sm.n_compared, "equal": sm.n_equal,
            "differences": len(sm.differences), "unexplained": len(sm.unexplained),
            "kernel_events": dict(sorted(sm.kernel.items())),
            "items": [{"what": what, "compared": n, "equal": eq, "expected": expected.get(what, 0)}
                      for what, n, eq in sm.rows()],
            "unexplained_first": [d.describe() for d in sm.unexplained[:DIAGNOSTICS_SHOWN]],
            "errors": list(r.errors), "events": r.events_path})
    return {"version": 1, "profile": profile, "release": release, "scenarios": scenarios,
            "totals": {"compared": sum(s["compared"] for s in scenarios), "equal": sum(s["equal"] for s in scenarios),
                       "differences": sum(s["differences"] for s in scenarios),
                       "unexplained": sum(s["unexplained"] for s in scenarios)},
            "exit_code": code, "outcome": why}


def kernel_diff_ktap(doc: dict) -> str:
    """KTAP of kernel-diff's ``summary.json``: one test per scenario, one subtest per compared
    item (equal at every event, or not ok with the differences the model does not explain)."""
    scenarios = doc.get("scenarios") or []
    head = [f"KTAP version {KTAP_VERSION}",
            _diag(f"harness kernel-diff: kernel {doc.get('release', '?')}, model profile {doc.get('profile')}, "
                  f"{len(scenarios)} scenario(s)")]
    if doc.get("skipped"):
        skip = _result(True, 1, "kernel-diff", f"SKIP {' '.join(doc['skipped'].split())}")
        return "\n".join([*head, "1..1", skip]) + "\n"
    lines = [*head, f"1..{len(scenarios)}"]
    for n, sc in enumerate(scenarios, 1):
        body = [f"KTAP version {KTAP_VERSION}", f"# Subtest: {_name(sc['name'])}",
                _diag(f"requests {sc['requests']}, stops {sc['stops']}, compared {sc['compared']}, "
                      f"equal {sc['equal']}, differences {sc['differences']} "
                      f"({sc['unexplained']} unexplained); {sc['seconds']:.1f} s")]
        for text in sc.get("unexplained_first", [])[:DIAGNOSTICS_SHOWN]:
            body.append(_diag(f"difference: {text}"))
        for text in sc.get("errors", [])[:DIAGNOSTICS_SHOWN]:
            body.append(_diag(f"error: {text.splitlines()[0] if text else ''}"))
        items = sc.get("items") or []
        if items:
            body.append(f"1..{len(items)}")
            for i, it in enumerate(items, 1):
                ok = it["compared"] == it["equal"] + it.get("expected", 0)
                body.append(_result(ok, i, it["what"], f"equal {it['equal']} of {it['compared']}"
                                    + (f", {it['expected']} expected differences" if it.get("expected") else "")))
        lines += [INDENT + ln for ln in body]
        failed = bool(sc.get("errors") or sc.get("unexplained") or not sc.get("compared"))
        lines.append(_result(not failed, n, sc["name"], "" if items or failed else "SKIP nothing compared"))
    lines.append(_diag(f"exit {doc.get('exit_code')}: {doc.get('outcome', '')}"))
    return "\n".join(lines) + "\n"


def fuzz_ktap(c: dict) -> str:
    """KTAP of a fuzz campaign (``campaign.json``): a not-ok test per signature (its message,
    program count and reproducer as diagnostics), then one for the campaign itself, ok: what
    it tried and checked, and the known behaviour it did not flag."""
    sigs = c.get("signatures") or []
    lines = [f"KTAP version {KTAP_VERSION}",
             _diag(f"harness fuzz ({c.get('mode')}): {c.get('programs', 0)} programs, {c.get('builds', 0)} builds, "
                   f"{c.get('seeds_done', 0)} seeds, {c.get('elapsed', 0):.0f} s; {len(sigs)} signature(s)"),
             f"1..{len(sigs) + 1}"]
    for i, sig in enumerate(sigs, 1):
        key = sig["signature"]["key"]
        lines.append(_diag(sig.get("message") or key))
        lines.append(_diag(f"programs {sig.get('programs', 0)}, occurrences {sig.get('occurrences', 0)}, first seed "
                           f"{sig.get('first_seed')}, reproducer {sig.get('reproducer') or '-'}"))
        lines.append(_result(False, i, key))
    expected = c.get("expected") or {}
    if expected:
        lines.append(_diag("known behaviour, not flagged: " + _counts(dict(sorted(expected.items())))))
    checked = f"stacks {c['stacks']}" if c.get("stacks") else f"instructions {c.get('instructions', 0)}"
    lines.append(_result(True, len(sigs) + 1, f"fuzz-{c.get('mode')}",
                         f"programs {c.get('programs', 0)}, {checked}"))
    return "\n".join(lines) + "\n"


def matrix_ktap(doc: dict) -> str:
    """KTAP of a matrix (``matrix.json``): one test per cell (kernel x QEMU x vCPUs), its scenarios
    as subtests with their oracles beneath them, as :func:`run_ktap` renders a run; a cell whose run
    never came back is ``not ok`` with the reason, one with no summary.json ``not ok`` with its exit
    code."""
    cells = doc.get("cells") or []
    lines = [f"KTAP version {KTAP_VERSION}",
             _diag(f"harness matrix: {len(cells)} cell(s), scenarios {', '.join(doc.get('scenarios') or [])}"),
             f"1..{len(cells)}"]
    for n, cell in enumerate(cells, 1):
        summary = cell.get("summary") or {}
        scenarios = summary.get("scenarios") or []
        head = [f"KTAP version {KTAP_VERSION}", f"# Subtest: {_name(cell['name'])}",
                _diag(f"kernel {cell.get('kernel')}, qemu {cell.get('qemu')}, smp {cell.get('smp')}; exit "
                      f"{cell.get('exit_code')}; {cell.get('elapsed') or 0} s on {cell.get('worker') or '?'}")]
        ok = cell.get("exit_code") == 0 and not cell.get("failed")
        if cell.get("failed") or not scenarios:
            why = cell.get("failed") or f"no summary.json (exit {cell.get('exit_code')})"
            lines += [INDENT + ln for ln in head[2:]] + [_diag(why), _result(False, n, cell["name"])]
            continue
        body = [*head, f"1..{len(scenarios)}"]
        for i, sc in enumerate(scenarios, 1):
            body += _scenario(sc, i)
        lines += [*(INDENT + ln for ln in body), _result(ok, n, cell["name"])]
    lines.append(_diag(f"exit {doc.get('exit_code')}"))
    return "\n".join(lines) + "\n"
