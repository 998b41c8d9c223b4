"""Unit tests of harness.deferred.model: every return value and transition, in both profiles."""

from __future__ import annotations

import io

import pytest

from harness.deferred import (
    EBUSY,
    EINVAL,
    IRQ,
    NMI,
    PF_EXITING,
    PF_KTHREAD,
    SYSCALL,
    Context,
    DeferredModel,
    EventLog,
    ModelBlocked,
    ModelError,
    UnwindWork,
    check_lines,
    mainline,
    run,
    seed_v10,
)
from harness.deferred.profile import c_int, cookie_fields, get_profile

STACK = [0x401000, 0x401100, 0x401200]
PROFILES = [seed_v10, mainline]


class World:
    """A model, its log text, an unwinder that counts its walks, and tracers that record calls."""

    def __init__(self, profile, stack=STACK, clock=None):
        self.fp = io.StringIO()
        self.walks = 0
        self.stack = list(stack)
        self.calls: list[tuple[str, int, tuple, int]] = []
        self.model = DeferredModel(profile, self._unwind, log=EventLog(self.fp), clock=clock)

    def _unwind(self, task):
        self.walks += 1
        return list(self.stack)

    def tracer(self, name: str) -> UnwindWork:
        work = UnwindWork(lambda w, trace, cookie, t=None: self.calls.append((w.name, trace, cookie)), name)
        assert self.model.init(work) == 0
        return work

    def task(self):
        t = self.model.spawn()
        self.model.enter_kernel(t)
        return t

    def verdict(self):
        return check_lines(self.fp.getvalue().splitlines())

    def names(self):
        return sorted(c[0] for c in self.calls)


def ids(p):
    return p().name


@pytest.fixture(params=PROFILES, ids=ids)
def world(request):
    return World(request.param())


# --------------------------------------------------------------------------- profiles and tracers


@pytest.mark.parametrize(
    "profile,word_bits,tracers",
    [(seed_v10, 64, 63), (seed_v10, 32, 31), (mainline, 64, 62), (mainline, 32, 30)],
)
def test_tracer_limit_and_ebusy(profile, word_bits, tracers):
    prof = profile(word_bits)
    assert prof.max_tracers == tracers
    w = World(prof)
    works = [UnwindWork(lambda *a: None, f"t{i}") for i in range(tracers + 1)]
    rets = [w.model.init(x) for x in works]
    assert rets == [0] * tracers + [-EBUSY]
    assert -EBUSY == -16
    bits = sorted(x.bit for x in works[:tracers])
    reserved = {prof.pending_bit} | ({prof.used_bit} if prof.used_bit is not None else set())
    assert bits == [b for b in range(word_bits) if b not in reserved]
    assert works[-1].bit == -1


def test_reserved_bits():
    assert seed_v10().pending_bit == 63 and seed_v10().used_bit is None
    assert seed_v10(32).pending_bit == 31
    assert (mainline().pending_bit, mainline().used_bit) == (0, 1)
    assert get_profile("mainline", 32).max_tracers == 30
    with pytest.raises(ValueError, match="unknown profile"):
        get_profile("v99")


def test_max_entries_per_profile():
    assert mainline().max_entries == 510  # (4096 - 16) / 8
    assert mainline(32).max_entries == 1022  # (4096 - 8) / 4
    assert seed_v10().max_entries == 512
    assert mainline().with_max_entries(512).max_entries == 512


def test_cancelled_bit_is_reused(world):
    a = world.tracer("a")
    b = world.tracer("b")
    bit = a.bit
    world.model.cancel(a)
    assert a.bit == -1
    c = world.tracer("c")
    assert c.bit == bit and b.bit != bit


def test_callbacks_run_in_list_order_newest_first(world):
    world.tracer("old")
    world.tracer("new")
    t = world.task()
    for work in list(world.model.callbacks):
        world.model.request(work, t, 0, Context(IRQ))
    world.model.return_to_user(t)
    assert [c[0] for c in world.calls] == ["new", "old"]  # list_add_rcu adds at the head


# --------------------------------------------------------------------------- request return values


