"""The text of ``harness bench soak``: a :class:`~harness.soak.engine.SoakReport` as lines.

The report is taken duck-typed, not imported: the report floor sits below the drivers (``soak``
among them), see pyproject.toml's ``[tool.importlinter]``.  Read: its counts and ``ledger``
(:attr:`harness.soak.ledger.Ledger.counts`), ``spec`` (tasks, tracers, profile, seed),
``total_requests``, the RSS figures (KiB), the messages, errors and notes.
"""

from __future__ import annotations

import collections

__all__ = ["soak_lines"]


def soak_lines(rep) -> list[str]:
    """The soak's figures, one per line."""
    led = collections.Counter(rep.ledger)
    spec = rep.spec
    rate = rep.total_requests / rep.seconds if rep.seconds else 0.0
    owed = led["owed"]
    out = [
        f"soak: {rep.total_requests} requests on the program's tasks ({spec.tasks} worker tasks, "
        f"{rep.smp} vCPU(s), {spec.tracers} tracers, profile {spec.profile}, seed {spec.seed})",
        f"requests:          {rep.requests['nmi']} NMI, {rep.requests['timer']} timer "
        f"(+{rep.foreign_requests} on other tasks); tracer requests: "
        + ", ".join(f"ret {k[4:]} x{v}" for k, v in sorted(led.items()) if k.startswith("ret ")),
        f"tasks seen:        {rep.tasks_seen} (at most {rep.most_live} alive at once)",
        f"forks:             {rep.forks}",
        f"exits:             {rep.exits}",
        f"cancels:           {sum(rep.cancels.values())} ("
        + ", ".join(f"{k} {v}" for k, v in sorted(rep.cancels.items())) + "), each followed by a new registration",
        f"callbacks:         {led['callbacks']}",
        f"requests ret 0:    {owed}: delivered at return {led['delivered']}, delivered at exit "
        f"{led['delivered_at_exit']}, cancelled before the callback ran {led['cancelled']}, still pending "
        f"{rep.still_owed}" + (f", served by a nested request's callback {led['shared']}" if led["shared"] else ""),
        f"lost:              {led['lost']}",
        f"duplicated:        {led['duplicated']}",
        f"after cancel:      {led['after_cancel']}",
        f"cookie reuse:      {led['cookie_reuse']} ({led['cookies']} cookies; two in one entry: "
        f"{led['cookie_mismatch']})",
        f"stacks:            {rep.stacks} checked ({rep.own_stacks} of the program's), {rep.failed_stacks} failed"
        + (" (causes: " + ", ".join(f"{c} {n}" for c, n in rep.causes.items()) + ")" if rep.causes else "")
        + (" (outside the declaration, suspicious: " + ", ".join(f"{c} {n}" for c, n in rep.undeclared.items())
           + ")" if rep.undeclared else ""),
        "log re-check:      "
        + ("not run" if rep.check_violations is None else f"{rep.check_violations} violation(s)")
        + (f" ({rep.log})" if rep.log else ""),
        f"elapsed:           {rep.seconds:.1f} s",
        f"requests/s:        {rate:.2f} ({rep.stops} guest stops, {rep.stops / max(rep.total_requests, 1):.1f} "
        f"per request)",
        f"peak RSS:          {rep.peak_rss / 1024:.1f} MiB",
        "RSS series:        " + ", ".join(f"{n}: {kib / 1024:.1f}" for n, kib in rep.rss_series)
        + " (requests done: MiB)",
    ]
    out += [f"ledger: {m}" for m in rep.ledger_messages]
    out += [f"check: {m}" for m in rep.check_messages]
    out += [f"error: {e}" for e in rep.errors[:10]]
    out += [f"note: {n}" for n in rep.notes]
    return out
