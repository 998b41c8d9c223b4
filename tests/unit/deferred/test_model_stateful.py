"""Random interleavings of the whole unwind_deferred model, checked after every step.

Tracers register and cancel (cancel as explicit steps, racing running callbacks); tasks on two CPUs
are entered, requested from NMI, IRQ and syscall context, with NMI and IRQ requests nested between
the atomic steps of other requests, of the task work (during the walk, between callbacks, after the
exit loop with interrupts off) and of exits; tasks return to user space, fork and exit.  After every
step the model state invariants hold and the incremental checker over the new log lines is clean;
at the end the whole JSONL log replays clean through the standalone checker.

Caller contract kept by the machine (a tracer's own obligation, as perf keeps it): a tracer is not
cancelled while one of its own requests is between its steps.  The machine also does not register a
tracer on a bit that a task work captured before its walk (found by this test with 2,000 examples:
``process_unwind_deferred()`` takes ``bits`` before ``unwind_user_faultable()`` and the SRCU read
lock after it, so a cancel and a new init during the walk hand the old bit to the new tracer;
tests/unit/deferred/test_model.py pins that race down).  Under seed-v10 the machine also
avoids the two ways to empty a task's mask with a cookie or cache set (a direct walk without a
request, a cancel of a tracer whose bit is set in a task): v10's exit path returns early on an empty
mask and keeps them; tests/unit/deferred/test_model.py shows the checker catching both.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.deferred import (
    IRQ,
    NMI,
    SYSCALL,
    Checker,
    Context,
    DeferredModel,
    EventLog,
    UnwindWork,
    check_lines,
    mainline,
    seed_v10,
)
from harness.deferred.profile import EINVAL, PF_KTHREAD
from tests.support.deferred_settings import deferred_settings

LEVEL = {SYSCALL: 0, IRQ: 1, NMI: 2}
MAX_TASKS = 5
MAX_TRACERS = 5


@dataclass
class Frame:
    kind: str  # "request", "return", "walk", "exit"
    gen: object
    level: int  # 0 task context, 1 IRQ, 2 NMI
    work: UnwindWork | None = None
    last: str = ""


class DeferredMachine(RuleBasedStateMachine):
    PROFILE = mainline()

    def __init__(self):
        super().__init__()
        self.fp = io.StringIO()
        self.model = DeferredModel(self.PROFILE, self._unwind, log=EventLog(self.fp))
        self.checker = Checker()
        self.fed = 0
        self.works: list[UnwindWork] = []
        self.frames: dict[int, list[Frame]] = {}
        self.cancel_gen = None
        self.cancel_work: UnwindWork | None = None
        self.results: list[tuple[str, int]] = []

    # -- helpers

    def _unwind(self, task):
        depth = 600 if (task.pid + task.epoch) % 11 == 5 else 1 + (task.pid + task.epoch) % 6
        base = 0x400000 + (task.pid << 16) + (task.epoch << 8)
        return [base + 4 * k for k in range(depth)]

    def _callback(self, work, trace, cookie):
        assert work.bit >= 0, f"{work.name} called after its cancel began"

    def live_tasks(self):
        return [t for t in self.model.tasks.values() if not t.dead]

    def pick_task(self, i):
        """Task number i among the live user tasks; the kernel thread only for i == 10."""
        tasks = [t for t in self.live_tasks() if not t.flags & PF_KTHREAD]
        if i == 10:
            tasks = [t for t in self.live_tasks() if t.flags & PF_KTHREAD] or tasks
        return tasks[i % len(tasks)] if tasks else None

    def stack(self, task):
        return self.frames.setdefault(task.pid, [])

    def can_nest(self, task, level):
        frames = self.stack(task)
        if not frames:
            return True
        top = frames[-1]
        if top.kind == "request":
            return level == LEVEL[NMI] and top.level < LEVEL[NMI]  # requests run with irqs off
        if top.last == "irqs_off":
            return level == LEVEL[NMI]
        return level > top.level

    def push(self, task, frame):
        self.stack(task).append(frame)
        self.advance(task)

    def advance(self, task):
        frames = self.stack(task)
        top = frames[-1]
        try:
            top.last = next(top.gen)
        except StopIteration as stop:
            frames.pop()
            if top.kind == "request":
                ret, cookie = stop.value
                self.results.append((top.work.name, ret))
                if top.work.bit < 0:
                    assert ret in (-EINVAL, 0, 1, 2) or ret > 0 or ret == -(1 << 31)

    def requests_in_flight(self, work):
        return any(f.work is work for frames in self.frames.values() for f in frames)

    def bit_set_somewhere(self, work):
        b = 1 << work.bit
        return any(t.info.unwind_mask & b or t.running_bits & b for t in self.live_tasks())

    # -- setup

    @initialize()
    def setup(self):
        for cpu in (0, 1):
            self.model.spawn(cpu=cpu)
        self.model.spawn(kthread=True)
        for _ in range(3):
            self._register()

    # -- tracers

    @precondition(lambda self: self.cancel_gen is None)
    @rule()
    def register(self):
        self._register()

    def _register(self):
        if sum(w.bit >= 0 for w in self.works) >= MAX_TRACERS:
            return
        free = 0
        while self.model.unwind_mask & (1 << free):
            free += 1
        if any(t.running_bits & (1 << free) for t in self.live_tasks()):
            return  # the recycled-bit race (test_recycled_bit_during_the_walk_*): kept out here
        work = UnwindWork(self._callback, f"t{len(self.works)}")
        assert self.model.init(work) == 0
        self.works.append(work)

    @precondition(lambda self: self.cancel_gen is None)
    @rule(i=st.integers(0, 10))
    def start_cancel(self, i):
        if i > 3:
            return  # keep cancels rarer than requests
        live = [w for w in self.works if w.bit >= 0 and not self.requests_in_flight(w)]
        if self.PROFILE.name == "seed-v10":
            live = [w for w in live if not self.bit_set_somewhere(w)]
        if not live:
            return
        work = live[i % len(live)]
        self.cancel_work = work
        self.cancel_gen = self.model.cancel_steps(work)
        self.step_cancel()

    @precondition(lambda self: self.cancel_gen is not None)
    @rule()
    def step_cancel(self):
        try:
            next(self.cancel_gen)
        except StopIteration:
            self.cancel_gen = None
            self.cancel_work = None

    # -- tasks

    @rule(i=st.integers(0, 10), cpu=st.integers(0, 1))
    def enter(self, i, cpu):
        t = self.pick_task(i)
        if t is None or t.in_kernel:
            return
        self.model.enter_kernel(t, how="irq" if cpu else "syscall", cpu=cpu)

    @rule(
        i=st.integers(0, 10),
        w=st.integers(0, 10),
        kind=st.sampled_from([NMI, IRQ, SYSCALL]),
        user_mode=st.integers(0, 15).map(lambda x: x != 0),
        cpu=st.integers(0, 1),
    )
    def request(self, i, w, kind, user_mode, cpu):
        t = self.pick_task(i)
        if t is None or not self.works:
            return
        if not t.in_kernel:  # an interrupt (or syscall) from user mode: a new kernel entry
            self.model.enter_kernel(t, how=kind, cpu=cpu)
        frames = self.stack(t)
        if kind == SYSCALL and frames:
            kind = IRQ
        if not self.can_nest(t, LEVEL[kind]):
            kind = NMI
            if not self.can_nest(t, LEVEL[NMI]):
                return
        if not frames:
            t.cpu = cpu  # between two kernel-context operations the task may migrate
        live = [x for x in self.works if x.bit >= 0]
        pool = live if live and w < 9 else self.works  # now and then a cancelled tracer
        work = pool[w % len(pool)]
        if work is self.cancel_work and work.bit >= 0:
            return  # contract: no request racing its own tracer's cancel
        gen = self.model.request_steps(work, t, t.cpu, Context(kind, user_mode))
        self.push(t, Frame("request", gen, LEVEL[kind], work))

    @rule(i=st.integers(0, 10), n=st.integers(1, 3))
    def step(self, i, n):
        t = self.pick_task(i)
        if t is None:
            return
        for _ in range(n):
            if not self.stack(t):
                return
            self.advance(t)

    @rule(i=st.integers(0, 10))
    def finish(self, i):
        t = self.pick_task(i)
        if t is None:
            return
        while self.stack(t):
            self.advance(t)

    def _task_level_start(self, i, kind, make):
        t = self.pick_task(i)
        if t is None or not t.in_kernel or self.stack(t) or t.flags & PF_KTHREAD:
            return None
        self.push(t, Frame(kind, make(t), 0))
        return t

    @rule(i=st.integers(0, 10))
    def return_to_user(self, i):
        self._task_level_start(i, "return", self.model.return_to_user_steps)

    @precondition(lambda self: self.PROFILE.name == "mainline")
    @rule(i=st.integers(0, 10))
    def direct_walk(self, i):
        self._task_level_start(i, "walk", self.model.unwind_user_faultable_steps)

    @rule(i=st.integers(0, 10))
    def exit(self, i):
        if len(self.live_tasks()) <= 2:
            return
        self._task_level_start(i, "exit", self.model.exit_steps)

    @rule(i=st.integers(0, 10))
    def fork(self, i):
        t = self.pick_task(i)
        if t is None or not t.in_kernel or self.stack(t) or len(self.live_tasks()) >= MAX_TASKS:
            return
        if t.flags & PF_KTHREAD:
            return
        self.model.fork(t)

    # -- invariants

    @invariant()
    def model_state_is_consistent(self):
        assert self.model.state_violations() == []

    @invariant()
    def log_checks_clean(self):
        events = self.model.log.events
        for e in events[self.fed :]:
            self.checker.feed(dict(e))
        self.fed = len(events)
        assert self.checker.violations == [], [str(v) for v in self.checker.violations]

    def teardown(self):
        # Let every context finish, every task return to user space (twice when an NMI after the
        # exit loop left PENDING set), then replay the whole JSONL log through the checker.
        for t in self.live_tasks():
            while self.stack(t):
                self.advance(t)
        while self.cancel_gen is not None:
            self.step_cancel()
        for _ in range(3):
            for t in self.live_tasks():
                if t.flags & PF_KTHREAD:
                    continue
                if not t.in_kernel and t.task_work_queued:
                    self.model.enter_kernel(t)
                if t.in_kernel:
                    self.model.return_to_user(t)
        self.log_checks_clean()
        assert self.model.state_violations() == []
        for t in self.live_tasks():
            assert not t.owed or t.flags & PF_KTHREAD, (t.pid, t.owed)
        replay = check_lines(self.fp.getvalue().splitlines())
        assert replay.clean, replay.messages()
        assert replay.events == self.checker.count


class MainlineMachine(DeferredMachine):
    PROFILE = mainline()


class SeedV10Machine(DeferredMachine):
    PROFILE = seed_v10()


TestMainlineStateful = MainlineMachine.TestCase
TestMainlineStateful.settings = deferred_settings()
TestSeedV10Stateful = SeedV10Machine.TestCase
TestSeedV10Stateful.settings = deferred_settings()