def test_request_queued_then_already_queued(world):
    a = world.tracer("a")
    t = world.task()
    ret, cookie = world.model.request(a, t, 0, Context(IRQ))
    assert ret == 0 and cookie
    assert t.task_work_queued == 1
    assert world.model.request(a, t, 0, Context(NMI)) == (1, cookie)
    assert world.model.request(a, t, 0, Context(SYSCALL)) == (1, cookie)
    assert t.task_work_queued == 1


def test_second_tracer_piggybacks_without_second_task_work(world):
    a, b = world.tracer("a"), world.tracer("b")
    t = world.task()
    assert world.model.request(a, t, 0, Context(IRQ))[0] == 0
    assert world.model.request(b, t, 0, Context(IRQ))[0] == 0
    assert t.task_work_queued == 1  # queued only by the request that found PENDING clear
    world.model.return_to_user(t)
    assert world.names() == ["a", "b"] and world.walks == 1
    assert world.verdict().clean


@pytest.mark.parametrize("context", [NMI, IRQ, SYSCALL])
def test_einval_cases(world, context):
    a = world.tracer("a")
    kt = world.model.spawn(kthread=True)
    assert kt.flags == PF_KTHREAD == 0x00200000
    assert world.model.request(a, kt, 0, Context(context)) == (-EINVAL, 0)
    t = world.task()
    assert world.model.request(a, t, 0, Context(context, user_mode=False)) == (-EINVAL, 0)
    b = world.tracer("b")
    world.model.cancel(b)
    assert world.model.request(b, t, 0, Context(context)) == (-EINVAL, 0)
    gen = world.model.exit_steps(t)
    next(gen)
    assert t.flags & PF_EXITING == PF_EXITING == 0x4
    assert world.model.request(a, t, 0, Context(context)) == (-EINVAL, 0)
    run(gen)
    assert -EINVAL == -22
    assert world.calls == []
    assert world.verdict().clean


def test_already_done_this_entry_mainline_returns_1_and_does_not_call_again():
    w = World(mainline())
    a = w.tracer("a")
    t = w.task()
    w.model.request(a, t, 0, Context(IRQ))
    steps = w.model.return_to_user_steps(t)
    while next(steps) != "irqs_off":
        pass
    assert w.names() == ["a"]
    # the bit stays set until unwind_reset_info(): "1 if the callback is pending or was already executed"
    assert w.model.request(a, t, 0, Context(NMI))[0] == 1
    run(steps)
    assert w.names() == ["a"]
    assert w.verdict().clean


def test_already_done_this_entry_v10_returns_unwind_already_executed():
    w = World(seed_v10())
    a, b = w.tracer("a"), w.tracer("b")
    t = w.task()
    w.model.request(a, t, 0, Context(IRQ))
    steps = w.model.return_to_user_steps(t)
    while next(steps) != "srcu_lock":
        pass
    run_until = [next(steps) for _ in range(2)]  # a's callback and callback_done
    assert run_until == ["callback", "callback_done"] and w.names() == ["a"]
    # Still in the same entry (IRQ during the exit loop): UNWIND_ALREADY_EXECUTED = 2.
    assert w.model.request(a, t, 0, Context(IRQ))[0] == 2
    # A new tracer's request claims the mask with cmpxchg(old -> PENDING | bit): a's bit goes, so a
    # new request of a returns 0 and a is called a second time, documented in v10's kernel-doc.
    assert w.model.request(b, t, 0, Context(IRQ))[0] == 0
    assert w.model.request(a, t, 0, Context(IRQ))[0] == 0
    run(steps)
    assert w.names() == ["a", "a", "b"]
    assert w.walks == 1
    assert len({c[2] for c in w.calls}) == 1  # same timestamp each time
    assert w.verdict().clean  # allowed under seed-v10: each call answers a request that returned 0


# --------------------------------------------------------------------------- cookies


