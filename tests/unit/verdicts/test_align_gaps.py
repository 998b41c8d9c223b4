"""Two rules of harness/verdicts/align.py that mutation testing found unpinned (issue 21): the regs
verdict compares bp too, and a run of equal addresses never reaches back to the IP (entry 0)."""

from __future__ import annotations

import dataclasses

from harness.memory import BufferMemory
from harness.oracles.base import NotChecked, OracleFrames, Request, Stack
from harness.oracles.cfi import CFIOracle
from harness.oracles.regs import RegsOracle
from harness.regs import UserRegs
from harness.unwind.code import CodeFacts
from harness.unwind.maps import AddressSpace, Mapping
from harness.unwind.user import Frame, Trace, UnwinderType
from harness.verdicts.align import MAX_DIVERGENCES, _run_start, judge
from harness.verdicts.types import AGREE, DIFFERS, EXPLAINED, FAILURE, LOST, NOT_CHECKED, PAST_END, REGS

IP, RA, OUTER = 0x401136, 0x401182, 0x4011C0
SP, BP = 0x7FFFFFFFE000, 0x7FFFFFFFE030


def stack_of(ips, regs: UserRegs, want: UserRegs | None = None) -> Stack:
    memory = BufferMemory({})
    space = AddressSpace([], memory=memory)
    frames = [Frame(ip, SP + 16 * k, BP + 16 * k, UnwinderType.REGS if k == 0 else UnwinderType.FP)
              for k, ip in enumerate(ips)]
    return Stack(regs, Trace(frames), "fp", 510, memory, space, CodeFacts(space, memory),
                 request=Request(want) if want is not None else None)


def test_the_regs_verdict_compares_bp():
    regs = UserRegs(ip=IP, sp=SP, bp=BP)
    agree = stack_of([IP], regs, want=regs)
    assert judge(agree, RegsOracle(), RegsOracle().frames(agree)).verdict == AGREE
    other_bp = stack_of([IP], regs, want=dataclasses.replace(regs, bp=BP + 0x40))
    v = judge(other_bp, RegsOracle(), RegsOracle().frames(other_bp))
    assert (v.unwinder, v.oracle, v.verdict) == ("fp", "regs", FAILURE)  # no cause explains another frame's rbp
    (d,) = v.divergences
    assert d.kind == REGS and d.got == (IP, SP, BP) and d.want == (IP, SP, BP + 0x40)
    assert (d.unwinder, d.oracle, d.got_index, d.want_index) == ("fp", "regs", 0, 0)


def test_a_run_of_equal_addresses_starts_after_the_ip():
    # a lost or extra frame is placed at the start of its run of equal addresses (recursion: the
    # same return address again and again); the IP is no return address, so no run reaches it (an
    # IP right after a recursive call equals the return addresses above it), and the first entries
    # must agree anyway
    assert _run_start((RA, RA, RA, OUTER), 2) == 1  # entry 0 is the IP: never part of a run
    assert _run_start((IP, RA, RA, RA), 3) == 1
    assert _run_start((IP, RA, OUTER), 2) == 2
    assert _run_start((IP, RA), 1) == 1
    assert _run_start((IP, OUTER, RA, RA, RA), 4) == 2  # the run's own start, not the first entry after the IP


def test_the_oracles_outermost_reaches_the_causes():
    """The unwinder goes on past the CFI oracle's last frame, where no FDE is found: past a walk
    that ended for want of an FDE that is cfi-no-fde; past one that ended at the outermost frame
    (.cfi_undefined rip) it is a failure.  judge() must hand the oracle's ``outermost`` on."""
    s = stack_of([IP, RA, OUTER], UserRegs(ip=IP, sp=SP, bp=BP))
    cfi = CFIOracle(s.space)
    v = judge(s, cfi, OracleFrames((IP, RA), outermost=False))
    assert v.verdict == EXPLAINED and [d.cause for d in v.divergences] == ["cfi-no-fde"]
    v = judge(s, cfi, OracleFrames((IP, RA), outermost=True))
    assert v.verdict == FAILURE and [(d.kind, d.cause) for d in v.divergences] == [(PAST_END, None)]



def test_first_entries_that_differ_are_a_failure_whatever_the_causes_say():
    # the walk and the oracle start from the same registers: a first entry that differs is no story
    s = stack_of([IP, RA], UserRegs(ip=IP, sp=SP, bp=BP))
    v = judge(s, CFIOracle(s.space), OracleFrames((IP + 1, RA)))
    assert v.verdict == FAILURE
    (d,) = v.divergences
    assert (d.kind, d.got_index, d.want_index, d.cause) == (DIFFERS, 0, 0, None)


def epilogue_stack(lost: int):
    """The oracle's frames are interrupted IPs at a ``pop %rbp; ret`` each (marked IPs, as a signal
    frame marks them), and the walk lost every other one: each loss is fp-epilogue-ip's."""
    want = [0x401000 + 0x10 * k + 1 for k in range(2 * lost + 1)]  # each at the ret of "5d c3"
    memory = BufferMemory({0x401000 + 0x10 * k: bytes.fromhex("5dc3") for k in range(2 * lost + 1)})
    # the task maps its code (causes prove only frames at the task's own addresses)
    space = AddressSpace([Mapping(0x401000, 0x402000, "r-xp", 0)], memory=memory)
    got = want[::2]
    frames = [Frame(ip, SP + 16 * k, BP, UnwinderType.REGS if k == 0 else UnwinderType.FP) for k, ip in enumerate(got)]
    s = Stack(UserRegs(ip=got[0], sp=SP, bp=BP), Trace(frames), "fp", 510, memory, space, CodeFacts(space, memory))
    return s, OracleFrames(tuple(want), frozenset(range(len(want))))


def test_up_to_max_divergences_explained_is_explained_one_more_is_a_failure():
    s, frames = epilogue_stack(MAX_DIVERGENCES)
    v = judge(s, CFIOracle(s.space), frames)
    assert v.verdict == EXPLAINED and len(v.divergences) == MAX_DIVERGENCES
    assert {(d.kind, d.cause) for d in v.divergences} == {(LOST, "fp-epilogue-ip")}
    s, frames = epilogue_stack(MAX_DIVERGENCES + 1)
    v = judge(s, CFIOracle(s.space), frames)
    assert v.verdict == FAILURE and len(v.divergences) == MAX_DIVERGENCES + 1
    assert [d.cause for d in v.divergences] == ["fp-epilogue-ip"] * MAX_DIVERGENCES + [None]
    last = v.divergences[-1]
    assert (last.kind, last.got_index, last.want_index) == (DIFFERS, MAX_DIVERGENCES + 1, 2 * MAX_DIVERGENCES + 1)


def test_an_oracle_that_could_not_check_is_not_checked_or_a_failure_as_it_says():
    s = stack_of([IP, RA], UserRegs(ip=IP, sp=SP, bp=BP))
    cfi = CFIOracle(s.space)
    v = judge(s, cfi, NotChecked("no .eh_frame for the IP"))
    assert (v.unwinder, v.oracle, v.verdict, v.divergences, v.reason) == (
        "fp", "cfi", NOT_CHECKED, [], "no .eh_frame for the IP")
    v = judge(s, cfi, NotChecked("the oracle's walk faulted", failure=True))
    assert (v.unwinder, v.oracle, v.verdict, v.divergences, v.reason) == (
        "fp", "cfi", FAILURE, [], "the oracle's walk faulted")
