"""task_pt_regs() as the kernel computes it, also inside __switch_to()."""

from __future__ import annotations

import struct

from harness.kernel import THREAD_SIZE, KernelInfo, TaskInfo, user_pt_regs_addr
from harness.regs import PT_REGS_SIZE

GS = 0x1000
TOS_SYM = 0x200
A_STACK, B_STACK = 0xFFFFC90000010000, 0xFFFFC90000020000


def _info(fred: bool) -> KernelInfo:
    return KernelInfo("test", {}, {}, 16, {}, 0x100, TOS_SYM, stack_padding=16 if fred else 0)


def _task(stack: int) -> TaskInfo:
    return TaskInfo(addr=0xFFFF888000000000, pid=7, tgid=7, comm="t", flags=0, stack=stack, mm=1)


def _read_with_top(top: int):
    def read(addr: int, size: int) -> bytes:
        assert addr == GS + TOS_SYM and size == 8
        return struct.pack("<Q", top)

    return read


def test_the_per_cpu_top_of_stack_is_used_when_it_is_the_tasks():
    for pad in (0, 16):
        top = A_STACK + THREAD_SIZE - pad
        # the per-CPU value wins over the symbol-based padding guess (here deliberately wrong)
        assert user_pt_regs_addr(_info(fred=not pad), _read_with_top(top), _task(A_STACK), GS) == top - PT_REGS_SIZE


def test_inside_switch_to_the_new_tasks_own_stack_is_used():
    # current_task is already B, cpu_current_top_of_stack still A's
    stale = A_STACK + THREAD_SIZE - 16
    got = user_pt_regs_addr(_info(fred=True), _read_with_top(stale), _task(B_STACK), GS)
    assert got == B_STACK + THREAD_SIZE - 16 - PT_REGS_SIZE
    got = user_pt_regs_addr(_info(fred=False), _read_with_top(stale), _task(B_STACK), GS)
    assert got == B_STACK + THREAD_SIZE - PT_REGS_SIZE


def test_another_tasks_regs_come_from_its_stack():
    assert (user_pt_regs_addr(_info(fred=True), _read_with_top(0), _task(B_STACK))
            == B_STACK + THREAD_SIZE - 16 - PT_REGS_SIZE)
