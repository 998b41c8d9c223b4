"""Divergences and verdicts as data: what differed, where, and the cause that proves why.

A :class:`Divergence` is one place where an unwinder's frame list and an oracle's disagree: the
pair, its kind, the index in each list, both lists, and, once a cause from the closed registry
(:mod:`harness.verdicts.causes`) has proven it, that cause's name and the evidence its predicate
looked at.  A divergence no cause proves is a failure.  A :class:`PairVerdict` is the outcome
for one (unwinder, oracle) pair on one stack.  Nothing here is display text but the evidence's
own one-line ``text``; renderers (:mod:`harness.report`) draw the rest from the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = [
    "AGREE",
    "DIFFERS",
    "ENDS",
    "EXPLAINED",
    "EXTRA",
    "FAILURE",
    "KINDS",
    "LOST",
    "NOT_CHECKED",
    "PAST_END",
    "REGS",
    "VERDICTS",
    "Divergence",
    "PairVerdict",
]

# Kinds of divergence.  got = the unwinder's frames, want = the oracle's; i, j their indices.
LOST = "lost"  # the unwinder lacks want[j] (and goes on in step with the oracle after it)
EXTRA = "extra"  # the oracle lacks got[i] (the shadow stack knows only instrumented functions)
ENDS = "ends"  # the unwinder's walk ended at i; the oracle goes on from j
PAST_END = "past_end"  # the oracle ended at j; the unwinder reports more frames from i
DIFFERS = "differs"  # from got[i] / want[j] on, the two lists disagree
REGS = "regs"  # the registers the walk started from are not those the request was about
KINDS = (LOST, EXTRA, ENDS, PAST_END, DIFFERS, REGS)

AGREE, EXPLAINED, FAILURE, NOT_CHECKED = "agree", "explained", "failure", "not checked"
VERDICTS = (AGREE, EXPLAINED, FAILURE, NOT_CHECKED)

_WHAT = {
    LOST: "{u} lacks {o}'s frame #{j}",
    EXTRA: "{o} lacks {u}'s frame #{i}",
    ENDS: "{u} ends after {i} frames, {o} goes on",
    PAST_END: "{u} goes on past {o}'s last frame (#{j_1})",
    DIFFERS: "{u} and {o} differ from frame #{i}",
}


@dataclass(frozen=True)
class Divergence:
    unwinder: str
    oracle: str
    kind: str
    got_index: int  # i: the first unwinder frame concerned (len(got) for ENDS)
    want_index: int  # j: the first oracle frame concerned (len(want) for PAST_END)
    got: tuple[int, ...]
    want: tuple[int, ...]
    want_marks: frozenset[int] = frozenset({0})  # oracle entries that are interrupted IPs
    want_outermost: bool = True  # the oracle's walk ended at the outermost frame
    cause: str | None = None
    evidence: dict | None = None
    # Cross-examination (harness.toolchain.witness): the outcome over the cause's claims about
    # binaries (confirmed, contradicted, unverifiable; None: not cross-examined) and each claim's
    # testimony, as records.
    cross: str | None = None
    testimony: tuple[dict, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown divergence kind {self.kind!r}")

    @property
    def explained(self) -> bool:
        return self.cause is not None

    def proven(self, cause: str, evidence: dict) -> Divergence:
        return replace(self, cause=cause, evidence=evidence)

    def what(self) -> str:
        """The divergence itself, without its cause: 'fp lacks cfi's frame #3'."""
        if self.kind == REGS:
            # ip/sp/bp, or as many of them as are known (perf's deferred record gives only the IP)
            def regs(v: tuple[int, ...]) -> str:
                return f"{'/'.join(('ip', 'sp', 'bp')[:len(v)])} {'/'.join(f'{x:#x}' for x in v)}"
            return f"the walk started from {regs(self.got)}, the request was about {regs(self.want)}"
        return _WHAT[self.kind].format(u=self.unwinder, o=self.oracle, i=self.got_index, j=self.want_index,
                                       j_1=self.want_index - 1)

    @property
    def contradicted(self) -> bool:
        return self.cross == "contradicted"

    @property
    def text(self) -> str:
        if self.contradicted:
            t = next(t for t in self.testimony if t["outcome"] == "contradicted")
            return (f"{self.what()}: cause-contradicted: {self.cause} claims {t['claimed']}; "
                    f"{t['command']} says: {t['said']}")
        if self.evidence is not None:
            return f"{self.what()}: {self.evidence.get('text', self.cause)}"
        return f"{self.what()}: no cause proves it"

    def as_record(self) -> dict:
        out = {"kind": self.kind, "got_index": self.got_index, "want_index": self.want_index,
               "cause": self.cause, "evidence": self.evidence or {}, "text": self.text}
        if self.cross is not None:
            out["cross"] = self.cross
            out["testimony"] = list(self.testimony)
        return out


@dataclass
class PairVerdict:
    unwinder: str
    oracle: str
    verdict: str
    divergences: list[Divergence] = field(default_factory=list)
    reason: str = ""  # why the oracle did not check this stack (NOT_CHECKED), or what failed

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")

    @property
    def failed(self) -> bool:
        return self.verdict == FAILURE

    def first_unexplained(self) -> Divergence | None:
        return next((d for d in self.divergences if not d.explained), None)

    def as_record(self) -> dict:
        out = {"unwinder": self.unwinder, "oracle": self.oracle, "verdict": self.verdict,
               "divergences": [d.as_record() for d in self.divergences]}
        if self.reason:
            out["reason"] = self.reason
        return out