def test_cookie_shared_in_entry_and_new_after_return(world):
    a, b = world.tracer("a"), world.tracer("b")
    t = world.task()
    c1 = world.model.request(a, t, 0, Context(IRQ))[1]
    assert world.model.request(b, t, 0, Context(NMI))[1] == c1
    world.model.return_to_user(t)
    assert {c[2] for c in world.calls} == {c1}
    world.model.enter_kernel(t)
    c2 = world.model.request(a, t, 0, Context(SYSCALL))[1]
    assert c2 and c2 != c1
    world.model.return_to_user(t)
    assert world.verdict().clean


def test_mainline_cookie_layout_cpu_low_counter_high():
    w = World(mainline())
    a = w.tracer("a")
    t = w.task()
    cookie = w.model.request(a, t, 3, Context(IRQ))[1]
    assert cookie_fields(cookie) == (3 + 1, 3)  # cpu + 1 in the low u32, (ctr 0 + 2) | 1 in the high
    assert cookie == (3 << 32) | 4
    w.model.return_to_user(t)
    w.model.enter_kernel(t)
    assert cookie_fields(w.model.request(a, t, 3, Context(IRQ))[1]) == (4, 5)  # per-CPU counter + 2
    u = w.task()
    assert cookie_fields(w.model.request(a, u, 0, Context(IRQ))[1]) == (1, 3)  # CPU 0's own counter


def test_mainline_counter_wraps_keeping_lsb_set():
    w = World(mainline())
    a = w.tracer("a")
    w.model.percpu_ctr[0] = 0xFFFFFFFF
    t = w.task()
    assert cookie_fields(w.model.request(a, t, 0, Context(IRQ))[1]) == (1, 1)


def test_v10_cookie_is_the_injected_clock():
    ticks = iter([5000, 6000, 7000])
    w = World(seed_v10(), clock=lambda: next(ticks))
    a = w.tracer("a")
    t = w.task()
    assert w.model.request(a, t, 0, Context(IRQ))[1] == 5000
    w.model.return_to_user(t)
    w.model.enter_kernel(t)
    assert w.model.request(a, t, 0, Context(NMI))[1] == 6000


def test_v10_stuck_clock_gives_two_entries_one_cookie_and_checker_says_so():
    w = World(seed_v10(), clock=lambda: 42)  # kernel/sched/clock.c stuck on a window edge
    a = w.tracer("a")
    t = w.task()
    w.model.request(a, t, 0, Context(IRQ))
    w.model.return_to_user(t)
    w.model.enter_kernel(t)
    w.model.request(a, t, 0, Context(IRQ))
    w.model.return_to_user(t)
    msgs = w.verdict().messages()
    assert any("already used by an earlier entry" in m for m in msgs), msgs


# --------------------------------------------------------------------------- nesting


def irq_steps(w, work, t, cpu=0):
    return w.model.request_steps(work, t, cpu, Context(IRQ))


def count_steps(w, make):
    steps = make()
    n = 0
    while True:
        try:
            next(steps)
        except StopIteration:
            return n
        n += 1


@pytest.mark.parametrize("profile", PROFILES, ids=ids)
@pytest.mark.parametrize("same_tracer", [False, True])
def test_nmi_between_any_two_steps_of_an_irq_request(profile, same_tracer):
    probe = World(profile())
    pa = probe.tracer("a")
    n = count_steps(probe, lambda: irq_steps(probe, pa, probe.task()))
    assert n >= 3
    for k in range(n + 1):
        w = World(profile())
        a, b = w.tracer("a"), w.tracer("b")
        t = w.task()
        outer = irq_steps(w, a, t)
        for _ in range(k):
            next(outer)
        nmi_ret, nmi_cookie = w.model.request(a if same_tracer else b, t, 0, Context(NMI))
        assert w.model.state_violations() == []
        irq_ret, irq_cookie = run(outer)
        assert irq_cookie == nmi_cookie, f"step {k}"
        assert t.task_work_queued == 1, f"step {k}"
        assert w.model.state_violations() == [], f"step {k}"
        w.model.return_to_user(t)
        expect = ["a"] if same_tracer else ["a", "b"]
        assert w.names() == expect, f"step {k}"
        assert w.walks == 1
        assert w.verdict().clean, (k, w.verdict().messages())
        if not same_tracer:
            assert (irq_ret, nmi_ret) == (0, 0)
        else:
            assert sorted([irq_ret == 0, nmi_ret == 0]).count(True) >= 1


