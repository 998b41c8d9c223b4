"""``summary.json``: the run's outcome for machines, beside the JSONL logs in the run directory.

One object: the exit code and why, the run's facts (run.json's kernel, QEMU, accelerator), and per
scenario the counts the text table shows, keyed by name (oracle, verdict, cause), never by
column position.  Failing stacks are not repeated here: ``log`` names the JSONL file that has
them as stack records.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from ..errors import EXIT_FAILURES, EXIT_INFRA, EXIT_OK

__all__ = ["summary", "run_exit_code", "SUMMARY_VERSION"]

SUMMARY_VERSION = 1


def run_exit_code(results) -> tuple[int, str]:
    """The exit-code contract for a run: 3 when the infrastructure failed in any scenario (its
    stacks are incomplete), else 2 when a user's program (``--program``) gave no stack to
    check (it could not start, or ended or slept before its first checked stack: the input is
    what failed), else 1 when any stack failed, any delivery went wrong, an invariant was
    violated or a scenario delivered nothing, else 0.  A run with some stacks, but fewer than
    asked for, is judged on those (:meth:`Result.shortfall` says so in a note)."""
    if any(r.errors for r in results):
        return EXIT_INFRA, "infrastructure: " + "; ".join(f"{r.scenario.name}: {r.errors[0].splitlines()[0]}"
                                                   for r in results if r.errors)
    empty = [r for r in results if r.scenario.user_path and not r.own_stacks]
    if empty:
        return 2, "; ".join(f"{r.scenario.name}: {r.shortfall()}" for r in empty)
    bad = [r.scenario.name for r in results
           if r.failed_stacks or r.problems or r.invariant_violations or r.stacks == 0]
    if bad:
        return EXIT_FAILURES, "failures in " + ", ".join(bad)
    return EXIT_OK, "every stack agrees or is explained"


def _pairs(r) -> dict:
    out: dict = defaultdict(dict)
    for (oracle, verdict), n in sorted(r.pairs.items()):
        out[oracle][verdict] = n
    return dict(out)


def _total(counts) -> dict:
    return dict(sorted(sum((Counter(c) for c in counts), start=Counter()).items()))


def summary(results, facts: dict | None = None) -> dict:
    code, why = run_exit_code(results)
    return {
        "version": SUMMARY_VERSION,
        "exit_code": code,
        "outcome": why,
        "run": facts or {},
        "scenarios": [
            {
                "name": r.scenario.name,
                "description": r.scenario.describe(),
                "log": r.log,
                "oracles": r.oracles,
                "stacks": r.stacks,
                "own_stacks": r.own_stacks,
                "failed_stacks": r.failed_stacks,
                # delivery.json of the first failing stacks (harness.scenarios.snapshot.load)
                "failing_snapshots": [str(p) for p in r.kept_snapshots],
                "pairs": _pairs(r),
                "causes": dict(sorted(r.causes.items())),
                # --cross-examine: divergences whose cause's claims the toolchain's tools were asked,
                # by outcome, and the causes they contradicted
                "cross_examined": r.cross_outcomes(),
                "contradicted": r.contradicted(),
                "undeclared": dict(sorted(r.undeclared.items())),
                "not_checked": [{"oracle": o, "reason": why, "stacks": n}
                                for (o, why), n in sorted(r.not_checked.items())],
                "requests": {str(k): v for k, v in sorted(r.requests.items())},
                "sampled": r.sampled,
                "callbacks": r.callbacks,
                "cookies": len(r.cookies),
                "walks": r.walks,
                "stops": r.stops,
                "truncated": r.truncated,
                "own_frames_checked": r.own_frames_checked,
                "at_exit": r.at_exit,
                "problems": r.problems,
                "errors": r.errors,
                "invariant_violations": r.invariant_violations,
                "notes": r.notes,
                "shortfall": r.shortfall(),
                "output_tail": r.output_tail,
                "seconds": round(r.seconds, 3),
            }
            for r in results
        ],
        "totals": {
            "stacks": sum(r.stacks for r in results),
            "failed_stacks": sum(r.failed_stacks for r in results),
            "causes": dict(sorted(sum((r.causes for r in results), start=Counter()).items())),
            "cross_examined": _total(r.cross_outcomes() for r in results),
            "contradicted": _total(r.contradicted() for r in results),
        },
    }
