"""The text of ``harness check LOG``: a deferred-unwinding log's :class:`~harness.deferred.check.Verdict`
as lines."""

from __future__ import annotations

from ..deferred.check import Verdict
from ..deferred.log import VERDICTS

__all__ = ["verdict_lines"]


def verdict_lines(verdict: Verdict, path: str) -> list[str]:
    """The lines ``harness check`` prints: the stack records' summary (verdicts per pair, causes,
    each failure), how the run ended, then "clean" or the violations, then incompleteness."""
    out = [f"{verdict.stacks} stack(s), {verdict.failed_stacks} with a failure verdict"]
    for (unwinder, oracle), counts in sorted(verdict.verdicts.items()):
        shown = ", ".join(f"{name} {counts[name]}" for name in VERDICTS if counts[name])
        out.append(f"{unwinder}/{oracle}: {shown}")
    if verdict.causes:
        by_count = sorted(verdict.causes.items(), key=lambda x: (-x[1], x[0]))
        out.append("causes: " + ", ".join(f"{c} {n}" for c, n in by_count))
    out += [f"failure: {f}" for f in verdict.failures]
    if verdict.end_reason is not None:
        requests = f", {verdict.requests} request(s)" if verdict.requests is not None else ""
        out.append(f"run ended: {verdict.end_reason}{requests}, {len(verdict.errors)} error(s)")
        out += [f"error: {e}" for e in verdict.errors]
    if verdict.clean:
        out.append(f"clean ({verdict.events} events)")
    else:
        out += verdict.messages()
        out.append(f"{len(verdict.violations)} violation(s) in {verdict.events} events")
    if verdict.incomplete:
        out.append(f"incomplete: {verdict.incomplete}")
    elif verdict.sealed is False:
        out.append(f"unsealed: a version {verdict.version} log carries no digest, so an edit that keeps it "
                   "well-formed would go unseen")
    return [f"{path}: {line}" for line in out]
