"""Mutations of real logs never pass ``harness check`` (issue 21): 10^5 of them in the bounded run,
a hypothesis search that shrinks a failure to its simplest mutation, and each kind of mutation seen
to be caught the way it must be (tests/support/log_mutations.py says what is allowed)."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.log_mutations import MutationPassed, check_decoded_intact, judge, mutate, run_check, seeds
from tests.support.tiers import unit_share

SEEDS = seeds()
NAMES = sorted(SEEDS)
TOTAL = 100_000  # mutated logs in the bounded run, over CHUNKS tests (pytest-xdist spreads them)
CHUNKS = 4


def test_every_seed_passes_as_written():
    for name, lines in SEEDS.items():
        v = run_check("".join(x + "\n" for x in lines).encode())
        assert v.ok and v.sealed, (name, v.messages())


# one chunk (25,000 logs) in the unit tier, the others in the deep tier (tests/support/tiers.py)
@pytest.mark.parametrize("chunk", unit_share(range(CHUNKS), CHUNKS))
def test_no_mutated_log_passes(chunk):
    rng = random.Random(chunk)
    outcomes: Counter = Counter()
    failures = []
    start = time.monotonic()
    for i in range(TOTAL // CHUNKS):
        name = NAMES[i % len(NAMES)]
        data, m = mutate(rng, SEEDS[name])
        try:
            outcomes[judge(SEEDS[name], data, m).kind] += 1
        except MutationPassed as exc:
            failures.append(f"{name}: {exc}")
    print(f"chunk {chunk}: {TOTAL // CHUNKS} mutated logs in {time.monotonic() - start:.1f} s: {dict(outcomes)}")
    assert not failures, f"{len(failures)} mutated logs passed or were misjudged:\n" + "\n".join(failures[:20])
    check_decoded_intact()  # the seeds' lines, decoded once and shared by every check, were not changed
    # the generator is not degenerate: every way a log goes wrong is reached
    assert outcomes["format"] > TOTAL // CHUNKS // 2
    assert min(outcomes[k] for k in ("incomplete", "digest", "unreadable")) > 50, outcomes


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False), name=st.sampled_from(NAMES))
def test_no_mutated_log_passes_hypothesis(rng, name):
    data, m = mutate(rng, SEEDS[name])
    judge(SEEDS[name], data, m)


def test_the_judge_catches_a_checker_that_trusts():
    """The judge itself can fail: a 'checker' that passes everything is caught on the first
    mutation that is no no-op."""
    rng = random.Random(5)

    class Passed:
        ok = clean = complete = True
        violations: list = []

        def messages(self):
            return []

    caught = 0
    for i in range(200):
        name = NAMES[i % len(NAMES)]
        data, m = mutate(rng, SEEDS[name])
        try:
            judge(SEEDS[name], data, m, result=Passed())
        except MutationPassed:
            caught += 1
    assert caught > 150
