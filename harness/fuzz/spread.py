"""A fuzz campaign as tasks on a cluster (:mod:`harness.campaign`): the same campaign as
:func:`harness.fuzz.campaign.run`, its seeds spread over workers.

Two kinds of task, both plain specs in and plain results out:

- **search** (:func:`search_task`): a chunk of seeds ``s..e-1`` searched as
  :func:`~harness.fuzz.campaign.run` searches them (generate phase only, every signature counted,
  the first program of each kept), until the campaign's deadline.  A seed draws the same
  examples on every worker (``hypothesis.seed``), so the chunks together check the programs one
  process would check over the same seeds: the client sums the counts and keeps, for each
  signature, the first program of its lowest seed -- the in-process run's first.
- **settle** (:func:`settle_task`): one signature shrunk (its first seed run again with the
  shrink phase, as the in-process run does) and its reproducer directory written on the worker,
  which comes back as files and is written by the client under ``--out``.

The client (:func:`run`) draws chunks while the search has time (the budget less its shrink
share, or all of it while no signature waits), settles the new signatures, the most telling
first, and goes round again while time and seeds are left, as the in-process run does.
Everything finished is written (``campaign.json`` and the reproducers) also when the campaign
ends early: an interrupt, the scheduler lost.

Live tasks (a guest each) run their work in a child process of the worker
(:func:`harness.campaign.isolate.call`), which a cancelled campaign kills with its guest.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from ..campaign.executor import Executor, Outcome, Summary, Task
from ..campaign.isolate import call, scratch_dir
from ..images.toolchain import USER_TOOLCHAINS, user_toolchain
from .build import LINKERS, TOOLCHAINS, toolchain
from .campaign import (
    CAMPAIGN_JSON,
    EXAMPLES_PER_SEED,
    SHRINK_BUDGET,
    SHRINK_SHARE,
    SIGNATURE_JSON,
    Campaign,
    CampaignError,
    Checker,
    Evaluator,
    Record,
    _priority,
    examples,
    shrink_record,
    write_reproducer,
)
from .campaign import (
    run as run_in_process,
)
from .shape import MAX_FUNCS

__all__ = ["Plan", "run", "search_task", "settle_task"]

LIVE_TASK_TIMEOUT = 3600.0  # a live task's child: one seed of programs, a guest each


@dataclass(frozen=True)
class Plan:
    """What every task of one campaign shares (pickled to the workers)."""

    checker: Checker
    mode: str
    toolchains: tuple[str, ...]
    linkers: tuple[str, ...]
    examples_per_seed: int = EXAMPLES_PER_SEED
    max_funcs: int = MAX_FUNCS
    campaign: str = ""  # the executor's id: live children are killed under it
    live: bool = False
    # ``--toolchain NAME=PREFIX`` installs, registered again in each worker's process (a worker
    # does not share the client's USER_TOOLCHAINS): the prefix must be there on every worker
    users: tuple[tuple[str, str], ...] = ()

    def register(self) -> None:
        for name, prefix in self.users:
            if USER_TOOLCHAINS.get(name) != Path(prefix):
                user_toolchain(name, prefix)


def _search(plan: Plan, seeds: tuple[int, int], deadline: float) -> Campaign:
    plan.register()
    budget = deadline - time.time()
    if budget <= 0:
        return Campaign(plan.mode, seeds, 0.0, plan.toolchains, plan.linkers)
    work = Path(tempfile.mkdtemp(prefix="harness-fuzz-task-", dir=scratch_dir()))
    try:
        camp = run_in_process(plan.checker, work, seeds=seeds, budget=budget, toolchains=plan.toolchains,
                              linkers=plan.linkers, shrink=False, mode=plan.mode,
                              examples_per_seed=plan.examples_per_seed, max_funcs=plan.max_funcs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for rec in camp.records.values():  # only the first program travels back (the client settles)
        rec.example = rec.finding = None
    return camp


def search_task(plan: Plan, seeds: tuple[int, int], deadline: float) -> Campaign:
    """Search ``seeds`` until ``deadline`` (``time.time()``: the workers' clocks must agree to a
    few seconds); the chunk's :class:`Campaign` (no reproducers)."""
    if plan.live:
        return call(plan.campaign, _search, (plan, seeds, deadline), timeout=LIVE_TASK_TIMEOUT)
    return _search(plan, seeds, deadline)


