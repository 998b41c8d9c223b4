"""Reading a run directory for the reports: ``run.json`` (the guest's facts) and one JSONL log per
scenario, boiled down to what a page can show without carrying every stack.

One pass over each log keeps:

- the counts: stacks, per oracle the verdicts, per (oracle, cause) the divergences, per
  (oracle, reason) the stacks not checked, and the ``end`` record (complete or cut);
- every failing pair (up to :data:`FAILURES_KEPT` per scenario) and, per (oracle, cause),
  the first :data:`EXAMPLES_PER_CAUSE` explained divergences, each as a compact :class:`Example`
  whose frame lists are cut to a window around the divergences (a 510-frame recursion keeps its
  first frames and the ones around the difference);
- the collapsed stacks of the unwinder's frames (:attr:`ScenarioRun.folded`) and the stack records'
  task, comm and frames for perf-script text (:attr:`ScenarioRun.samples`);
- per task, a timeline of kernel entries from the deferred model's events: requests and their
  return values, cookies, walks, cached traces, callbacks and how the entry ended.

Rendering is elsewhere (:mod:`harness.report.html`, :mod:`harness.report.flame`,
:mod:`harness.report.perfscript`).
"""

from __future__ import annotations

import collections
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EXIT_USAGE, HarnessError

__all__ = ["TIMELINE_COLUMNS", "compact_timeline", "EXAMPLES_PER_CAUSE", "FAILURES_KEPT", "Example", "RunData",
           "RunDirError", "ScenarioRun", "fold_frames", "read_run", "read_scenario"]

log = logging.getLogger(__name__)

EXAMPLES_PER_CAUSE = 3  # explained divergences kept per (scenario, oracle, cause)
FAILURES_KEPT = 100  # failing pairs kept per scenario (all are counted)
HEAD_FRAMES = 12  # frames always kept at the top of a cut frame list
AROUND = 6  # frames kept on either side of a divergence's index
TASKS_KEPT = 40  # tasks with a timeline per scenario
ENTRIES_KEPT = 200  # kernel entries per task in its timeline


class RunDirError(HarnessError):
    """A run directory that cannot be read: no such directory, no log, a malformed line."""

    exit_code = EXIT_USAGE  # bad input


@dataclass
class Example:
    """One (unwinder, oracle) pair of one stack record: both frame lists (cut to a window), where
    each frame list stopped, the verdict, and its divergences as recorded."""

    scenario: str
    seq: int
    task: int
    comm: str
    cookie: int
    point: str
    unwinder: str
    oracle: str
    verdict: str
    reason: str
    divergences: list[dict]
    frames: dict[str, list]  # name -> [[index, addr, module, sym], ...] (the kept window)
    lengths: dict[str, int]  # name -> the full list's length
    stops: dict[str, str]

    def as_json(self) -> dict:
        return {"scenario": self.scenario, "seq": self.seq, "task": self.task, "comm": self.comm,
                "cookie": self.cookie, "point": self.point, "unwinder": self.unwinder, "oracle": self.oracle,
                "verdict": self.verdict, "reason": self.reason, "divergences": self.divergences,
                "frames": self.frames, "lengths": self.lengths, "stops": self.stops}


@dataclass
class ScenarioRun:
    name: str
    path: Path
    stacks: int = 0
    own: int = 0  # stacks of the program's own tasks
    unwinder: str = ""
    oracles: list[str] = field(default_factory=list)
    verdicts: collections.Counter = field(default_factory=collections.Counter)  # (oracle, verdict) -> stacks
    causes: collections.Counter = field(default_factory=collections.Counter)  # (oracle, cause) -> divergences
    unexplained: collections.Counter = field(default_factory=collections.Counter)  # oracle -> divergences
    not_checked: collections.Counter = field(default_factory=collections.Counter)  # (oracle, reason) -> stacks
    failures: list[Example] = field(default_factory=list)
    failed_pairs: int = 0
    examples: dict[tuple[str, str], list[Example]] = field(default_factory=dict)  # (oracle, cause) -> kept
    folded: collections.Counter = field(default_factory=collections.Counter)  # tuple of names -> stacks
    samples: list[tuple[str, int, int, list]] = field(default_factory=list)  # (comm, task, seq, unwinder frames)
    timelines: dict[int, dict] = field(default_factory=dict)  # task -> {"comm", "entries": [...], "more"}
    requests: collections.Counter = field(default_factory=collections.Counter)  # ret -> n
    walks: int = 0
    callbacks: int = 0
    end: dict | None = None

    @property
    def complete(self) -> bool:
        return self.end is not None and self.end.get("reason") == "complete"

    def oracle_counts(self, oracle: str) -> dict[str, int]:
        return {v: self.verdicts[(oracle, v)] for v in ("agree", "explained", "failure", "not checked")}


@dataclass
class RunData:
    path: Path
    facts: dict
    scenarios: list[ScenarioRun]

    @property
    def oracles(self) -> list[str]:
        return list(dict.fromkeys(o for s in self.scenarios for o in s.oracles))

    @property
    def causes(self) -> collections.Counter:
        """cause -> divergences it explained over the whole run."""
        out: collections.Counter = collections.Counter()
        for s in self.scenarios:
            for (_, cause), n in s.causes.items():
                out[cause] += n
        return out

    @property
    def stacks(self) -> int:
        return sum(s.stacks for s in self.scenarios)