@pytest.mark.parametrize("bit,expected", [(2, 4), (31, -(1 << 31)), (33, 0)])
def test_mainline_nested_same_tracer_race_returns_old_and_bit(bit, expected):
    """Between read_mask and the fetch_or an NMI of the same tracer sets its bit; the kernel then
    returns ``old & bit`` converted to int, not 1 (reported upstream, ``!!(old & bit)`` suggested)."""
    w = World(mainline())
    works = [UnwindWork(lambda *a: None, f"t{i}") for i in range(bit - 2)]  # bits 0 and 1 are reserved
    for x in works:
        w.model.init(x)
    a = w.tracer("a")
    assert a.bit == bit
    t = w.task()
    other = w.tracer("z")
    w.model.request(other, t, 0, Context(IRQ))  # PENDING already set by someone else
    outer = irq_steps(w, a, t)
    while next(outer) != "read_mask":
        pass
    assert w.model.request(a, t, 0, Context(NMI))[0] == 0
    assert run(outer)[0] == expected == c_int(1 << bit)
    w.model.return_to_user(t)
    assert sorted(c[0] for c in w.calls) == ["a", "z"]
    assert w.verdict().clean


def test_v10_nmi_during_get_timestamp_keeps_one_timestamp():
    ticks = iter(range(100, 10000, 100))
    w = World(seed_v10(), clock=lambda: next(ticks))
    a, b = w.tracer("a"), w.tracer("b")
    t = w.task()
    outer = irq_steps(w, a, t)
    assert next(outer) == "timestamp_read"
    nmi_cookie = w.model.request(b, t, 0, Context(NMI))[1]  # writes nmi_timestamp = 100
    assert t.info.nmi_timestamp == nmi_cookie == 100
    assert run(outer)[1] == 100  # the IRQ wrote 200, then folded the NMI's earlier one
    w.model.return_to_user(t)
    assert {c[2] for c in w.calls} == {100}


def test_request_during_the_walk_reuses_the_cached_trace(world):
    a, b = world.tracer("a"), world.tracer("b")
    t = world.task()
    world.model.request(a, t, 0, Context(IRQ))
    steps = world.model.return_to_user_steps(t)
    while next(steps) != "walk_start":
        pass
    assert world.model.request(b, t, 0, Context(IRQ))[0] == 0  # an interrupt in the middle of the walk
    v10 = world.model.profile.name == "seed-v10"
    # v10: b's cmpxchg(old -> PENDING | b) dropped a's bit, so a is queued (and called) again.
    assert world.model.request(a, t, 0, Context(NMI))[0] == (0 if v10 else 1)
    assert t.task_work_queued == 1
    run(steps)
    assert world.walks == 1
    assert world.names() == (["a", "a", "b"] if v10 else ["a", "b"])
    assert len({c[1] for c in world.calls}) == 1 and len({c[2] for c in world.calls}) == 1
    assert world.verdict().clean


def test_request_between_callbacks_runs_the_task_work_again_same_entry(world):
    a, b, c = world.tracer("a"), world.tracer("b"), world.tracer("c")
    t = world.task()
    world.model.request(a, t, 0, Context(IRQ))
    world.model.request(b, t, 0, Context(IRQ))
    steps = world.model.return_to_user_steps(t)
    while next(steps) != "callback_done":
        pass
    assert world.model.request(c, t, 0, Context(IRQ))[0] == 0
    run(steps)
    assert world.names() == ["a", "b", "c"] and world.walks == 1
    assert world.verdict().clean


# --------------------------------------------------------------------------- task work and walk


@pytest.mark.parametrize("profile,limit",
                         [(seed_v10(), 512), (mainline(), 510), (mainline().with_max_entries(512), 512)],
                         ids=["v10", "mainline", "mainline-512"])
