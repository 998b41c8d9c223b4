"""A fuzz campaign: draw (shape, build) examples, check each, shrink each new signature, keep
one reproducer per signature; replay a reproducer; merge the results of several campaigns.

Seeds.  A campaign runs seeds ``A..B-1`` in order, each one hypothesis run of the test function
below under ``@hypothesis.seed(s)`` with ``database=None`` (no example database: nothing from an
earlier run leaks in) and at most :data:`EXAMPLES_PER_SEED` examples.  ``hypothesis.seed(s)``
seeds the engine's ``random.Random`` with ``s``, so seed ``s`` draws the same examples on every
machine with the same hypothesis version and strategies: ``--seeds 0:50`` and ``--seeds 50:100``
split one campaign in two, and :func:`merge` joins them.

Two phases, in rounds.  The search (the time left less ``shrink_share`` of it, or all of it while
no signature waits to be shrunk) runs the seeds with
hypothesis' generate phase only and records every signature, the first program that showed it
and its seed.  Then each signature is shrunk, the unwinders' disagreements first
(:func:`_priority`), with hypothesis' own shrinker: the signature's seed is run again with the
generate and shrink phases and a test function that raises exactly when an example shows that
signature (the same defect in the same toolchain, linker and flags, since the signature names
them).  Generation replays the seed's examples from the cache (same seed, same outcomes before
it: the same examples) up to the first that showed it, and hypothesis shrinks that one; the
smallest example that raised is the reproducer.  Results are cached by (shape, build), so the
replay and repeated candidates cost no build; an example that raised once raises again (no
flakiness); when a shrink's time (``shrink_budget``, and never past the budget) runs out the
function accepts no new candidate, which ends the shrink with the smallest found so far.  A
signature the budget leaves unshrunk keeps its first program (marked so).  Time left after the
shrinks goes to another round (the next seeds, then their new signatures' shrinks): a campaign
that finds little searches for its whole budget.

Budget: ``budget`` seconds of wall time for the whole campaign.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from ..errors import EXIT_USAGE, HarnessError
from ..images.errors import ImageError
from ..progress import step
from .build import DEFAULT_TOOLCHAINS, LINKERS, BuildConfig, Built, build, build_source, configs, fit_abi, toolchain
from .finding import Finding, Signature
from .shape import MAX_FUNCS, Shape, shapes

Checker = Callable[[Built], list[Finding]]
EXAMPLES_PER_SEED = 10
SHRINK_SHARE = 0.4  # of the budget kept for shrinking (the search stops before)
SHRINK_BUDGET = 30.0  # seconds one signature's shrink may take (and never past the campaign's budget)
CAMPAIGN_JSON = "campaign.json"
SIGNATURE_JSON = "signature.json"


class CampaignError(HarnessError):
    """Bad campaign input: a seed range that is empty, a directory that is not a campaign's or a
    reproducer's."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Example:
    shape: Shape
    config: BuildConfig

    @property
    def size(self) -> int:
        return self.shape.size


def examples(toolchains: Iterable[str] = DEFAULT_TOOLCHAINS, linkers: Iterable[str] = LINKERS,
             max_funcs: int = MAX_FUNCS, matrix: st.SearchStrategy[BuildConfig] | None = None,
             ) -> st.SearchStrategy[Example]:
    """(shape, build) pairs; ``matrix`` replaces the build matrix's strategy (a test's one build).
    A drawn i386 build of a toolchain without the i386 multilib for the shape's language is its
    x86-64 build (:func:`~harness.fuzz.build.fit_abi`)."""
    return st.builds(Example, shapes(max_funcs), matrix if matrix is not None else configs(tuple(toolchains),
                                                                                           tuple(linkers))
                     ).map(lambda ex: Example(ex.shape, fit_abi(ex.config, ex.shape.lang == "c++")))


@dataclass
class Record:
    """One signature in a campaign: how many programs showed it, where first, its reproducer."""

    signature: Signature
    programs: int = 0
    occurrences: int = 0
    first_seed: int | None = None
    example: Example | None = None  # the shrunk example
    finding: Finding | None = None
    shrink_steps: int = 0
    shrunk: bool = False
    first: tuple[Example, Finding] | None = None  # the first program that showed it

    def to_json(self) -> dict:
        return {"signature": self.signature.to_json(), "programs": self.programs, "occurrences": self.occurrences,
                "first_seed": self.first_seed, "shrink_steps": self.shrink_steps, "shrunk": self.shrunk,
                "reproducer": self.signature.id if self.example is not None else None,
                "size": _size_json(self.example) if self.example is not None else None,
                "message": self.finding.message if self.finding is not None else None}


