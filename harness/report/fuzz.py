"""Text for ``harness fuzz``: a campaign's summary, one row per signature, and a replay's verdict.

Input is the campaign's JSON form (``campaign.json``: :meth:`harness.fuzz.campaign.Campaign.to_json`,
or :func:`harness.fuzz.campaign.merge`'s result): this layer sits below the fuzz driver and reads
plain data, the same a merged or archived campaign has.
"""

from __future__ import annotations

__all__ = ["format_campaign", "format_replay"]


def _checked(c: dict) -> str:
    """What the campaign's checkers looked at: instructions (static), stacks in a guest (live)."""
    parts = []
    if "static" in c["mode"]:
        objects = c.get("object_instructions", 0)
        parts.append(f"{c.get('instructions', 0)} instructions compared"
                     + (f" (and {objects} in the compilers' objects)" if objects else ""))
    if "live" in c["mode"]:
        vdso = c.get("vdso_stacks", 0)
        parts.append(f"{c.get('stacks', 0)} stacks checked in a guest" + (f" ({vdso} in the vDSO)" if vdso else ""))
        if c.get("perf_compared"):
            parts.append(f"{c['perf_compared']} of Debian perf's deferred callchains against our unwinder")
        for why, n in sorted((c.get("perf_skipped") or {}).items()):
            parts.append(f"Debian's perf oracle skipped on {n} program(s): {why}")
    return ", ".join(parts)


def format_campaign(c: dict, *, out: str | None = None) -> str:
    seeds = c["seeds"]
    seed_text = (f"{seeds[0]}:{seeds[1]}" if seeds and isinstance(seeds[0], int)
                 else ", ".join(f"{a}:{b}" for a, b in seeds))
    lines = [f"fuzz ({c['mode']}): {c['programs']} programs tried ({c['builds']} builds with shrinking), "
             f"{c['seeds_done']} seeds of {seed_text}, {c['elapsed']:.0f} s; {_checked(c)}; "
             f"{len(c['signatures'])} signatures"]
    sigs = c["signatures"]
    if sigs:
        head = ("PROGRAMS", "SIZE", "SIGNATURE", "REPRODUCER")
        rows = []
        for s in sigs:
            size = s.get("size")
            size_text = f"{size['functions']}f" + ("" if s.get("shrunk", True) else "*") if size else "-"
            rows.append((str(s["programs"]), size_text, s["signature"]["key"], s.get("reproducer") or "-"))
        widths = [max(len(r[i]) for r in (head, *rows)) for i in range(3)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(head[:3], widths, strict=True)) + "  " + head[3])
        for r in rows:
            lines.append("  ".join(x.ljust(w) for x, w in zip(r[:3], widths, strict=True)) + "  " + r[3])
        if any(not s.get("shrunk", True) and s.get("size") for s in sigs):
            lines.append("(* not shrunk: the budget ran out first; the first program that showed it)")
    per = c.get("per_toolchain") or {}
    if per:
        lines.append("programs per toolchain: " + ", ".join(f"{k} {v}" for k, v in per.items())
                     + "; per linker: " + ", ".join(f"{k} {v}" for k, v in (c.get("per_linker") or {}).items()))
    expected = c.get("expected") or {}
    if expected:
        lines.append("known behaviour, not flagged: " + ", ".join(f"{k} {v}" for k, v in sorted(expected.items())))
    if out:
        lines.append(f"reproducers and campaign.json in {out}")
    return "\n".join(lines)


def format_replay(path: str, key: str, reproduces: bool, others: list[str]) -> str:
    verdict = "reproduces" if reproduces else "no longer reproduces (fixed)"
    lines = [f"{path}: {key}: {verdict}"]
    lines += [f"  also: {o}" for o in others]
    return "\n".join(lines)
