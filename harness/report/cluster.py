"""The cluster's part of a campaign's summary (:class:`harness.campaign.executor.Summary` as
JSON): where it ran, the tasks retried and why, the tasks that failed every try."""

from __future__ import annotations

__all__ = ["format_cluster"]


def format_cluster(d: dict, unit: str = "programs") -> str:
    rate = d["units"] / d["elapsed"] * 60 if d.get("elapsed") else 0.0
    lost = f" ({len(d['lost_workers'])} lost)" if d["lost_workers"] else ""
    lines = [f"cluster: {d['where']}, {d['workers']} workers{lost}; {d['done']} tasks done, {len(d['retried'])} "
             f"retried, {len(d['failed'])} failed; {rate:.0f} {unit}/min"]
    if d.get("unfinished"):
        lines.append(f"  unfinished at the deadline: {', '.join(d['unfinished'])}")
    if d["lost_workers"]:
        lines.append(f"  workers lost: {', '.join(d['lost_workers'])}")
    for key, why in d["retried"].items():
        lines.append(f"  retried {key}: {'; '.join(why)}")
    for f in d["failed"]:
        lines.append(f"  FAILED {f['task']} after {f['tries']} tries: {f['error']}")
    return "\n".join(lines)