def _size_json(ex: Example) -> dict:
    return {"functions": len(ex.shape.funcs), "features": sorted(ex.shape.features()),
            "shape": ex.shape.describe(), "score": ex.size}


@dataclass
class Campaign:
    """The state and result of one campaign."""

    mode: str
    seeds: tuple[int, int]
    budget: float
    toolchains: tuple[str, ...]
    linkers: tuple[str, ...]
    programs: int = 0  # examples checked while searching (shrink candidates not counted)
    builds: int = 0  # every build, shrink candidates included
    seeds_done: int = 0
    elapsed: float = 0.0
    records: dict[Signature, Record] = field(default_factory=dict)
    expected: Counter = field(default_factory=Counter)
    instructions: int = 0
    object_instructions: int = 0  # static: compared in the compilers' objects, before the link
    per_toolchain: Counter = field(default_factory=Counter)  # programs checked while searching, by toolchain
    per_linker: Counter = field(default_factory=Counter)
    stacks: int = 0  # live: stacks checked in the guest
    vdso_stacks: int = 0  # live: of which sampled in the vDSO
    perf_compared: int = 0  # live: Debian perf's deferred records compared with our unwinder
    perf_skipped: Counter = field(default_factory=Counter)  # live: programs without the perf oracle, by why
    reproducers: dict[Signature, Path] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"mode": self.mode, "seeds": list(self.seeds), "budget": self.budget,
                "toolchains": list(self.toolchains), "linkers": list(self.linkers), "programs": self.programs,
                "builds": self.builds, "seeds_done": self.seeds_done, "elapsed": round(self.elapsed, 1),
                "instructions": self.instructions, "object_instructions": self.object_instructions,
                "per_toolchain": dict(sorted(self.per_toolchain.items())),
                "per_linker": dict(sorted(self.per_linker.items())),
                "stacks": self.stacks, "vdso_stacks": self.vdso_stacks, "perf_compared": self.perf_compared,
                "perf_skipped": dict(sorted(self.perf_skipped.items())), "expected": dict(self.expected),
                "signatures": [r.to_json() for r in sorted(self.records.values(), key=lambda r: r.signature)]}


def _bound(fn, seed: int):
    """``fn(ex, seed)`` as a function of ``ex`` alone (``@given`` refuses default arguments)."""
    return lambda ex: fn(ex, seed)


#: the order signatures are shrunk in: disagreements of the unwinders first, then build failures,
#: then what the linker alone decides (one defect, many signatures)
_KIND_ORDER = ("sframe-step", "sframe-object", "fp-step", "sframe-no-fre", "sframe-check", "sframe-dropped",
               "build-failed", "sframe-missing")


def _priority(rec: Record) -> tuple:
    sig = rec.signature
    linker_only = sig.flags.count(" ") == 1  # link-only flags: "sframe dyn"
    return (linker_only, _KIND_ORDER.index(sig.kind) if sig.kind in _KIND_ORDER else len(_KIND_ORDER), sig)


class _Found(Exception):
    """Raised inside the hypothesis test: this example shows the signature being shrunk."""


class Evaluator:
    """Builds and checks examples in ``work`` (each build removed once checked), its findings
    cached by (shape, build): a replayed seed and a repeated candidate cost no build."""

    def __init__(self, checker: Checker, work: Path):
        self.checker, self.work = checker, work
        self.cache: dict[tuple, list[Finding]] = {}
        self.builds = 0
        self._counter = iter(range(1 << 62))

    def __call__(self, ex: Example) -> list[Finding]:
        key = (ex.shape, ex.config)
        if key not in self.cache:
            dest = self.work / f"b{next(self._counter)}"
            built = build(ex.shape, ex.config, dest)
            self.builds += 1
            try:
                self.cache[key] = self.checker(built)
            finally:
                shutil.rmtree(dest, ignore_errors=True)
        return self.cache[key]


