"""The registers oracle (harness/oracles/regs.py): what it says the request's registers were, and
what it reads at the stop for another task's stack.

For a task whose binaries the scenario does not map (another program's), the engine's capture
holds the task's stack and the vDSO, nothing of its code.  Two causes of a registers difference
still prove a signal frame there by the restorer's code (``kernel_sigframe_regs``): signal-delivery
(the walk began in a handler: the restorer is the word at sp) and sigreturn-restored (the request
came inside rt_sigreturn: the restorer ends at the requested IP).  ``RegsOracle.complete`` reads
those bytes while the guest is still stopped, so the causes find them in the sealed snapshot.

The frame is real: the recorded delivery ``signal-1`` (tests/data/deliveries) was taken in the
alarm handler, on top of the rt_sigframe the kernel wrote, whose pretcode is glibc's
``__restore_rt``.  The registers at the handler's first instruction and inside rt_sigreturn are
made from it (the CFI walk gives the trampoline frame's sp, the frame gives the interrupted ones);
that the task is another program's is the test's doing (no such delivery is recorded).
"""

from __future__ import annotations

import dataclasses

import pytest

from harness.memory import CapturedMemory, MemoryFault
from harness.oracles.base import NotChecked, Request, Stack
from harness.oracles.cfi import RT_SIGRETURN_CODE, CFIOracle, kernel_sigframe_regs
from harness.oracles.regs import RegsOracle
from harness.regs import UserRegs
from harness.unwind.cfi import unwind_cfi
from harness.unwind.symbolize import Symbolizer
from harness.unwind.user import Trace
from harness.verdicts.align import judge
from harness.verdicts.types import AGREE, NOT_CHECKED
from tests.support.deliveries import Delivery
from tests.support.recording import RecordingMemory as Guest

RT_SIGRETURN = 15



@dataclasses.dataclass
class SignalFrame:
    guest: object  # the task's memory at the stop (captured bytes, the program's files)
    stack: dict[int, bytes]  # what the engine's capture holds of it: the stack pages
    restorer: int  # __restore_rt: the pretcode of the frame
    frame_sp: int  # where the frame's ucontext starts (sp after the handler's ret)
    interrupted: UserRegs  # the registers the frame saved
    handler: UserRegs  # at the handler's first instruction: sp at the pretcode word


@pytest.fixture(scope="module")
def frame() -> SignalFrame:
    d = Delivery("signal-1")
    guest = d.guest()
    walk = unwind_cfi(guest, d.snap.regs, CFIOracle(d.space).tables)
    tramp = walk.frames[-1]  # the CFI walk ends at the trampoline, a signal frame
    assert guest.read(tramp.ip, len(RT_SIGRETURN_CODE)) == RT_SIGRETURN_CODE
    interrupted = kernel_sigframe_regs(guest, tramp.ip, tramp.sp)
    assert interrupted is not None
    on_alarm = Symbolizer(d.space).address_of("on_alarm")
    handler = dataclasses.replace(d.snap.regs, ip=on_alarm, sp=tramp.sp - 8)
    stack = {b: data for b, data in d.snap.memory.regions.items() if b <= tramp.sp < b + len(data)}
    return SignalFrame(guest, stack, tramp.ip, tramp.sp, interrupted, handler)


def _completed(frame: SignalFrame, regs: UserRegs, request: Request | None) -> tuple[CapturedMemory, Guest]:
    """The capture of another task's stack, completed by the registers oracle and sealed."""
    guest = Guest(frame.guest)
    mem = CapturedMemory(frame.stack, live=guest)
    RegsOracle().complete(mem, regs, 0, request)
    return mem.seal(), guest


def _same(a: UserRegs | None, b: UserRegs) -> bool:
    return a is not None and (a.ip, a.sp, a.bp) == (b.ip, b.sp, b.bp)


# -- complete(): what the regs causes read of another task is read at the stop ---------------------

