"""fp-epilogue-ip (harness/verdicts/causes.py) proves a lost frame only from an interrupted IP:
mutation testing found that a return address whose preceding byte is 0x5d or 0xc9 (pop %rbp,
leave) and whose own byte is a ret was accepted too, and nothing failed (issue 21).

The code is placed in memory by hand and checked by capstone: ``call *0x5d(%rax)`` and
``call *-0x37(%rax)`` end in those bytes, and a call followed by ``ret`` is how a function whose
last act is a call it cannot tail-call returns; the genuine epilogue is ``pop %rbp; ret``."""

from __future__ import annotations

import capstone
import pytest

from harness.memory import BufferMemory
from harness.oracles.base import Stack
from harness.regs import UserRegs
from harness.unwind.code import CodeFacts
from harness.unwind.maps import AddressSpace
from harness.unwind.user import Frame, Trace, UnwinderType
from harness.verdicts.causes import CAUSES, _from
from harness.verdicts.types import LOST, Divergence

BASE = 0x401000
SP, BP = 0x7FFFFFFFE000, 0x7FFFFFFFE030
CALLER, OUTER = 0x402010, 0x402080


def disassembly(code: bytes) -> list[str]:
    cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    return [f"{i.mnemonic} {i.op_str}".strip() for i in cs.disasm(code, BASE)]


def lost_after(code: bytes, addr: int, is_ip: bool):
    """The FP step from ``addr`` (the interrupted IP, or a return address one frame up) lost the
    frame the oracle has next: fp-epilogue-ip's verdict on it."""
    memory = BufferMemory({BASE: code})
    space = AddressSpace([], memory=memory)
    ips = [addr, OUTER] if is_ip else [0x401800, addr, OUTER]
    frames = [Frame(ip, SP + 16 * k, BP, UnwinderType.REGS if k == 0 else UnwinderType.FP) for k, ip in enumerate(ips)]
    stack = Stack(UserRegs(ip=ips[0], sp=SP, bp=BP), Trace(frames), "fp", 510, memory, space, CodeFacts(space, memory))
    want = (*ips[:-1], CALLER, OUTER)  # the oracle has the caller the FP step skipped
    j = len(ips) - 1
    d = Divergence("fp", "cfi", LOST, j, j, tuple(ips), want, frozenset({0}))
    return CAUSES["fp-epilogue-ip"].predicate(stack, d)


def test_an_ip_at_the_ret_after_pop_rbp_is_proven():
    code = bytes.fromhex("554889e5" "5d" "c3")  # push %rbp; mov %rsp,%rbp; pop %rbp; ret
    assert disassembly(code)[-2:] == ["pop rbp", "ret"]
    found = lost_after(code, BASE + 5, is_ip=True)
    assert found is not None and found["ip"] == BASE + 5


@pytest.mark.parametrize("call, text", [("ff505d", "call qword ptr [rax + 0x5d]"),
                                        ("ff50c9", "call qword ptr [rax - 0x37]")])
def test_a_return_address_after_a_call_ending_in_5d_or_c9_is_not(call, text):
    code = bytes.fromhex(call + "c3")
    assert disassembly(code) == [text, "ret"]
    ra = BASE + 3
    assert CodeFacts(AddressSpace([]), BufferMemory({BASE: code})).at_epilogue(ra)  # the bytes alone look alike
    assert lost_after(code, ra, is_ip=False) is None


@pytest.mark.parametrize("last, text", [("5d", "pop rbp"), ("c9", "leave")])
def test_the_epilogue_evidence_is_the_two_instructions_it_rests_on(last, text):
    """What fp-epilogue-ip shows is what it proves from: the pop %rbp (or leave) just before the
    IP and the ret at it, nothing before or after."""
    code = bytes.fromhex("554889e5" + last + "c3" "90")  # push %rbp; mov %rsp,%rbp; pop/leave; ret; nop
    found = lost_after(code, BASE + 5, is_ip=True)
    assert found["code"] == [f"{BASE + 4:#x}: {text}", f"{BASE + 5:#x}: ret"]
    assert found["why_fp"].startswith("the IP is the ret after pop %rbp/leave: rbp is the caller's")
    assert found["text"].startswith(found["why_fp"])


def test_a_divergence_at_the_unwinders_first_entry_started_from_no_frame_of_its():
    """``_from``: the step that went wrong started from the unwinder's frame before the divergence;
    at got_index 0 there is none, so no step cause examines the oracle's frame before it, even where
    the unwinder's last frame (got[-1], what a negative index reads) is that frame.  align.judge
    makes no such divergence after first entries that agree; the rule is _from's own."""
    d = Divergence("fp", "cfi", LOST, 0, 1, (BASE,), (BASE, CALLER), frozenset({0}))
    assert _from(d) is None
    assert _from(Divergence("fp", "cfi", LOST, 1, 1, (BASE, OUTER), (BASE, CALLER, OUTER), frozenset({0}))) \
        == (BASE, True)