def hypothesis_run(strategy: st.SearchStrategy[Example], seed: int, test, phases, examples_per_seed: int) -> None:
    """One seed's hypothesis run of ``test`` (no example database, no deadline, no health check)."""
    wrapped = hypothesis.seed(seed)(settings(
        database=None, deadline=None, max_examples=examples_per_seed, derandomize=False, phases=phases,
        suppress_health_check=list(HealthCheck), report_multiple_bugs=False, print_blob=False,
    )(hypothesis.given(strategy)(test)))
    try:
        wrapped()
    except _Found:
        pass


def shrink_record(rec: Record, evaluate: Callable[[Example], list[Finding]], strategy: st.SearchStrategy[Example],
                  end: float, examples_per_seed: int = EXAMPLES_PER_SEED) -> None:
    """Phase 2 for one signature: run ``rec.first_seed`` again with the generate and shrink phases
    and a test that raises exactly when an example shows ``rec``'s signature; the smallest that
    raised becomes ``rec.example`` (``rec.shrunk``).  No new candidate is accepted after ``end``
    (``time.monotonic()``), which ends the shrink with the smallest found so far."""
    state: dict = {"raised": set(), "best": None}

    def shows(ex: Example) -> bool:
        key = (ex.shape, ex.config)
        if key in state["raised"]:
            return True
        if time.monotonic() >= end and state["best"] is not None:
            return False  # out of time: no new candidate is accepted, the shrink ends
        match = [f for f in evaluate(ex) if f.signature == rec.signature]
        if not match:
            return False
        if state["best"] is not None:
            rec.shrink_steps += 1
        if state["best"] is None or ex.size <= state["best"][0].size:
            state["best"] = (ex, match[0])
        state["raised"].add(key)
        return True

    def test(ex: Example) -> None:
        if shows(ex):
            raise _Found  # the one raise: hypothesis tells failures apart by where they rose

    # The seed's generation replays from the cache up to the first program that showed the
    # signature (same seed, same outcomes before it: the same examples), then shrinks it.
    hypothesis_run(strategy, rec.first_seed, test, (Phase.generate, Phase.shrink), examples_per_seed)
    if state["best"] is not None:
        rec.example, rec.finding, rec.shrunk = state["best"][0], state["best"][1], True