_OFF = re.compile(r"\+0x[0-9a-fA-F]+$")


def frame_name(frame) -> str:
    """A frame's function for collapsed stacks, as stackcollapse-perf.pl names a perf frame: the
    symbol without its offset, else ``[module]``, else ``[unknown]``."""
    _, module, sym = frame[-3:]
    if sym:
        # stackcollapse-perf.pl's --tidy-generic (its default): ';' -> ':', arguments cut, quotes dropped
        name = _OFF.sub("", sym).replace(";", ":")
        if not re.search(r"\.\(.*\)\.", name):
            name = re.sub(r"\((?!anonymous namespace\)).*", "", name)
        return name.replace('"', "").replace("'", "")
    return f"[{module}]" if module else "[unknown]"


def fold_frames(comm: str, frames: list) -> tuple[str, ...]:
    """One stack as a collapsed-stack key: the process name first (stackcollapse-perf's default),
    then the functions outermost first."""
    return (comm.replace(" ", "_") or "[unknown]",) + tuple(frame_name(f) for f in reversed(frames))


def _window(rows: list, indices: set[int]) -> list:
    keep = set(range(min(HEAD_FRAMES, len(rows))))
    for i in indices:
        keep.update(range(max(0, i - AROUND), min(len(rows), i + AROUND + 1)))
    return [[i, *rows[i]] for i in sorted(keep)]


def _example(rec: dict, verdict: dict, scenario: str) -> Example:
    unwinder = verdict["unwinder"]
    oracle = verdict["oracle"]
    divs = verdict.get("divergences") or []
    names = [n for n in (unwinder, oracle) if n in rec["frames"]]
    idx = {d.get("got_index") for d in divs} | {d.get("want_index") for d in divs}
    idx = {i for i in idx if isinstance(i, int)}
    got = rec["frames"].get(unwinder, [])
    want = rec["frames"].get(oracle, [])
    idx |= {next((i for i in range(max(len(got), len(want)))
                  if i >= len(got) or i >= len(want) or got[i][0] != want[i][0]), 0)}
    return Example(
        scenario=scenario, seq=rec.get("seq", 0), task=rec["task"], comm=rec.get("comm", ""),
        cookie=rec.get("cookie", 0), point=rec.get("point", ""), unwinder=unwinder, oracle=oracle,
        verdict=verdict["verdict"], reason=verdict.get("reason", ""), divergences=divs,
        frames={n: _window(rec["frames"][n], idx) for n in names},
        lengths={n: len(rec["frames"][n]) for n in names},
        stops={n: rec.get("stops", {}).get(n, "") for n in names})


class _Timeline:
    """Kernel entries per task from the deferred model's events, in log order."""

    def __init__(self) -> None:
        self.tasks: dict[int, dict] = {}
        self.open: dict[tuple[int, int], dict] = {}  # (task, entry) -> its row (the stack record comes last)

    def _entry(self, task: int, entry: int) -> dict | None:
        key = (task, entry)
        row = self.open.get(key)
        if row is None:
            t = self.tasks.get(task)
            if t is None:
                if len(self.tasks) >= TASKS_KEPT:
                    return None
                t = self.tasks[task] = {"comm": "", "entries": [], "more": 0}
            if len(t["entries"]) >= ENTRIES_KEPT:
                t["more"] += 1
                self.open[key] = row = {}  # counted, not kept
                return row
            row = {"entry": entry, "epoch": None, "seq": "", "requests": [], "cookie": None, "walks": 0,
                   "cached": 0, "callbacks": 0, "point": "", "end": ""}
            t["entries"].append(row)
            self.open[key] = row
        return row

    def event(self, e: dict) -> None:
        ev = e["ev"]
        if ev not in ("request", "walk", "trace", "task_work", "callback", "return_to_user", "exit", "stack", "fork"):
            return
        if ev == "fork":
            return
        row = self._entry(e["task"], e.get("entry", 0))
        if not row:  # a task past TASKS_KEPT, or an entry past ENTRIES_KEPT
            return
        if row["epoch"] is None and "epoch" in e:
            row["epoch"] = e["epoch"]
        code = {"request": "R", "walk": "W", "trace": "T", "task_work": "K", "callback": "C",
                "return_to_user": "U", "exit": "X", "stack": "S"}[ev]
        if ev == "request":
            row["requests"].append(e["ret"])
            if e["ret"] == 1:
                code = "r"  # already pending: the request joined the entry's cookie
            elif e["ret"] < 0:
                code = "E"
            if e.get("cookie"):
                row["cookie"] = e["cookie"]
        elif ev == "walk":
            row["walks"] += 1
        elif ev == "trace":
            row["cached"] += bool(e.get("cached"))
            code = "t" if e.get("cached") else "T"
        elif ev == "callback":
            row["callbacks"] += 1
            row["cookie"] = e.get("cookie", row["cookie"])
        elif ev == "stack":
            row["point"] = e.get("point", "")
            self.tasks[e["task"]]["comm"] = e.get("comm", "")
        elif ev in ("return_to_user", "exit"):
            row["end"] = "exit" if ev == "exit" else "user"
        if len(row["seq"]) < 40:
            row["seq"] += code


