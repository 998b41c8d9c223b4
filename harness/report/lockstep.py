"""The text of ``harness kernel-diff``: a lockstep :class:`~harness.lockstep.compare.Summary` as lines.

The summary is taken duck-typed, not imported: the report floor sits below the drivers
(``lockstep`` among them), see pyproject.toml's ``[tool.importlinter]``.  It is read through
``kernel`` and ``requests_by_ret`` (Counters of event totals), ``profile``, ``n_compared``,
``n_equal``, ``differences``/``expected``/``unexplained`` (each difference's ``expected`` name and
its own ``describe()`` line), ``rows()`` (item, compared, equal, in the lockstep's order) and
``notes``.
"""

from __future__ import annotations

import collections

__all__ = ["lockstep_lines"]


def lockstep_lines(summary, show: int | None = None) -> list[str]:
    """The printout: totals, a row per compared item, then every difference (or the first ``show``)."""
    k = summary.kernel
    rets = ", ".join(f"{r}: {n}" for r, n in sorted(summary.requests_by_ret.items()))
    out = [
        f"kernel events: {k['request']} requests ({rets or 'none'}), {k['task_work']} task works, "
        f"{k['walk']} walks, {k['cache_reused']} cache reuses, {k['callback']} callbacks, "
        f"{k['return']} returns to user, {k['fork']} forks, {k['exiting']} exits "
        f"({k['task_exit_pending']} with work pending)",
        f"profile {summary.profile}: events compared {summary.n_compared}, equal {summary.n_equal}, "
        f"differences {len(summary.differences)} ({len(summary.expected)} expected, "
        f"{len(summary.unexplained)} unexplained)",
        f"  {'compared':<16} {'count':>7} {'equal':>7} {'differ':>7}",
    ]
    for what, n, equal in summary.rows():
        out.append(f"  {what:<16} {n:>7} {equal:>7} {n - equal:>7}")
    by_reason = collections.Counter(d.expected for d in summary.expected)
    for reason, n in by_reason.most_common():
        out.append(f"expected: {n} x {reason}")
    diffs = summary.unexplained + summary.expected
    for d in diffs if show is None else diffs[:show]:
        out.append("  " + d.describe())
    if show is not None and len(diffs) > show:
        out.append(f"  ... and {len(diffs) - show} more differences")
    out.extend(f"note: {n}" for n in summary.notes)
    return out