def run(checker: Checker, work: Path, *, seeds: tuple[int, int] = (0, 1000), budget: float = 300.0,
        toolchains: Iterable[str] = DEFAULT_TOOLCHAINS, linkers: Iterable[str] = LINKERS, out: Path | None = None,
        shrink: bool = True, shrink_budget: float = SHRINK_BUDGET, shrink_share: float = SHRINK_SHARE,
        mode: str = "static", examples_per_seed: int = EXAMPLES_PER_SEED, max_funcs: int = MAX_FUNCS,
        matrix: st.SearchStrategy[BuildConfig] | None = None) -> Campaign:
    """Run a campaign (module docstring); ``work`` holds the builds (removed as it goes), ``out``
    receives one reproducer directory per signature and ``campaign.json``."""
    a, b = seeds
    if not 0 <= a < b:
        raise CampaignError(f"seeds {a}:{b}: an empty range (A:B with 0 <= A < B)")
    toolchains, linkers = tuple(toolchains), tuple(linkers)
    for name in toolchains:
        toolchain(name)  # an unavailable root is the harness's error (ImageError), before any seed
    camp = Campaign(mode, seeds, budget, toolchains, linkers)
    start = time.monotonic()
    deadline = start + budget
    strategy = examples(toolchains, linkers, max_funcs, matrix)
    evaluate = Evaluator(checker, work)

    tried: set[Signature] = set()  # shrunk, or given their chance to be

    def search_over() -> bool:
        now = time.monotonic()
        return now >= deadline or (shrink and now >= search_end and any(s not in tried for s in camp.records))

    def search(ex: Example, seed: int) -> None:
        """Phase 1: check the example, count its signatures, remember the first program of each."""
        if search_over():
            return
        findings = evaluate(ex)
        camp.programs += 1
        camp.per_toolchain[ex.config.toolchain] += 1
        camp.per_linker[ex.config.linker] += 1
        for f in findings:
            rec = camp.records.setdefault(f.signature, Record(f.signature, first_seed=seed))
            rec.programs += 1
            rec.occurrences += f.count
            if rec.first is None:
                rec.first = (ex, f)
        st_.update(f"{camp.programs} programs, {len(camp.records)} signatures, seed {seed}")

    search_end = deadline
    next_seed = a
    with step("fuzz", f"{mode} campaign, seeds {a}:{b}, {budget:.0f} s") as st_:
        while True:
            search_end = deadline - (deadline - time.monotonic()) * shrink_share
            first = next_seed
            while next_seed < b and not search_over():
                hypothesis_run(strategy, next_seed, _bound(search, next_seed), (Phase.generate,), examples_per_seed)
                camp.seeds_done += 1
                next_seed += 1
            # Phase 2: shrink the new signatures, the most telling first, until the budget runs out.
            for rec in sorted((r for r in camp.records.values() if r.signature not in tried), key=_priority):
                if not shrink or time.monotonic() >= deadline:
                    break
                tried.add(rec.signature)
                st_.update(f"shrinking {rec.signature.key}")
                shrink_record(rec, evaluate, strategy, min(time.monotonic() + shrink_budget, deadline),
                              examples_per_seed)
            if next_seed == first or next_seed >= b or time.monotonic() >= deadline:
                break
        for rec in camp.records.values():  # never shrunk (the budget ran out): the first program
            if rec.example is None and rec.first is not None:
                rec.example, rec.finding = rec.first
        camp.builds = evaluate.builds
        camp.elapsed = time.monotonic() - start
        st_.end(f"{mode} campaign: {camp.programs} programs ({camp.builds} builds), "
                f"{len(camp.records)} signatures in {camp.elapsed:.0f} s")
    if hasattr(checker, "expected"):
        camp.expected = Counter(checker.expected)
    camp.instructions = getattr(checker, "instructions", 0)
    camp.object_instructions = getattr(checker, "object_instructions", 0)
    camp.stacks = getattr(checker, "stacks", 0)
    camp.vdso_stacks = getattr(checker, "vdso_stacks", 0)
    camp.perf_compared = getattr(checker, "perf_compared", 0)
    camp.perf_skipped = Counter(getattr(checker, "perf_skipped", {}))
    if out is not None:
        write_results(camp, checker, out)
    return camp


# --------------------------------------------------------------------------------- reproducers


def write_results(camp: Campaign, checker: Checker, out: Path) -> None:
    """``out/campaign.json`` and one reproducer directory per signature with an example."""
    out.mkdir(parents=True, exist_ok=True)
    for sig, rec in camp.records.items():
        if rec.example is not None:
            camp.reproducers[sig] = write_reproducer(out / sig.id, rec, checker)
    (out / CAMPAIGN_JSON).write_text(json.dumps(camp.to_json(), indent=1) + "\n")


def write_reproducer(d: Path, rec: Record, checker: Checker) -> Path:
    """Rebuild the record's example into ``d`` and check it again: the source, ``build.sh``, the
    binary, ``signature.json`` (signature, build, shape, the finding with both unwinders'
    results), and the toolchain's own view at the address (``tools.txt``)."""
    if d.exists():
        shutil.rmtree(d)
    ex = rec.example
    built = build(ex.shape, ex.config, d)
    findings = [f for f in checker(built) if f.signature == rec.signature]
    finding = findings[0] if findings else rec.finding
    (d / "build.sh").write_text(_build_sh(built))
    meta = {"signature": rec.signature.to_json(), "config": ex.config.to_json(), "shape": ex.shape.to_json(),
            "source": built.source_name, "reproduced_when_written": bool(findings), "shrunk": rec.shrunk,
            "finding": finding.to_json() if finding else None, "programs": rec.programs,
            "occurrences": rec.occurrences, "size": _size_json(ex),
            "toolchain": _toolchain_json(built)}
    (d / SIGNATURE_JSON).write_text(json.dumps(meta, indent=1) + "\n")
    if built.ok and finding is not None:
        (d / "tools.txt").write_text(tool_output(built, finding))
    return d


