"""What the session reads with the registers at a stop (harness/session.py: _stop_guesses,
read_many, prefetch_stop's cache), against a recording target, without QEMU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.regs import PT_REGS_SIZE
from harness.session import EXPECTED_READS_MAX, GuestSpec, Session
from harness.transport.errors import StopLeft
from harness.transport.target import ReadResult


class RecordingTarget:
    """What Session uses of a Target at a stop: its generation, the stop's reads, read_many."""

    def __init__(self):
        self.generation = 7
        self.stop_prefetch = None
        self.asked: list[list[tuple[int, int]]] = []
        self.cpu = 0
        self.running = False

    def read_many(self, ranges):
        self.asked.append(list(ranges))
        return [ReadResult(bytes((a + i) & 0xFF for i in range(n))) for a, n in ranges]


def _session():
    s = Session(GuestSpec())
    s.target = RecordingTarget()
    s.info = SimpleNamespace(current_task_sym=0x1000, top_of_stack_sym=0x2000,
                             task_offsets={"pid": 0x10, "comm": 0x40}, comm_len=16, thread_size=0x4000)
    return s


def test_read_many_takes_what_the_stop_read_and_reads_the_rest_in_one_batch():
    s = _session()
    t = s.target
    pre = ReadResult(b"\xaa" * 16)
    t.stop_prefetch = (7, [((0x7000, 16), pre)])
    got = s.read_many([(0x7000, 16), (0x9000, 4), (0x7000, 8)])
    assert got[0] is pre  # exactly the range the stop read
    assert got[1].data == bytes((0, 1, 2, 3))
    assert t.asked == [[(0x9000, 4), (0x7000, 8)]]  # a sub-range is not guessed at: read
    t.generation = 8  # the guest ran: the stop's reads are another stop's
    s.read_many([(0x7000, 16)])
    assert t.asked[-1] == [(0x7000, 16)]


def test_guesses_are_the_last_stop_of_the_vcpu_and_the_expected_reads_within_a_budget():
    s = _session()
    assert s._stop_guesses(0) == []  # nothing known yet: nothing guessed
    gs, task, top = 0xffff888000000000, 0xffff888001000000, 0xffffc90000004000
    s._last_stop[0] = (gs, task, top, {"rsp": (top - PT_REGS_SIZE,), "rdi": (0xfffffe0000001000, 0xfffffe0000002000)})
    s.expected_reads[101] = [(0x7ffc0000, 0x2000), (0x7f0000001000, 0x90)]
    s.expected_reads[102] = [(0x7ffd0000, EXPECTED_READS_MAX)]  # past the budget: left out
    got = s._stop_guesses(0)
    assert got[:4] == [(gs + 0x1000, 8), (gs + 0x2000, 8), (task + 0x10, 0x40), (top - PT_REGS_SIZE, PT_REGS_SIZE)]
    assert (0xfffffe0000001000, PT_REGS_SIZE) in got and (0xfffffe0000002000, PT_REGS_SIZE) in got
    assert len(got) == len(set(got))  # the stack top's pt_regs, also where rsp pointed: read once
    assert (0x7ffc0000, 0x2000) in got and (0x7f0000001000, 0x90) in got
    assert all(a != 0x7ffd0000 for a, _ in got)
    assert s._stop_guesses(1) == [r for ranges in list(s.expected_reads.values())[:1] for r in ranges]


def test_another_tasks_user_pt_regs_where_an_nmi_pointed_once_are_not_guessed():
    """A register that pointed at the user pt_regs of another task's stack (the NMI caught that
    task in user mode) is not guessed at the next stops: needed only where the stop catches
    that task again, when the task_struct guess misses too (bench deferred: one packet a stop)."""
    s = _session()
    gs, task, top = 0xffff888000000000, 0xffff888001000000, 0xffffc90000664000
    mine, nmi = top - PT_REGS_SIZE, 0xfffffe000000def8
    other = 0xffffc90000638000 - PT_REGS_SIZE  # another 16 KiB stack, the same place in it
    inside = top - 0x200  # the vCPU's task's own stack, elsewhere: kept
    s._last_stop[0] = (gs, task, top, {"rdi": (nmi, mine, other), "rsp": (inside,)})
    got = s._stop_guesses(0)
    assert [r for r in got if r[1] == PT_REGS_SIZE] == [(mine, PT_REGS_SIZE), (nmi, PT_REGS_SIZE),
                                                        (inside, PT_REGS_SIZE)]
    s._last_stop[0] = (gs, task, None, {"rdi": (nmi, other)})  # no top known: every pointer
    assert [r for r in s._stop_guesses(0) if r[1] == PT_REGS_SIZE] == [(nmi, PT_REGS_SIZE), (other, PT_REGS_SIZE)]


def test_where_the_engine_names_the_next_stops_registers_only_their_pointers_are_guessed():
    """With the return points in (the engine's Session.stop_regs: their "rsp", not the NMI's
    "rdi"), a return stop does not read the NMI stack's pt_regs (bench deferred: one packet a
    trace); the vCPU's task's own user pt_regs stay guessed whatever the registers."""
    s = _session()
    gs, task, top = 0xffff888000000000, 0xffff888001000000, 0xffffc90000664000
    mine, nmi, ret = top - PT_REGS_SIZE, 0xfffffe000000def8, top - 0x300
    s._last_stop[0] = (gs, task, top, {"rdi": (nmi, mine), "rsp": (ret,)})

    def pt_regs():
        return [a for a, n in s._stop_guesses(0) if n == PT_REGS_SIZE]

    assert pt_regs() == [mine, nmi, ret]
    s.stop_regs = frozenset({"rsp", "task"})
    assert pt_regs() == [mine, ret]
    s.stop_regs = frozenset({"rdi"})
    assert pt_regs() == [mine, nmi]
    s.stop_regs = None
    assert pt_regs() == [mine, nmi, ret]


def test_at_a_stop_the_guest_left_only_the_stops_reads_are_there():
    # Target.plan_continue: the guest runs on; what was read with the registers still serves
    # the stop, and anything else is StopLeft (never a read of the running guest's memory).
    s = _session()
    t = s.target
    t.stop_prefetch = (7, [((0x7000, 16), ReadResult(b"\xaa" * 16))])
    t.running = True
    assert s.read(0x7004, 4) == b"\xaa" * 4
    with pytest.raises(StopLeft, match="8 bytes at 0x9000"):
        s.read(0x9000, 8)
    s._prefetch([(0x9000, 8)])  # a prefetch reads nothing then: the read that needs it says so
    assert t.asked == []
