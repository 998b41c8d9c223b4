"""Judging one (unwinder, oracle) pair on one stack: align the two frame lists, prove every
difference with a cause.

The lists are walked in step while they agree.  Where they part, three stories are tried, each
only as far as a registered cause proves it (:func:`harness.verdicts.causes.explain`):

* the unwinder *lost* the oracle's frame j and goes on in step after it (a skip);
* the oracle lacks the unwinder's frame i (a skip: the shadow stack knows only instrumented code);
* the rest differs from here on: the unwinder *ends* early, goes on *past the oracle's end*, or
  *differs* -- one divergence for the whole rest, proven by what made that one step go wrong.

Of the complete stories the one that keeps the most frames in step wins, then the one with the
fewest divergences.  With none, the verdict is a failure showing the best partial story and its
first unexplained divergence.  Frames the unwinder reports past the oracle's end are compared
like any others: they need a cause too.

A skip inside a run of equal entries (recursion: rec+0x2a, rec+0x2a, ...) is explained at the run's
first entry: removing any entry of the run leaves the same list, and only at the run's start does
the frame before it tell why.  Both lists' indices move back to it together, so the frame before
the skip is one frame of both (an FP walk from an IP at rec+0, 363 levels down, loses the first
rec+0x2a: the divergence names that IP, where fp-prologue-ip finds the prologue).
"""

from __future__ import annotations

from ..oracles.base import NotChecked, Oracle, OracleFrames, Stack
from .causes import explain
from .types import (
    AGREE,
    DIFFERS,
    ENDS,
    EXPLAINED,
    EXTRA,
    FAILURE,
    LOST,
    NOT_CHECKED,
    PAST_END,
    REGS,
    Divergence,
    PairVerdict,
)

__all__ = ["MAX_DIVERGENCES", "judge"]

MAX_DIVERGENCES = 8  # per pair and stack: more is not a story, it is a failure


def judge(stack: Stack, oracle: Oracle, frames: OracleFrames | NotChecked) -> PairVerdict:
    u = stack.unwinder
    if isinstance(frames, NotChecked):
        return PairVerdict(u, oracle.name, FAILURE if frames.failure else NOT_CHECKED, [], frames.reason)
    if oracle.registers:
        return _judge_regs(stack, oracle.name, frames)
    got = tuple(stack.trace.ips)
    if got == frames.ips:
        return PairVerdict(u, oracle.name, AGREE)
    ok, divs = _align(stack, oracle.name, got, frames)
    return PairVerdict(u, oracle.name, EXPLAINED if ok else FAILURE, divs)


def _judge_regs(stack: Stack, name: str, frames: OracleFrames) -> PairVerdict:
    r, w = stack.regs, frames.regs
    got, want = (r.ip, r.sp, r.bp), (w.ip, w.sp, w.bp)
    if got == want:
        return PairVerdict(stack.unwinder, name, AGREE)
    d = explain(stack, Divergence(stack.unwinder, name, REGS, 0, 0, got, want))
    return PairVerdict(stack.unwinder, name, EXPLAINED if d.explained else FAILURE, [d])


def _run_start(seq: tuple[int, ...], idx: int) -> int:
    k = idx
    while k - 1 >= 1 and seq[k - 1] == seq[idx]:
        k -= 1
    return k


def _back_to_run_start(run: tuple[int, ...], r: int, other: tuple[int, ...], o: int) -> int:
    """How many entries a skip of ``run[r]`` moves back to the first entry of its run of equal
    entries, in step with ``other`` (at ``o``): both lists' indices move back alike, so the frame
    before the skip is the same frame in both (as a cause reads it: the IP before a prologue's
    lost caller, not the recursion's 362nd return address), no further than they agree, and in
    neither list onto entry 0, as :func:`_run_start` (an IP right after a recursive call returned
    equals the run's return addresses: the walks start there alike, it is no frame to lose)."""
    start, t = _run_start(run, r), 0
    while r - t > start and o - t > 1 and other[o - t - 1] == run[r - t - 1]:
        t += 1
    return t


def _align(stack: Stack, oracle: str, got: tuple[int, ...], of: OracleFrames) -> tuple[bool, list[Divergence]]:
    want = of.ips
    best: list = []  # [(score, ok, divs)]
    seen: set[tuple[int, int, int]] = set()

    def div(kind: str, i: int, j: int) -> Divergence:
        return explain(stack, Divergence(stack.unwinder, oracle, kind, i, j, got, want, of.marks, of.outermost))

    def consider(ok: bool, matched: int, divs: list[Divergence]) -> None:
        score = (ok, matched, -len(divs))
        if not best or score > best[0][0]:
            best[:] = [(score, ok, divs)]

    def walk(i: int, j: int, divs: list[Divergence], matched: int) -> None:
        while i < len(got) and j < len(want) and got[i] == want[j]:
            # not mutated (equivalent: matched only ranks candidates against each other, so
            # counting 2 a match, or any positive step, ranks them the same)
            i, j, matched = i + 1, j + 1, matched + 1  # pragma: no mutate
        if i == len(got) and j == len(want):
            consider(True, matched, divs)
            return
        if (i, j, len(divs)) in seen:
            return
        # not mutated (equivalent: a state seen again has the same matched, (i + j -
        # len(divs)) / 2, and its search finds no strictly better score; only the cost changes)
        seen.add((i, j, len(divs)))  # pragma: no mutate
        rest = ENDS if i == len(got) else PAST_END if j == len(want) else DIFFERS
        # not mutated (equivalent: "i == 0 and j == 0" for "i == 0 or j == 0", as here i
        # is 0 exactly when j is: both start at 0, move together in a match, and the recursion
        # below starts from i, j >= 1; the line's other mutants are killed by test_align_gaps.py)
        if i == 0 or j == 0 or len(divs) >= MAX_DIVERGENCES:  # pragma: no mutate
            consider(False, matched, [*divs, div(rest, i, j)])  # the first entries must agree
            return
        if i < len(got) and j < len(want):
            t = _back_to_run_start(want, j, got, i)
            d = div(LOST, i - t, j - t)
            if d.explained:
                walk(i, j + 1, [*divs, d], matched)
        if i < len(got):
            t = _back_to_run_start(got, i, want, j)
            d = div(EXTRA, i - t, j - t)
            if d.explained:
                walk(i + 1, j, [*divs, d], matched)
        d = div(rest, i, j)
        consider(d.explained, matched, [*divs, d])

    walk(0, 0, [], 0)  # pragma: no mutate (equivalent: a start other than 0 shifts every candidate's matched alike)
    _, ok, divs = best[0]
    return ok, divs
