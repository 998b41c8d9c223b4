"""The main job when things go wrong: a program that crashes, a guest that panics mid-run,
and sampling at a fixed NMI rate.  The run records what happened and the log keeps it all."""

from __future__ import annotations

import collections
import dataclasses
import json
import time

import pytest

from harness.deferred.check import check_lines
from harness.deferred.log import JsonlFile, LogWriteError
from harness.images.programs import Variant
from harness.scenarios.catalog import CATALOG, Scenario, programs_for
from harness.scenarios.engine import Engine
from harness.session import GuestSpec
from tests.support.guest_pool import GuestPool

pytestmark = pytest.mark.qemu

CRASH = Variant(shadow=True)


def crash_scenario(mode: str) -> Scenario:
    # 10 NMIs a second with the guest running in between: the program dies after 1.5 s of the
    # guest's time, which stands still while a stop holds the guest (12-13 requests at load 5).
    # On a loaded machine the stops get long, and the NMIs, due by the host's clock, come closer
    # together in the guest's: 40 requests once passed in less than the program's 1.5 s
    # (campaign run s4, 2026-12-06, 39 of its 40 NMI stops held while read), so the budget is
    # far above what the crash needs; the crash, not the budget, ends the run.
    return Scenario(f"crash-{mode}", program="crash", variant=CRASH, args=("1500", mode),
                    samples=400, rate=10.0)


# The default guest, from the worker's pool (tests/conftest.py), for the crash and the rate.
POOL_GUESTS = [GuestSpec(programs=programs_for([crash_scenario("segv"), CATALOG["fp-spin"]]))]


@pytest.mark.pool_guest(POOL_GUESTS[0])
def test_a_program_that_crashes_ends_its_stacks_not_the_run(tmp_path, guest_pool):
    sc = crash_scenario("segv")
    # A program's crash is no guest's: the pool's guest, checked when it is given back.
    with guest_pool.take(GuestSpec(programs=programs_for([sc]))) as sess:
        with open(tmp_path / "log.jsonl", "w") as log:
            r = Engine(sess, sc, log).run()
        assert sess.machine.alive()
    assert not r.errors and not r.failures and not r.invariant_violations, (r.errors, r.failures[:2])
    assert r.own_stacks >= 1  # it was sampled before it crashed
    # The run noticed the crash (128 + SIGSEGV) and ended sampling instead of waiting for
    # requests that could no longer land on the program.
    assert r.program_exit == 139, (r.program_exit, r.sampled, r.stops, r.loop_seconds, r.notes)
    assert 0 < r.sampled < sc.samples
    assert any("exited with status 139" in n for n in r.notes), r.notes
    assert check_lines(open(tmp_path / "log.jsonl")).clean


def test_a_guest_panic_mid_run_is_recorded_and_the_log_kept(tmp_path):
    sc = crash_scenario("panic")
    log_path = tmp_path / "log.jsonl"
    # A guest of its own (it panics), from a pool of its own: the panicked guest must never be
    # kept for a next user (tests/conftest.py's pool, which the other tests here share).
    spec = GuestSpec(programs=programs_for([sc]))
    pool = GuestPool([spec])
    with pool.take(spec) as sess:
        with open(log_path, "w") as log:
            r = Engine(sess, sc, log).run()
        # The panic closes QEMU's sockets (the run's error) a moment before the process is gone.
        deadline = time.monotonic() + 10
        while sess.machine.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not sess.machine.alive()
    assert pool.discarded == ["QEMU is gone"] and pool.idle(spec) is None and pool.boots == 1
    text = "\n".join(r.errors)
    assert "TargetDied" in text or "GuestDied" in text
    assert "sysrq" in text.lower() or "panic" in text.lower()
    lines = log_path.read_text().splitlines()
    assert len(lines) > 5 and all(json.loads(line) for line in lines)
    assert check_lines(lines).events == len(lines)  # still a readable log


@pytest.mark.pool_guest(POOL_GUESTS[0])
def test_sampling_at_a_fixed_rate(guest_pool):
    sc = dataclasses.replace(CATALOG["fp-spin"], samples=20, rate=20.0)
    with guest_pool.take(GuestSpec(programs=programs_for([sc]))) as sess:
        r = Engine(sess, sc).run()
    assert not r.errors and not r.failures
    assert r.loop_seconds >= 19 / 20.0  # 20 NMIs at 20 per second take about a second


class SmallDisk(JsonlFile):
    """A log on a disk that fills up at a stack record past its first ``limit`` lines: the
    record is refused as JsonlFile refuses one on ENOSPC (tmpfs of 200 KiB, without root)."""

    def __init__(self, path, limit: int):
        super().__init__(path)
        self.limit = limit

    def write(self, text: str) -> int:
        if self.failed is None and self.lines >= self.limit and '"ev":"stack"' in text:
            self.failed = LogWriteError(f"cannot write {self.path}: No space left on device")
            raise self.failed
        return super().write(text)


@pytest.mark.pool_guest(POOL_GUESTS[0])
def test_a_full_disk_leaves_the_counts_agreeing_with_the_log(tmp_path, guest_pool):
    sc = dataclasses.replace(CATALOG["fp-spin"], samples=60)
    log = SmallDisk(tmp_path / "fp-spin.jsonl", limit=150)
    with guest_pool.take(GuestSpec(programs=programs_for([sc]))) as sess:
        engine = Engine(sess, sc, log)
        with pytest.raises(LogWriteError):
            engine.run()
    log.close()
    r = engine.result
    records = [json.loads(line) for line in (tmp_path / "fp-spin.jsonl").read_text().splitlines()]
    stacks = [e for e in records if e["ev"] == "stack"]
    assert stacks and r.stacks == len(stacks)  # the refused record is not counted
    for oracle in r.oracles:  # each oracle's columns: the stacks it judged, those of the log
        assert sum(n for (o, _), n in r.pairs.items() if o == oracle) == r.stacks, (oracle, r.pairs)
    logged = collections.Counter(dv["cause"] for e in stacks for v in e["verdicts"]
                                 for dv in v.get("divergences", []) if dv["cause"])
    assert r.causes == logged
    assert r.own_stacks == sum(e["own"] is not None for e in stacks)