def test_deep_stack_is_truncated_not_an_error(profile, limit):
    w = World(profile, stack=list(range(0x1000, 0x1000 + 600)))
    a = w.tracer("a")
    t = w.task()
    w.model.request(a, t, 0, Context(IRQ))
    w.model.return_to_user(t)
    (_, trace, _), = w.calls
    assert len(trace) == limit and trace == tuple(range(0x1000, 0x1000 + limit))
    walk = [line for line in w.fp.getvalue().splitlines() if '"ev":"walk"' in line]
    assert '"truncated":true' in walk[0]
    assert w.verdict().clean


def test_state_cleared_after_return(world):
    a = world.tracer("a")
    t = world.task()
    world.model.request(a, t, 0, Context(IRQ))
    world.model.return_to_user(t)
    info = t.info
    assert info.unwind_mask == 0 and info.id == 0 and info.timestamp == 0
    assert info.cache.nr_entries == 0 and info.cache.unwind_completed == 0
    assert t.task_work_queued == 0 and not t.in_kernel


def test_direct_walk_shares_the_cache(world):
    a = world.tracer("a")
    t = world.task()
    ret, trace = world.model.unwind_user_faultable(t)
    assert ret == 0 and trace == tuple(STACK) and world.walks == 1
    assert world.model.unwind_deferred_trace(t) == (0, tuple(STACK)) and world.walks == 1
    world.model.request(a, t, 0, Context(IRQ))
    world.model.return_to_user(t)
    assert world.walks == 1 and world.calls[0][1] == tuple(STACK)
    assert world.verdict().clean


def test_mainline_direct_walk_sets_used_so_the_return_clears_the_cache():
    w = World(mainline())
    t = w.task()
    w.model.unwind_user_faultable(t)
    assert t.info.unwind_mask == mainline().used
    w.model.return_to_user(t)
    w.model.enter_kernel(t)
    w.stack = [0x999]
    assert w.model.unwind_user_faultable(t) == (0, (0x999,)) and w.walks == 2
    assert w.verdict().clean


def test_v10_direct_walk_leaves_a_stale_cache_and_the_checker_catches_it():
    """v10's unwind_exit_to_user_mode() returns early on an empty mask, before nr_entries = 0
    (fixed in v13 by a separate conditional, in mainline by UNWIND_USED)."""
    w = World(seed_v10())
    a = w.tracer("a")
    t = w.task()
    w.model.unwind_deferred_trace(t)
    w.model.return_to_user(t)
    w.model.enter_kernel(t)
    w.stack = [0x999]
    w.model.request(a, t, 0, Context(IRQ))
    w.model.return_to_user(t)
    assert w.calls[0][1] == tuple(STACK)  # the previous entry's stack
    msgs = w.verdict().messages()
    assert any("not walked in this entry (stale cache" in m for m in msgs), msgs


def test_v10_cancel_emptying_the_mask_leaves_a_stale_timestamp():
    w = World(seed_v10())
    a, b = w.tracer("a"), w.tracer("b")
    t = w.task()
    w.model.request(a, t, 0, Context(IRQ))
    w.model.cancel(a)  # clears a's bit: the mask is PENDING only, then empty after the task work
    w.model.return_to_user(t)
    assert t.info.timestamp  # unwind_exit_to_user_mode() returned early: timestamp kept
    w.model.enter_kernel(t)
    w.model.request(b, t, 0, Context(IRQ))
    w.model.return_to_user(t)
    msgs = w.verdict().messages()
    assert any("already used by an earlier entry" in m for m in msgs), msgs


def test_mainline_same_cancel_scenario_is_clean():
    w = World(mainline())
    a, b = w.tracer("a"), w.tracer("b")
    t = w.task()
    w.model.request(a, t, 0, Context(IRQ))
    w.model.cancel(a)
    w.model.return_to_user(t)
    w.model.enter_kernel(t)
    w.model.request(b, t, 0, Context(IRQ))
    w.model.return_to_user(t)
    assert w.names() == ["b"]
    assert w.verdict().clean, w.verdict().messages()