def _toolchain_json(built: Built) -> dict:
    """What a reproducer records of the toolchain: its name, versions (``as --version``, ``ld
    --version``, the compiler's ``--version``: first lines), where it links, and a user's
    install's prefix (with which ``replay`` registers it again)."""
    tc = toolchain(built.config.toolchain)
    out = {"name": built.config.toolchain, "binutils": built.binutils, "gcc": built.gcc,
           "compiler": tc.cc, "link": built.link_toolchain, "versions": built.versions}
    link = toolchain(built.link_toolchain) if built.link_toolchain else tc
    if link is not tc:
        out["link_versions"] = link.versions()
    if tc.prefix is not None:
        out["prefix"] = str(tc.prefix)
    return out


def _build_sh(built: Built) -> str:
    lines = ["#!/bin/sh", "# The commands that built ./prog, each run in the toolchain root named in brackets",
             "# (host: this machine; trixie/sid/sid-*: the debootstrap roots of harness/images/toolchain.py;",
             "# another name: a user's install, run on the host).", "set -e"]
    lines += [f"# {key}: {v}" for key, v in built.versions.items()]
    lines += [f"# {c.split('] ', 1)[0]}]\n{c.split('] ', 1)[1]}" for c in built.commands]
    return "\n".join(lines) + "\n"


def tool_output(built: Built, finding: Finding) -> str:
    """What the toolchain's own tools say at the finding's function: ``objdump -d`` of it,
    ``objdump --sframe`` (that root's: it reads its own SFrame version) and ``readelf
    --debug-dump=frames``, the latter two cut to the blocks that cover the address."""
    tc = toolchain(built.config.toolchain)
    outer, inner = tc.workdir("fuzz-tools")
    parts = []
    try:
        shutil.copy(built.binary, outer / "prog")
        if finding.function:
            around = [f"--disassemble={finding.function}"]
        elif finding.addr is not None:  # runtime code (a PLT stub, a libc function): the code around it
            around = [f"--start-address={max(finding.addr - 0x10, 0):#x}", f"--stop-address={finding.addr + 0x20:#x}"]
        else:
            around = []
        runs = [("objdump -d " + " ".join(around), ["objdump", "-d", "--no-show-raw-insn", *around, "prog"]),
                ("readelf --debug-dump=frames", ["readelf", "--debug-dump=frames", "prog"])]
        if built.config.sframe:
            runs.append(("objdump --sframe", ["objdump", "--sframe", "prog"]))
        for title, argv in runs:
            try:
                text = tc.run(argv, cwd=inner, timeout=60).stdout
            except HarnessError as exc:
                text = str(exc)
            cut = finding.addr is not None and not title.startswith("objdump -d")
            if cut:
                text = _blocks_at(text, finding.addr)
            parts.append(f"=== [{tc.name}] {title}" + (f" (the blocks covering {finding.addr:#x})" if cut else "")
                         + f"\n{text.rstrip()}\n")
    finally:
        shutil.rmtree(outer, ignore_errors=True)
    return "\n".join(parts)


def _blocks_at(text: str, addr: int) -> str:
    """The paragraphs of readelf/objdump output whose ``pc=LO..HI`` (readelf) or ``pc = LO, size =
    N`` (objdump --sframe) covers ``addr``; all of it when none does."""
    blocks = re.split(r"\n\s*\n", text)
    keep = []
    for blk in blocks:
        m = re.search(r"pc=([0-9a-f]+)\.\.([0-9a-f]+)", blk)  # readelf: pc=LO..HI
        n = re.search(r"pc = 0x([0-9a-f]+), size = (\d+)", blk)  # objdump --sframe: pc = LO, size = N
        if (m and int(m.group(1), 16) <= addr < int(m.group(2), 16)) or (
                n and int(n.group(1), 16) <= addr < int(n.group(1), 16) + int(n.group(2))):
            keep.append(blk)
    return "\n\n".join(keep) if keep else text


def _load_json(d: Path, name: str, what: str) -> dict:
    p = Path(d) / name
    if not p.is_file():
        raise CampaignError(f"{d}: not {what} (no {name})")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise CampaignError(f"{p}: not JSON ({exc})") from exc


def load_reproducer(d: Path) -> dict:
    return _load_json(d, SIGNATURE_JSON, "a reproducer directory")


@dataclass
class Replay:
    signature: Signature
    reproduces: bool
    findings: list[Finding]
    built: Built


