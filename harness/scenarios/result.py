"""What one scenario run found: counts keyed by oracle, verdict and cause, and the failing stacks.

No display strings: the text table, the HTML report and the JUnit file are drawn from these
fields and from the run's JSONL stack records (:mod:`harness.report`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from ..verdicts.causes import CAUSES, NAMED
from ..verdicts.types import AGREE, EXPLAINED
from .catalog import Scenario

__all__ = ["Result"]


def _needs_text(name: str) -> str:

    c = CAUSES.get(name) or NAMED.get(name)
    if c is None:
        return "nothing (not a registered cause)"
    parts = [" or ".join(sorted(n)) for n in c.needs]
    more = [f"oracle {' or '.join(sorted(c.oracles))}"] if c.oracles else []
    more += [f"unwinder {' or '.join(sorted(c.unwinders))}"] if c.unwinders else []
    return ", ".join(parts + more) or "no fact"


@dataclass
class Result:
    scenario: Scenario
    oracles: list[str] = field(default_factory=list)  # the oracles that checked this program's stacks
    requests: collections.Counter = field(default_factory=collections.Counter)  # return value -> n
    stacks: int = 0  # stacks delivered (every task's)
    foreign: int = 0  # of which of other tasks (init, kernel threads' users): the model's rules only
    pairs: collections.Counter = field(default_factory=collections.Counter)  # (oracle, verdict) -> stacks
    causes: collections.Counter = field(default_factory=collections.Counter)  # cause -> divergences
    # cross-examined divergences (harness run --cross-examine): (cause, outcome) -> divergences, the
    # outcome over the cause's claims asked of the toolchain's own tools
    cross: collections.Counter = field(default_factory=collections.Counter)
    # The causes the program's stacks may show (Scenario.allowed_causes for the run's oracles), and
    # those proven on its stacks outside that declaration: each a finding (tests fail on it).
    declared: frozenset[str] | None = None
    undeclared: collections.Counter = field(default_factory=collections.Counter)  # cause -> divergences
    not_checked: collections.Counter = field(default_factory=collections.Counter)  # (oracle, reason) -> n
    failures: list[dict] = field(default_factory=list)  # the stack records with a failing pair (the first 1000)
    failed_stacks: int = 0  # stacks with a failing pair, all of them
    # the saved snapshots of failing stacks (Engine's failing_dir: delivery.json paths)
    kept_snapshots: list = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # delivery failures (work never delivered, ...)
    examples: dict[str, dict] = field(default_factory=dict)  # cause -> the first stack record it explained
    callbacks: int = 0
    cookies: set = field(default_factory=set)
    walks: int = 0
    stops: int = 0
    tasks: set = field(default_factory=set)  # pids of the program's tasks whose stacks were checked
    children: int = 0  # stacks of the program's children (fork, exec) checked
    at_exit: int = 0  # stacks of the program's tasks delivered in do_exit()
    truncated: int = 0  # stacks cut at UNWIND_MAX_ENTRIES
    # frames in the program's own text the CFI oracle stepped from (with an FDE of the program's):
    # 0 means none of the program's own frames was checked, whatever the verdicts say
    own_frames_checked: int = 0
    # the program's stacks the CFI oracle found in the vDSO (its topmost frame there, judged by the
    # vDSO's own .eh_frame, read from guest memory), and of those the ones whose CFI walk never
    # reached the program's own text: the caller lost by the ground truth itself
    vdso_stacks: int = 0
    vdso_lost: int = 0
    pending_at_end: int = 0  # work still pending when the run ended (the task never returned)
    seconds: float = 0.0
    loop_seconds: float = 0.0  # the sampling loop alone (no program start, no log check)
    invariant_violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: why the guest could not go on after this scenario's error (QEMU killed, stopped, silent),
    #: in one line: the whole run ends here (run_scenarios runs no further scenario)
    machine_lost: str | None = None
    notes: list[str] = field(default_factory=list)  # why sampling ended early, and the like
    sampled: int = 0  # requests that landed on the program's tasks
    continued: int = 0  # request stops the guest left at once (Target.plan_continue)
    passed_over: int = 0  # of those, NMIs not made requests: the stop's guessed reads missed the task
    program_exit: int | None = None  # the status /init reported, if the program ended during the run
    log: str | None = None  # the JSONL log's file name in the run directory
    program_output: str | None = None  # the file with the program's stdout and stderr (beside the log)
    output_tail: list[str] = field(default_factory=list)  # its last lines, when the run fell short

    @property
    def short(self) -> bool:
        """Fewer requests landed on the program than were asked for (``--samples``)."""
        return self.sampled < self.scenario.samples

    def shortfall(self) -> str | None:
        """Why this run has fewer stacks than it was asked for, in one line, or None: the
        program ended (or never started: a loader's error is status 127) before its first
        checked stack, or before all of them, or sampling gave up on it."""
        own = self.own_stacks
        if own and not self.short:
            return None
        asked = f"{self.sampled} of {self.scenario.samples} requests landed on the program"
        if self.program_exit is not None:
            when = "before its first checked stack" if not own else f"after {own} checked stack(s)"
            why = f"the program exited with status {self.program_exit} {when} ({asked})"
        elif not own:
            why = f"no stack of the program was checked ({asked}: it sleeps, or other tasks keep the CPU)"
        else:
            why = f"{own} stack(s) checked on the program: {asked}"
        if self.output_tail:
            why += f"; its output ends: {self.output_tail[-1][:200]}"
        return why

    def cross_outcomes(self) -> dict[str, int]:
        """Divergences cross-examined, by outcome (confirmed, contradicted, unverifiable)."""
        out: collections.Counter = collections.Counter()
        for (_cause, outcome), n in self.cross.items():
            out[outcome] += n
        return dict(sorted(out.items()))

    def contradicted(self) -> dict[str, int]:
        """Causes a tool contradicted -> divergences."""
        return {c: n for (c, o), n in sorted(self.cross.items()) if o == "contradicted"}

    @property
    def own_stacks(self) -> int:
        """Stacks of the program's own tasks (the ones the oracles check)."""
        return self.stacks - self.foreign

    def agreed(self, oracle: str) -> int:
        return self.pairs[(oracle, AGREE)]

    def explained(self, oracle: str) -> int:
        return self.pairs[(oracle, EXPLAINED)]

    def judged(self, oracle: str) -> int:
        """Stacks for which ``oracle`` gave a verdict (agree, explained or failure)."""
        return sum(n for (o, v), n in self.pairs.items() if o == oracle and v != "not checked")

    def undeclared_notes(self) -> list[str]:
        facts = self.scenario.facts
        return [f"cause {c} proven {n} time(s) on the program's stacks, outside {self.scenario.name}'s declaration "
                f"(facts: {', '.join(sorted(facts)) if facts else 'none'}): the registry says it needs "
                f"{_needs_text(c)}; suspicious" for c, n in sorted(self.undeclared.items())]

    @property
    def ok(self) -> bool:
        return not (self.failed_stacks or self.problems or self.errors or self.invariant_violations) and self.stacks > 0
