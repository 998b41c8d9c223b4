"""What mutmut found unpinned in harness/unwind/user.py (tests/MUTATION.md): the words a walk's
end says (what `harness shell` and the stack records show), the step-by-step interface the
interactive shell drives, one entry as a limit, and the entry-frame check at the edge of
readable code and on a 32-bit task."""

from __future__ import annotations

import struct

import pytest

from harness.memory import BufferMemory
from harness.regs import USER_CS_32, UserRegs
from harness.rule import FrameRule, ValueRule
from harness.unwind.synth import RangeRules, fp_chain
from harness.unwind.user import (
    EntryFrame,
    Stop,
    StopReason,
    UnwindConfig,
    UnwindConfigError,
    UnwinderType,
    UserUnwinder,
    unwind_user,
)


def test_a_stop_says_its_reason_then_its_address_then_its_detail():
    assert str(Stop(StopReason.FAULT, 0x1000, "a detail")) == f"{StopReason.FAULT.value} at 0x1000 (a detail)"
    assert str(Stop(StopReason.FAULT, 0x1000)) == f"{StopReason.FAULT.value} at 0x1000"
    assert str(Stop(StopReason.END_OF_CHAIN)) == StopReason.END_OF_CHAIN.value
    assert str(Stop(StopReason.RULE_ERROR, None, "r3")) == f"{StopReason.RULE_ERROR.value} (r3)"


def test_each_end_names_what_stopped_it():
    s = fp_chain(3)
    kernel = UserRegs(ip=0xFFFFFFFF81000000, sp=0xFFFFC90000000000, bp=0, cs=0x10)
    assert unwind_user(s.memory, kernel).stop.detail == "cs=0x10"
    assert unwind_user(s.memory, s.regs, max_entries=2).stop.detail == "2 entries"
    # a rule whose CFA is the sp itself: the stack would not grow
    still = FrameRule(ValueRule("sp", 0), ValueRule("cfa", -8, True), ValueRule("same"))
    t = unwind_user(s.memory, s.regs, tables_for=lambda ip: RangeRules([(s.regs.ip, s.regs.ip + 1, still)]))
    assert t.stop.reason is StopReason.NON_MONOTONIC and t.stop.detail == f"sp={s.regs.sp:#x}"
    # an SFrame-like rule whose RA is undefined: the outermost frame
    rule = FrameRule(ValueRule("sp", 8), ValueRule("undefined"), ValueRule("same"))
    t = unwind_user(s.memory, s.regs, tables_for=lambda ip: RangeRules([(s.regs.ip, s.regs.ip + 1, rule)]))
    assert t.stop.reason is StopReason.END_OF_CHAIN and t.stop.detail == "return address undefined (outermost frame)"


def test_one_entry_is_a_limit_not_a_config_error():
    s = fp_chain(3)
    with pytest.raises(UnwindConfigError, match=r"^max_entries must be positive \(unwind_user\(\) returns -EINVAL for 0\)$"):
        UserUnwinder(s.memory, UnwindConfig(max_entries=0))
    t = unwind_user(s.memory, s.regs, max_entries=1)
    assert t.ips == s.ips[:1] and t.stop.reason is StopReason.LIMIT and t.stop.detail == "1 entries"


@pytest.mark.parametrize("tables", [False, True], ids=["fp", "sframe-rule"])
def test_next_says_whether_it_found_a_caller_and_stays_false_at_the_end(tables):
    """The interactive shell's step: True per caller found, False at the end and after it."""
    s = fp_chain(3)
    rule = FrameRule(ValueRule("fp", 16), ValueRule("cfa", -8, True), ValueRule("cfa", -16, True))
    tables_for = (lambda ip: RangeRules([(s.regs.ip, s.regs.ip + 1, rule)])) if tables else None
    u = UserUnwinder(s.memory, UnwindConfig(tables_for=tables_for))
    st = u.start(s.regs)
    assert [u.next(st) for _ in range(4)] == [True, True, False, False]
    assert st.done and st.stop.reason is StopReason.END_OF_CHAIN


ENTRY = 0x40F000


def _at(ip: int, code: dict[int, bytes], compat: bool = False):
    """A topmost frame stopped at ``ip`` (the call's return address at sp), above fp_chain(3)."""
    ws = 4 if compat else 8
    s = fp_chain(3, ws=ws)
    sp = s.sps[0] - ws
    data = bytearray(s.memory.regions[s.stack_base])
    struct.pack_into("<I" if compat else "<Q", data, sp - s.stack_base, s.ips[0])
    regions = {s.stack_base: bytes(data), **code}
    regs = UserRegs(ip=ip, sp=sp, bp=s.regs.bp, cs=USER_CS_32 if compat else s.regs.cs, ss=s.regs.ss)
    return BufferMemory(regions), regs, [ip] + s.ips


def test_push_rbp_as_the_last_readable_byte_is_still_a_function_start():
    """Four bytes cannot be read there (the page after is unmapped): one byte is read instead,
    as the kernel's is_uprobe_at_func_entry() fallback reads the opcode alone."""
    mem, regs, full = _at(ENTRY + 0xFFF, {ENTRY: bytes(0xFFF) + b"\x55"})
    t = unwind_user(mem, regs, entry_frame=EntryFrame.ANY_IP)
    assert t.ips == full and t.types[1] is UnwinderType.FP_ENTRY


def test_a_32_bit_task_at_endbr32_is_at_a_function_start():
    mem, regs, full = _at(ENTRY, {ENTRY: bytes.fromhex("f30f1efb") + b"\x55\x89\xe5\xc3"}, compat=True)
    t = unwind_user(mem, regs, entry_frame=EntryFrame.ANY_IP)
    assert t.ips == full and t.types[1] is UnwinderType.FP_ENTRY
    mem64 = bytes.fromhex("f30f1efa") + b"\x55\x89\xe5\xc3"  # endbr64 is no 32-bit function start
    mem, regs, full = _at(ENTRY, {ENTRY: mem64}, compat=True)
    assert UnwinderType.FP_ENTRY not in unwind_user(mem, regs, entry_frame=EntryFrame.ANY_IP).types


def test_an_unknown_unwinder_is_named_with_the_known_ones():
    from harness.unwind.user import UnknownUnwinder, Unwinder

    assert Unwinder("sframe") is Unwinder.SFRAME
    with pytest.raises(UnknownUnwinder) as exc:
        Unwinder("orc")
    assert str(exc.value) == "unknown unwinder 'orc'; known: fp, sframe"