def test_nmi_after_the_exit_loop_keeps_the_state_for_the_next_entry(world):
    """An NMI between the last TIF check and unwind_reset_info() sets PENDING; the reset then keeps
    mask, cookie and cache, and the callback runs at the next return with the old cookie."""
    a, b = world.tracer("a"), world.tracer("b")
    t = world.task()
    c1 = world.model.request(a, t, 0, Context(IRQ))[1]
    steps = world.model.return_to_user_steps(t)
    while next(steps) != "irqs_off":
        pass
    assert world.model.request(b, t, 0, Context(NMI)) == (0, c1)
    run(steps)
    assert world.names() == ["a"] and t.task_work_queued == 1
    lines = world.fp.getvalue().splitlines()
    assert '"cleared":false' in [x for x in lines if '"ev":"reset"' in x][-1]
    world.model.enter_kernel(t)  # the self-IPI of TWA_NMI_CURRENT, right after the return
    v10 = world.model.profile.name == "seed-v10"
    # v10's NMI path stored unwind_mask = PENDING, dropping a's bit: a is queued again.
    assert world.model.request(a, t, 0, Context(IRQ)) == ((0 if v10 else 1), c1)
    world.model.return_to_user(t)
    assert world.names() == (["a", "a", "b"] if v10 else ["a", "b"])
    assert {c[2] for c in world.calls} == {c1} and world.walks == 1
    assert world.verdict().clean, world.verdict().messages()


# --------------------------------------------------------------------------- cancel


def test_cancel_waits_for_a_running_callback_and_no_call_after(world):
    a, b = world.tracer("a"), world.tracer("b")
    t = world.task()
    world.model.request(a, t, 0, Context(IRQ))
    world.model.request(b, t, 0, Context(IRQ))
    tw = world.model.return_to_user_steps(t)
    while next(tw) != "callback":  # b's callback (newest first) is running
        pass
    assert world.calls[-1][0] == "b"
    with pytest.raises(ModelBlocked):
        world.model.cancel(a)
    cancel = world.model.cancel_steps(a)
    assert next(cancel) == "unlisted"
    assert a.bit == -1
    assert next(cancel) == "synchronize_srcu"  # waits for the task work's SRCU read section
    with pytest.raises(ModelBlocked):
        world.model.init(UnwindWork(lambda *x: None, "new"))  # callback_mutex is held
    assert world.model.request(a, t, 0, Context(NMI)) == (-EINVAL, 0)
    run(tw)
    assert world.names() == ["b"]  # a was unlisted before the walk reached it
    assert run(cancel) is None
    assert world.verdict().clean, world.verdict().messages()


def test_cancel_of_the_running_callbacks_tracer_completes_after_it(world):
    a = world.tracer("a")
    t = world.task()
    world.model.request(a, t, 0, Context(IRQ))
    tw = world.model.return_to_user_steps(t)
    while next(tw) != "callback":
        pass
    cancel = world.model.cancel_steps(a)
    assert [next(cancel), next(cancel), next(cancel)] == ["unlisted", "synchronize_srcu", "synchronize_srcu"]
    assert next(tw) == "callback_done"
    run(tw)
    run(cancel)
    log = world.fp.getvalue()
    assert log.index('"ev":"callback_done"') < log.index('"ev":"cancel_done"')
    assert world.verdict().clean


def test_cancel_clears_the_bit_in_every_task(world):
    a, b = world.tracer("a"), world.tracer("b")
    tasks = [world.task() for _ in range(3)]
    for t in tasks:
        world.model.request(a, t, 0, Context(IRQ))
        world.model.request(b, t, 0, Context(IRQ))
    bit = a.bit
    world.model.cancel(a)
    for t in tasks:
        assert not t.info.unwind_mask & (1 << bit)
        assert t.info.unwind_mask & (1 << b.bit)
        world.model.return_to_user(t)
    assert world.names() == ["b", "b", "b"]
    assert world.verdict().clean


# --------------------------------------------------------------------------- exit and fork


def test_exit_delivers_pending_callbacks_before_the_mm_goes(world):
    a = world.tracer("a")
    t = world.task()
    cookie = world.model.request(a, t, 0, Context(IRQ))[1]
    world.model.exit(t)
    assert world.calls == [("a", tuple(STACK), cookie)]  # a real trace: mm still there
    assert t.dead and t.info.cache is None and t.task_work_queued == 0
    assert world.model.request(a, t, 0, Context(IRQ)) == (-EINVAL, 0)
    with pytest.raises(ModelError):
        world.model.enter_kernel(t)
    assert world.verdict().clean