@dataclass
class Settled:
    record: Record
    files: dict[str, bytes]  # the reproducer directory: relative path -> content
    builds: int


def _settle(plan: Plan, rec: Record, shrink: tuple[float, float] | None) -> Settled:
    end = min(time.time() + shrink[0], shrink[1]) if shrink is not None else None  # from the task's start
    plan.register()
    work = Path(tempfile.mkdtemp(prefix="harness-fuzz-settle-", dir=scratch_dir()))
    try:
        (work / "b").mkdir()
        evaluate = Evaluator(plan.checker, work / "b")
        if end is not None and time.time() < end:
            strategy = examples(plan.toolchains, plan.linkers, plan.max_funcs)
            shrink_record(rec, evaluate, strategy, time.monotonic() + (end - time.time()), plan.examples_per_seed)
        if rec.example is None and rec.first is not None:
            rec.example, rec.finding = rec.first
        files: dict[str, bytes] = {}
        if rec.example is not None:
            d = work / "repro"
            write_reproducer(d, rec, plan.checker)
            files = {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}
        return Settled(rec, files, evaluate.builds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def settle_task(plan: Plan, rec: Record, shrink: tuple[float, float] | None) -> Settled:
    """Shrink ``rec`` for ``shrink = (seconds, deadline)`` (the seconds from the task's start, never
    past the campaign's deadline, ``time.time()``; None: no shrink) and write its reproducer."""
    if plan.live:
        return call(plan.campaign, _settle, (plan, rec, shrink), timeout=LIVE_TASK_TIMEOUT)
    return _settle(plan, rec, shrink)


def _merge_chunk(camp: Campaign, chunk: Campaign) -> None:
    camp.programs += chunk.programs
    camp.builds += chunk.builds
    camp.seeds_done += chunk.seeds_done
    camp.expected.update(chunk.expected)
    camp.instructions += chunk.instructions
    camp.object_instructions += chunk.object_instructions
    camp.per_toolchain.update(chunk.per_toolchain)
    camp.per_linker.update(chunk.per_linker)
    camp.stacks += chunk.stacks
    camp.vdso_stacks += chunk.vdso_stacks
    camp.perf_compared += chunk.perf_compared
    camp.perf_skipped.update(chunk.perf_skipped)
    for sig, r in chunk.records.items():
        have = camp.records.get(sig)
        if have is None:
            camp.records[sig] = replace(r)
            continue
        have.programs += r.programs
        have.occurrences += r.occurrences
        if r.first_seed is not None and (have.first_seed is None or r.first_seed < have.first_seed):
            have.first_seed, have.first = r.first_seed, r.first


def _write_files(d: Path, files: dict[str, bytes]) -> None:
    if d.exists():
        shutil.rmtree(d)
    for rel, data in files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    if (d / "build.sh").exists():
        (d / "build.sh").chmod(0o755)


def run(executor: Executor, checker: Checker, *, seeds: tuple[int, int] = (0, 1000), budget: float = 300.0,
        toolchains=TOOLCHAINS, linkers=LINKERS, out: Path | None = None, shrink: bool = True,
        shrink_budget: float = SHRINK_BUDGET, shrink_share: float = SHRINK_SHARE, mode: str = "static",
        examples_per_seed: int = EXAMPLES_PER_SEED, max_funcs: int = MAX_FUNCS, chunk: int | None = None,
        live: bool = False) -> tuple[Campaign, Summary]:
    """The campaign over ``executor``'s workers (module docstring): the merged :class:`Campaign`
    and the executor's :class:`Summary`; ``out`` as :func:`harness.fuzz.campaign.run` writes it,
    with the cluster's summary in ``campaign.json`` (``"cluster"``)."""
    a, b = seeds
    if not 0 <= a < b:
        raise CampaignError(f"seeds {a}:{b}: an empty range (A:B with 0 <= A < B)")
    toolchains, linkers = tuple(toolchains), tuple(linkers)
    for name in toolchains:
        toolchain(name)  # an unavailable root is the harness's error, before any task
    chunk = chunk or (1 if live else 2)
    users = tuple((n, str(USER_TOOLCHAINS[n])) for n in toolchains if n in USER_TOOLCHAINS)
    plan = Plan(checker, mode, toolchains, linkers, examples_per_seed, max_funcs, executor.id, live, users)
    camp = Campaign(mode, seeds, budget, toolchains, linkers)
    start = time.monotonic()
    deadline, wall_deadline = start + budget, time.time() + budget
    tried: set = set()
    settled: dict = {}
    state = {"next": a, "search_end": deadline}

    def chunks() -> Iterator[Task]:
        while state["next"] < b:
            s = state["next"]
            e = min(s + chunk, b)
            state["next"] = e
            yield Task(f"seeds-{s}:{e}", search_task, (plan, (s, e), wall_deadline))

    def searching() -> bool:
        now = time.monotonic()
        return now < deadline and not (shrink and now >= state["search_end"]
                                       and any(s not in tried for s in camp.records))

    def on_chunk(o: Outcome) -> None:
        if o.ok:
            _merge_chunk(camp, o.result)

    def on_settled(o: Outcome) -> None:
        if not o.ok:
            return
        res: Settled = o.result
        rec = camp.records[res.record.signature]
        rec.example, rec.finding = res.record.example, res.record.finding
        rec.shrunk, rec.shrink_steps = res.record.shrunk, res.record.shrink_steps
        camp.builds += res.builds
        settled[rec.signature] = res
        if out is not None and res.files:
            _write_files(out / rec.signature.id, res.files)
            camp.reproducers[rec.signature] = out / rec.signature.id

    def settle(recs: list[Record], shrinking: bool) -> None:
        tasks = []
        for rec in recs:
            tried.add(rec.signature)
            light = Record(rec.signature, first_seed=rec.first_seed, first=rec.first)
            how = (shrink_budget, wall_deadline) if shrinking else None
            tasks.append(Task(f"settle-{rec.signature.id}", settle_task, (plan, light, how)))
        executor.run(tasks, on_settled, count=lambda r: 0,
                     more=(lambda: time.monotonic() < deadline) if shrinking else (lambda: True))

    try:
        while True:
            state["search_end"] = deadline - (deadline - time.monotonic()) * shrink_share
            first = state["next"]
            executor.run(chunks(), on_chunk, count=lambda c: c.programs, more=searching)
            new = sorted((r for r in camp.records.values() if r.signature not in tried), key=_priority)
            if shrink and new and time.monotonic() < deadline:
                settle(new, True)
            if state["next"] == first or state["next"] >= b or time.monotonic() >= deadline:
                break
        # never settled (the budget ran out, or no shrinking): the first program is the reproducer
        rest = sorted((r for r in camp.records.values() if r.signature not in settled), key=_priority)
        if rest and out is not None:
            settle(rest, False)
        for rec in camp.records.values():
            if rec.example is None and rec.first is not None:
                rec.example, rec.finding = rec.first
    finally:
        camp.elapsed = time.monotonic() - start
        if out is not None:
            write_campaign(camp, executor.summary, out)
    return camp, executor.summary


def write_campaign(camp: Campaign, summary: Summary, out: Path) -> None:
    """``out/campaign.json`` (the cluster's summary with it), each reproducer's counts brought up
    to the campaign's end."""
    out.mkdir(parents=True, exist_ok=True)
    data = camp.to_json()
    for s in data["signatures"]:
        if s["reproducer"] is not None and not (out / s["reproducer"]).is_dir():
            s["reproducer"] = None  # its settle task failed: see cluster.failed
    data["cluster"] = summary.to_json()
    for sig, rec in camp.records.items():
        meta = out / sig.id / SIGNATURE_JSON
        if meta.is_file():
            m = json.loads(meta.read_text())
            m["programs"], m["occurrences"] = rec.programs, rec.occurrences
            meta.write_text(json.dumps(m, indent=1) + "\n")
    (out / CAMPAIGN_JSON).write_text(json.dumps(data, indent=1) + "\n")


def counts(camp: Campaign) -> dict:
    """What must not depend on the scale a campaign ran at: programs (in all, by toolchain and by
    linker), and per signature its programs, occurrences and first seed.  (Not ``expected`` nor
    ``instructions``: those count the builds checked, and a process checks a program drawn twice
    once.)"""
    return {"programs": camp.programs, "seeds_done": camp.seeds_done,
            "per_toolchain": dict(camp.per_toolchain), "per_linker": dict(camp.per_linker),
            "signatures": {r.signature.key: (r.programs, r.occurrences, r.first_seed)
                           for r in camp.records.values()}}