TIMELINE_COLUMNS = ("entry", "epoch", "seq", "requests", "cookie", "walks", "cached", "callbacks", "point", "end")


def compact_timeline(t: dict) -> dict:
    """A task's timeline for embedding: each entry as a list in :data:`TIMELINE_COLUMNS` order."""
    return {"comm": t["comm"], "more": t["more"],
            "entries": [[r[c] for c in TIMELINE_COLUMNS] for r in t["entries"]]}


def read_scenario(path: Path, keep_samples: bool = False) -> ScenarioRun:
    """One scenario's log, in one pass (see the module docstring for what is kept)."""
    name = path.name[: -len(".jsonl")]
    s = ScenarioRun(name=name, path=path)
    timeline = _Timeline()
    with open(path, encoding="utf-8") as fp:
        for line_no, line in enumerate(fp, 1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RunDirError(f"{path}: line {line_no}: not JSON ({exc.msg})") from None
            ev = e.get("ev")
            if ev == "end":
                s.end = e
                continue
            if ev == "request":
                s.requests[e.get("ret")] += 1
            elif ev == "walk":
                s.walks += 1
            elif ev == "callback":
                s.callbacks += 1
            timeline.event(e)
            if ev == "stack":
                _stack(s, e)
                if keep_samples:
                    unw = e.get("unwinder", "")
                    s.samples.append((e.get("comm", ""), e["task"], e.get("seq", 0), e["frames"].get(unw, [])))
    s.timelines = timeline.tasks
    return s


def _stack(s: ScenarioRun, e: dict) -> None:
    s.stacks += 1
    s.own += e.get("own") is not None
    unw = e.get("unwinder", "")
    s.unwinder = s.unwinder or unw
    s.folded[fold_frames(e.get("comm", ""), e["frames"].get(unw, []))] += 1
    for v in e["verdicts"]:
        oracle = v["oracle"]
        if oracle not in s.oracles:
            s.oracles.append(oracle)
        s.verdicts[(oracle, v["verdict"])] += 1
        if v["verdict"] == "not checked":
            s.not_checked[(oracle, v.get("reason", ""))] += 1
        kept = False
        for d in v.get("divergences") or []:
            cause = d.get("cause")
            if cause is None:
                s.unexplained[oracle] += 1
                continue
            s.causes[(oracle, cause)] += 1
            ex = s.examples.setdefault((oracle, cause), [])
            if len(ex) < EXAMPLES_PER_CAUSE and not kept:
                ex.append(_example(e, v, s.name))
                kept = True
        if v["verdict"] == "failure":
            s.failed_pairs += 1
            if len(s.failures) < FAILURES_KEPT:
                s.failures.append(_example(e, v, s.name))


def _log_order(p: Path, order: Sequence[str]) -> tuple:
    """Scenarios in ``order``, the others by name; ``forkexec.2.jsonl`` (the second run of one
    scenario) after ``forkexec.jsonl``."""
    stem = p.name[: -len(".jsonl")]
    base, _, n = stem.rpartition(".")
    if not (base and n.isdigit()):
        base, n = stem, "1"
    return (order.index(base) if base in order else len(order), base, int(n))


def read_run(path, keep_samples: bool = False, progress=None, order: Sequence[str] = ()) -> RunData:
    """``run.json`` and every ``*.jsonl`` log of a run directory, the scenarios named in ``order``
    first in that order (``harness report`` passes the catalog's, the order ``harness run all``
    runs them), the others by name.

    ``progress``, if given, is called with one line of text per log read (its size, its stacks,
    the seconds it took): the CLI prints them, as a run of all scenarios has logs of tens of MB."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: no such run directory")
    facts = {}
    if (path / "run.json").exists():
        try:
            facts = json.loads((path / "run.json").read_text())
        except json.JSONDecodeError as exc:
            raise RunDirError(f"{path / 'run.json'}: not JSON ({exc.msg})") from None
    order = list(order)
    logs = sorted(path.glob("*.jsonl"), key=lambda p: _log_order(p, order))
    if not logs:
        raise RunDirError(f"{path}: no scenario log (*.jsonl)")
    scenarios = []
    total = sum(p.stat().st_size for p in logs)
    done = 0
    for k, p in enumerate(logs, 1):
        t0 = time.monotonic()
        size = p.stat().st_size
        scenarios.append(read_scenario(p, keep_samples))
        done += size
        line = (f"[{k}/{len(logs)}] {p.name}: {size / 1e6:.1f} MB, {scenarios[-1].stacks} stacks, "
                f"{time.monotonic() - t0:.1f}s ({100 * done / max(total, 1):.0f}% of {total / 1e6:.1f} MB)")
        log.info("%s", line)
        if progress is not None:
            progress(line)
    return RunData(path=path, facts=facts, scenarios=scenarios)