def replay(d: Path, checker: Checker, work: Path) -> Replay:
    """Rebuild the reproducer in ``d`` from its kept source (as it is now: edited by hand or not)
    with its build, and check it: does its signature still show?"""
    meta = load_reproducer(d)
    _register_user(meta)
    sig = Signature.from_json(meta["signature"])
    shape = Shape.from_json(meta["shape"])
    config = BuildConfig.from_json(meta["config"])
    src = Path(d) / meta["source"]
    if not src.is_file():
        raise CampaignError(f"{d}: the reproducer's source {meta['source']} is missing")
    built = build_source(shape, src.read_text(), meta["source"], config, work)
    findings = checker(built)
    return Replay(sig, any(f.signature == sig for f in findings), findings, built)


def _register_user(meta: dict) -> None:
    """A reproducer built by a user's install: register it again under its name (the prefix as
    recorded), unless this run named it already."""
    from ..images.toolchain import USER_TOOLCHAINS, user_toolchain
    tc = meta.get("toolchain") or {}
    if tc.get("prefix") and tc.get("name") not in USER_TOOLCHAINS:
        try:
            user_toolchain(tc["name"], tc["prefix"])
        except ImageError as exc:
            raise CampaignError(f"the reproducer's toolchain {tc['name']}={tc['prefix']} is gone: {exc}") from exc


# --------------------------------------------------------------------------------- merge


def load_campaign(d: Path) -> dict:
    return _load_json(d, CAMPAIGN_JSON, "a campaign result directory")


def merge(dirs: list[Path], out: Path | None = None) -> dict:
    """Join campaign result directories: programs, builds and counts summed, signatures deduplicated
    (each keeps its smallest reproducer, copied into ``out`` when given)."""
    results = [(Path(d), load_campaign(d)) for d in dirs]
    modes = {r["mode"] for _, r in results}
    merged: dict = {"mode": "+".join(sorted(modes)), "merged": [str(d) for d, _ in results],
                    "seeds": sorted({tuple(r["seeds"]) for _, r in results}),
                    "budget": sum(r["budget"] for _, r in results),
                    "toolchains": sorted({t for _, r in results for t in r["toolchains"]}),
                    "linkers": sorted({x for _, r in results for x in r["linkers"]}),
                    "programs": sum(r["programs"] for _, r in results), "builds": sum(r["builds"] for _, r in results),
                    "seeds_done": sum(r["seeds_done"] for _, r in results),
                    "elapsed": round(sum(r["elapsed"] for _, r in results), 1),
                    "instructions": sum(r.get("instructions", 0) for _, r in results),
                    "object_instructions": sum(r.get("object_instructions", 0) for _, r in results),
                    "stacks": sum(r.get("stacks", 0) for _, r in results),
                    "vdso_stacks": sum(r.get("vdso_stacks", 0) for _, r in results),
                    "perf_compared": sum(r.get("perf_compared", 0) for _, r in results)}
    expected: Counter = Counter()
    sigs: dict[str, tuple[dict, Path]] = {}
    for d, r in results:
        expected.update(r.get("expected", {}))
        for s in r["signatures"]:
            key = s["signature"]["key"]
            if key not in sigs:
                sigs[key] = (dict(s), d)
                continue
            have, where = sigs[key]
            have["programs"] += s["programs"]
            have["occurrences"] += s["occurrences"]
            smaller = s["size"] is not None and (have["size"] is None or s["size"]["score"] < have["size"]["score"])
            if smaller:
                keep = {k: s[k] for k in ("reproducer", "size", "message", "shrink_steps", "first_seed")}
                have.update(keep)
                where = d
            sigs[key] = (have, where)
    merged["expected"] = dict(expected)
    for name in ("per_toolchain", "per_linker", "perf_skipped"):
        total: Counter = Counter()
        for _, r in results:
            total.update(r.get(name, {}))
        merged[name] = dict(sorted(total.items()))
    merged["signatures"] = [s for s, _ in sorted(sigs.values(), key=lambda t: t[0]["signature"]["key"])]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for s, src in sigs.values():
            rid = s["reproducer"]
            if rid and (src / rid).is_dir() and (src / rid).resolve() != (out / rid).resolve():
                if (out / rid).exists():
                    shutil.rmtree(out / rid)
                shutil.copytree(src / rid, out / rid)
        (out / CAMPAIGN_JSON).write_text(json.dumps(merged, indent=1) + "\n")
    return merged