def test_fork_child_starts_empty(world):
    a = world.tracer("a")
    parent = world.task()
    world.model.request(a, parent, 0, Context(IRQ))
    world.model.unwind_user_faultable(parent)
    child = world.model.fork(parent)
    assert child.info.unwind_mask == 0 and child.info.cache is None and child.info.id == 0
    assert child.task_work_queued == 0 and child.in_kernel
    ret, cookie = world.model.request(a, child, 1, Context(IRQ))
    assert ret == 0 and cookie != world.model.request(a, parent, 0, Context(IRQ))[1]
    world.model.return_to_user(child)
    world.model.return_to_user(parent)
    assert world.names() == ["a", "a"] and world.walks == 2
    assert world.verdict().clean


def test_request_for_task_in_user_mode_is_a_model_error(world):
    a = world.tracer("a")
    t = world.model.spawn()
    with pytest.raises(ModelError, match="enter_kernel"):
        world.model.request(a, t, 0, Context(IRQ))


def test_log_is_jsonl_and_flushed_per_event():
    class Recorder(io.StringIO):
        flushes = 0

        def flush(self):
            Recorder.flushes += 1
            super().flush()

    fp = Recorder()
    m = DeferredModel(mainline(), lambda t: STACK, log=EventLog(fp))
    m.init(UnwindWork(lambda *a: None, "a"))
    lines = fp.getvalue().splitlines()
    assert len(lines) == 2 == Recorder.flushes
    assert lines[0].startswith('{"seq":1,"ev":"header"') and '"profile":"mainline"' in lines[0]


@pytest.mark.parametrize("profile", PROFILES, ids=ids)
def test_request_straddling_its_own_cancel_leaks_the_bit_to_the_next_tracer(profile):
    """The request reads work->bit before guard(irqsave)() and sets it after; synchronize_srcu() in
    cancel does not wait for irq-disabled sections.  If the whole cancel and a new init run between
    (another CPU, a stalled vCPU), the new tracer inherits the bit and is called without a request.
    Tracers must not request concurrently with their own cancel; the checker flags both sides."""
    w = World(profile())
    a = w.tracer("a")
    t = w.task()
    req = w.model.request_steps(a, t, 0, Context(IRQ))
    next(req)  # past the checks: bit read
    w.model.cancel(a)
    b = w.tracer("b")
    assert b.bit == 0 if profile is seed_v10 else b.bit == 2
    assert run(req)[0] == 0
    w.model.return_to_user(t)
    assert w.names() == ["b"]
    msgs = w.verdict().messages()
    assert any("tracer a: request returned 0 after the tracer's cancel" in m for m in msgs), msgs
    assert any("tracer b: callback without a request that returned 0" in m for m in msgs), msgs


@pytest.mark.parametrize("profile", PROFILES, ids=ids)
def test_recycled_bit_during_the_walk_calls_a_tracer_that_never_asked(profile):
    """Found by the stateful test: process_unwind_deferred() copies the mask (``bits``) before the
    walk, which may fault for a long time, and enters the SRCU read section only after it.  A cancel
    during the walk does not wait (no reader yet) and clears only the tasks' masks, not the copy; a
    new unwind_deferred_init() takes the freed bit; the task work then calls the new tracer."""
    w = World(profile())
    a = w.tracer("a")
    t = w.task()
    w.model.request(a, t, 0, Context(IRQ))
    tw = w.model.return_to_user_steps(t)
    while next(tw) != "walk_start":
        pass
    bit = a.bit
    w.model.cancel(a)  # synchronize_srcu() returns at once: the task work holds no SRCU read lock
    b = w.tracer("b")
    assert b.bit == bit
    run(tw)
    assert w.names() == ["b"]
    msgs = w.verdict().messages()
    assert any("tracer b: callback without a request that returned 0" in m for m in msgs), msgs
