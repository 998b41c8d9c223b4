"""The soak's ledger (harness/soak/ledger.py) on event streams of the real deferred model.

The model runs forks, exits, requests from NMI and IRQ context, deliveries and cancels (at a
request, and interleaved with a task work's callback walk as the soak does); the ledger must
account for every request that returned 0 with nothing lost, duplicated or reused, and must
catch each of those when the stream is tampered with.  Its memory stays bounded by live tasks.
"""

from __future__ import annotations

import copy
import random

import pytest

from harness.deferred.check import check_events
from harness.deferred.log import EventLog
from harness.deferred.model import IRQ, NMI, Context, DeferredModel, UnwindWork
from harness.deferred.profile import get_profile
from harness.soak.ledger import Ledger


def _soak_events(profile: str, seed: int = 1, rounds: int = 300) -> list[dict]:
    """A soak-like run of the model: workers that fork children that exit, random requests,
    a cancel + re-registration every 25 requests (odd ones inside a delivery's SRCU section)."""
    rng = random.Random(seed)
    log = EventLog(keep=True)
    model = DeferredModel(get_profile(profile), lambda t: [0x401000 + t.pid, 0x402000], log=log)
    works = []
    for i in range(2):
        w = UnwindWork(lambda *a: None, name=f"tracer{i}.0")
        model.init(w)
        works.append(w)
    workers = [model.spawn(100 + i) for i in range(4)]
    children = []
    pid = 1000
    generation = 0
    requests = 0
    cancel_in_delivery = None

    def reregister(i):
        nonlocal generation
        generation += 1
        w = UnwindWork(lambda *a: None, name=f"tracer{i}.{generation}")
        assert model.init(w) == 0
        works[i] = w

    def deliver(task, exiting):
        nonlocal cancel_in_delivery
        steps = model.exit_steps(task) if exiting else model.return_to_user_steps(task)
        if cancel_in_delivery is None:
            for _ in steps:
                pass
            return
        i, cancel_in_delivery = cancel_in_delivery, None
        cancel = model.cancel_steps(works[i])
        started = False
        for step in steps:
            if step == "srcu_lock" and not started:
                started = True
                for c in cancel:
                    if c == "synchronize_srcu":
                        break
        for _ in cancel:
            pass
        reregister(i)

    for _ in range(rounds):
        live = [t for t in workers + children if not t.dead]
        task = rng.choice(live)
        action = rng.random()
        if action < 0.1 and task in workers:
            model.enter_kernel(task, "syscall", cpu=rng.randrange(2))
            pid += 1
            children.append(model.fork(task, pid=pid))
            deliver(task, False)
        elif action < 0.2 and task in children:
            if not task.in_kernel:
                model.enter_kernel(task, "syscall", cpu=task.cpu)
            if rng.random() < 0.5:  # work pending when it exits: delivered in do_exit()
                for w in works:
                    model.request(w, task, task.cpu, Context(IRQ))
            deliver(task, True)
        else:
            if not task.in_kernel:
                model.enter_kernel(task, "irq", cpu=rng.randrange(2))
            kind = NMI if rng.random() < 0.5 else IRQ
            for w in works:
                model.request(w, task, task.cpu, Context(kind))
            requests += 1
            if requests % 25 == 0:
                k = requests // 25
                if k % 2:
                    cancel_in_delivery = k % 2
                else:
                    model.cancel(works[0])
                    reregister(0)
            deliver(task, False)
    assert not model.state_violations()
    return log.events


def _ledger(events) -> Ledger:
    led = Ledger()
    for e in events:
        led.feed(e)
    return led


@pytest.mark.parametrize("profile", ["mainline", "seed-v10"])
def test_every_request_is_accounted_for(profile):
    events = _soak_events(profile)
    assert not check_events(copy.deepcopy(events)).violations  # harness check agrees with the stream
    led = _ledger(events)
    c = led.counts
    assert led.problems() == 0, led.messages
    assert c["owed"] > 100 and c["callbacks"] > 100
    assert c["cancels"] >= 8
    assert c["cancelled"] >= 1  # a cancel landed between a request and its callback
    assert c["delivered_at_exit"] >= 1
    assert c["owed"] == sum(1 for e in events if e["ev"] == "request" and e["ret"] == 0)
    assert c["owed"] == c["delivered"] + c["delivered_at_exit"] + c["cancelled"] + c["shared"] + led.pending
    assert c["callbacks"] == c["delivered"] + c["delivered_at_exit"]
    # bounded: exited tasks are forgotten
    exited = {e["task"] for e in events if e["ev"] == "exit_done"}
    assert exited and not exited & set(led.tasks)


def test_a_dropped_callback_is_lost():
    events = _soak_events("mainline")
    i = next(k for k, e in enumerate(events) if e["ev"] == "callback")
    led = _ledger(events[:i] + events[i + 1:])
    assert led.counts["lost"] == 1
    assert "lost" in led.messages[0]


def test_a_repeated_callback_is_duplicated():
    events = _soak_events("mainline")
    i = next(k for k, e in enumerate(events) if e["ev"] == "callback")
    led = _ledger(events[:i + 1] + [dict(events[i])] + events[i + 1:])
    assert led.counts["duplicated"] == 1
    assert led.counts["lost"] == 0


def test_a_callback_after_its_cancel():
    events = _soak_events("mainline")
    k = next(k for k, e in enumerate(events) if e["ev"] == "cancel")
    tracer = events[k]["tracer"]
    j = max(i for i, e in enumerate(events[:k]) if e["ev"] == "callback" and e["tracer"] == tracer)
    moved = events[:j] + events[j + 1:k + 1] + [events[j]] + events[k + 1:]
    led = _ledger(moved)
    assert led.counts["after_cancel"] == 1


def test_a_cookie_given_to_two_entries():
    events = _soak_events("mainline")
    cookies = []
    for e in events:
        if e["ev"] == "request" and e["ret"] >= 0 and e["cookie"] not in cookies:
            cookies.append(e["cookie"])
    first, later = cookies[0], cookies[5]
    tampered = [dict(e, cookie=first) if e.get("cookie") == later else e for e in events]
    led = _ledger(tampered)
    assert led.counts["cookie_reuse"] == 1
    assert led.counts["cookie_mismatch"] == 0


def test_two_cookies_in_one_entry():
    events = _soak_events("mainline")
    i = next(k for k, e in enumerate(events) if e["ev"] == "callback")
    tampered = events[:i] + [dict(events[i], cookie=events[i]["cookie"] + (2 << 32))] + events[i + 1:]
    led = _ledger(tampered)
    assert led.counts["cookie_mismatch"] == 1


@pytest.mark.parametrize("argv", [["--nmi-share", "1.5"], ["--requests", "0"], ["--tasks", "-1"],
                                  ["--cancel-every", "x"]])
def test_bench_soak_refuses_bad_arguments_before_booting(argv, capsys):
    from harness.cli import main

    try:
        code = main(["bench", "soak", *argv])
    except SystemExit as exc:  # argparse's own refusals (harness.cli.Parser exits 2)
        code = exc.code
    assert code == 2
    assert "harness" in capsys.readouterr().err