def test_another_tasks_handler_entry_keeps_the_restorer_the_word_at_sp_returns_to(frame):
    """signal-delivery: the walk began at the handler, its sp at the pretcode word; the restorer's
    code at that address proves the frame, and is read while the guest is stopped."""
    regs = frame.handler
    mem, _ = _completed(frame, regs, Request(frame.interrupted, own=None))
    pretcode = int.from_bytes(mem.read(regs.sp, 8), "little")
    assert pretcode == frame.restorer
    assert _same(kernel_sigframe_regs(mem, pretcode, regs.sp + 8), frame.interrupted)
    assert not mem.misses


def test_another_tasks_request_in_rt_sigreturn_keeps_the_restorer_ending_at_the_requested_ip(frame):
    """sigreturn-restored: the request came in rt_sigreturn (its IP right after the restorer's
    syscall, sp at the frame), the walk from what it restored; the restorer before the requested
    IP is read at the stop."""
    want = dataclasses.replace(frame.handler, ip=frame.restorer + len(RT_SIGRETURN_CODE), sp=frame.frame_sp,
                               orig_ax=RT_SIGRETURN)
    mem, _ = _completed(frame, frame.interrupted, Request(want, syscall=RT_SIGRETURN, own=None))
    assert _same(kernel_sigframe_regs(mem, want.ip - len(RT_SIGRETURN_CODE), want.sp), frame.interrupted)
    assert not mem.misses


def test_without_requested_registers_only_the_restorer_at_sp_is_read(frame):
    mem, guest = _completed(frame, frame.handler, Request(None, own=None))
    assert guest.reads == [(frame.restorer, len(RT_SIGRETURN_CODE))]  # the word at sp is captured
    assert kernel_sigframe_regs(mem, frame.restorer, frame.frame_sp) is not None


def test_an_unreadable_word_at_sp_does_not_stop_the_read_before_the_requested_ip(frame):
    want = dataclasses.replace(frame.handler, ip=frame.restorer + len(RT_SIGRETURN_CODE), sp=frame.frame_sp)
    regs = dataclasses.replace(frame.interrupted, sp=0x1000)  # no page there
    mem, guest = _completed(frame, regs, Request(want, syscall=RT_SIGRETURN, own=None))
    assert (frame.restorer, len(RT_SIGRETURN_CODE)) in guest.reads
    assert mem.read(frame.restorer, len(RT_SIGRETURN_CODE)) == RT_SIGRETURN_CODE


@pytest.mark.parametrize("case", ["own task", "compat task", "no request"])
def test_nothing_is_read_where_the_causes_read_no_restorer_by_its_code(frame, case):
    """The program's own tasks: their space maps the restorer, whose CFI (or file) the causes
    read; a 32-bit task: the causes read no 64-bit frame; no request: no registers to explain."""
    regs, request = frame.handler, Request(frame.interrupted, own=None)
    if case == "own task":
        request = dataclasses.replace(request, own="main")
    elif case == "compat task":
        regs = dataclasses.replace(regs, cs=0x23)
        assert regs.compat
    else:
        request = None
    mem, guest = _completed(frame, regs, request)
    assert guest.reads == []
    with pytest.raises(MemoryFault):
        mem.read(frame.restorer, len(RT_SIGRETURN_CODE))


# -- frames(): the requested registers, or why there are none ------------------------------------

def _stack(regs: UserRegs, request: Request | None) -> Stack:
    return Stack(regs, Trace(), "fp", 127, CapturedMemory(), None, None, request=request)


@pytest.mark.parametrize("request_", [None, Request(None, own="main")], ids=["no request", "no registers"])
def test_a_request_without_user_registers_is_not_checked_and_says_why(frame, request_):
    stack = _stack(frame.handler, request_)
    got = RegsOracle().frames(stack)
    assert got == NotChecked("the request hit a task without user registers (kernel thread)")
    v = judge(stack, RegsOracle(), got)
    assert v.verdict == NOT_CHECKED and v.reason == got.reason


def test_the_frames_are_the_requested_registers(frame):
    stack = _stack(frame.handler, Request(frame.handler, own="main"))
    got = RegsOracle().frames(stack)
    assert got.ips == (frame.handler.ip,) and got.regs == frame.handler and got.marks == {0}
    assert judge(stack, RegsOracle(), got).verdict == AGREE
