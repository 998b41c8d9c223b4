"""The unwind_user model against the kernel's rules (kernel/unwind/user.c), on hand-built stacks."""

from __future__ import annotations

import struct

import pytest

from harness.memory import BufferMemory, MemoryFault
from harness.regs import UserRegs
from harness.rule import FrameRule, ValueRule
from harness.unwind.access import TASK_SIZE_MAX_4LEVEL, TASK_SIZE_MAX_5LEVEL
from harness.unwind.synth import RangeRules, fp_chain, mixed_chain, sp_rule
from harness.unwind.user import (
    UNWIND_MAX_ENTRIES,
    UNWIND_MAX_ENTRIES_EARLY,
    X86_VM_MASK,
    EntryFrame,
    Profile,
    StopReason,
    UnwindConfig,
    UnwindConfigError,
    UnwinderType,
    UserUnwinder,
    unwind_user,
)
from tests.support.recording import RecordingMemory

STACK = 0x7FFF_F000_0000  # a page-aligned stack region for hand-built frames
IP0 = 0x401234


def q(*words: int) -> bytes:
    return struct.pack(f"<{len(words)}Q", *words)


# --- the complete chain and its end --------------------------------------------------------

def test_full_chain_ends_at_zero_fp():
    s = fp_chain(8)
    t = unwind_user(s.memory, s.regs)
    assert t.ips == s.ips
    assert [f.sp for f in t] == s.sps
    assert t.stop.reason is StopReason.END_OF_CHAIN and not t.stop.reason.is_error
    assert t.types == [UnwinderType.REGS] + [UnwinderType.FP] * 7
    assert t.stopped_in is UnwinderType.FP


def test_first_entry_is_interrupted_ip_even_when_nothing_unwinds():
    regs = UserRegs(ip=IP0, sp=STACK + 0x100, bp=0)
    t = unwind_user(BufferMemory(), regs)
    assert t.ips == [IP0]
    assert t.stop.reason is StopReason.END_OF_CHAIN  # fp = 0 fails fp < sp: no separate zero test


# --- each stop reason --------------------------------------------------------------------

def test_fp_below_sp():
    regs = UserRegs(ip=IP0, sp=STACK + 0x100, bp=STACK + 0x80)
    t = unwind_user(BufferMemory({STACK: bytes(0x1000)}), regs)
    assert t.ips == [IP0] and t.stop.reason is StopReason.FP_BELOW_SP


def test_fault_on_return_address_names_the_address():
    fp = STACK + 0x2000  # above the one mapped page
    regs = UserRegs(ip=IP0, sp=STACK + 0x100, bp=fp)
    t = unwind_user(BufferMemory({STACK: bytes(0x1000)}), regs)
    assert t.stop.reason is StopReason.FAULT and t.stop.addr == fp + 8  # RA is read first


def test_fault_on_saved_fp_after_return_address_was_read():
    fp = STACK + 0x1000 - 8  # RA at fp+8 is on the mapped page, the saved FP at fp is not
    mem = BufferMemory({STACK + 0x1000: q(0x402000) + bytes(0xFF8)})
    regs = UserRegs(ip=IP0, sp=STACK + 0x100, bp=fp)
    t = unwind_user(mem, regs)
    assert t.stop.reason is StopReason.FAULT and t.stop.addr == fp
    assert t.ips == [IP0]  # the step failed as a whole: no half-updated state


def test_misaligned_cfa():
    regs = UserRegs(ip=IP0, sp=STACK + 0x100, bp=STACK + 0x204)
    t = unwind_user(BufferMemory({STACK: bytes(0x1000)}), regs)
    assert t.stop.reason is StopReason.MISALIGNED_CFA and t.stop.addr == STACK + 0x214


def test_non_monotonic_cfa_by_wraparound():
    # fp >= sp, but fp + 16 wraps to 0 in unsigned long arithmetic: cfa <= sp.
    regs = UserRegs(ip=IP0, sp=STACK, bp=(1 << 64) - 16)
    t = unwind_user(BufferMemory(), regs)
    assert t.stop.reason is StopReason.NON_MONOTONIC and t.stop.addr == 0


def test_non_monotonic_cfa_from_a_table_rule():
    table = RangeRules([(IP0 & ~0xFFF, (IP0 & ~0xFFF) + 0x1000, sp_rule(0))])  # cfa = sp
    regs = UserRegs(ip=IP0, sp=STACK + 0x100, bp=0)
    t = unwind_user(BufferMemory({STACK: bytes(0x1000)}), regs, tables_for=lambda ip: table)
    assert t.stop.reason is StopReason.NON_MONOTONIC
    assert t.stopped_in is UnwinderType.SFRAME  # an SFrame failure ends the walk, no FP fallback


def test_frame_pointer_cycle_stops_in_bounded_steps():
    # Two frames whose saved FPs point at each other: A -> B -> A.  The second visit of A is
    # below sp, which the kernel's fp < sp check (the "stack grows" guard for FP frames) catches.
    a, b = STACK + 0x100, STACK + 0x200
    buf = bytearray(0x1000)
    buf[0x100:0x110] = q(b, 0x402000)
    buf[0x200:0x210] = q(a, 0x403000)
    regs = UserRegs(ip=IP0, sp=STACK + 0x80, bp=a)
    t = unwind_user(BufferMemory({STACK: bytes(buf)}), regs)
    assert t.ips == [IP0, 0x402000, 0x403000]
    assert t.stop.reason is StopReason.FP_BELOW_SP


def test_self_cycle_with_sp_rule_is_non_monotonic():
    rule = FrameRule(ValueRule("fp", 0), ValueRule("cfa", 8, True), ValueRule("cfa", 0, True))
    fp = STACK + 0x100
    mem = BufferMemory({STACK: bytes(0x100) + q(fp, IP0) + bytes(0xEF0)})
    table = RangeRules([(IP0, IP0 + 1, rule)])
    t = unwind_user(mem, UserRegs(ip=IP0, sp=STACK + 0x80, bp=fp), tables_for=lambda ip: table)
    assert t.ips == [IP0, IP0]
    assert t.stop.reason is StopReason.NON_MONOTONIC


@pytest.mark.parametrize("fp", [0xFFFF_8880_0000_0000, TASK_SIZE_MAX_4LEVEL - 8, 0x0000_8000_0000_0000])
def test_pointer_into_kernel_space_is_never_read(fp):
    mem = RecordingMemory(BufferMemory({STACK: bytes(0x1000)}))
    regs = UserRegs(ip=IP0, sp=STACK + 0x100, bp=fp)
    t = unwind_user(mem, regs)
    assert t.stop.reason is StopReason.NOT_USER_ADDRESS and t.stop.addr == fp + 8
    assert all(a + n <= TASK_SIZE_MAX_4LEVEL for a, n in mem.reads)


def test_task_size_is_a_parameter_5_level():
    fp = 0x0000_8000_0000_0000  # a user address only with 5-level paging
    regs = UserRegs(ip=IP0, sp=STACK + 0x100, bp=fp)
    t = unwind_user(BufferMemory(), regs, task_size_max=TASK_SIZE_MAX_5LEVEL)
    assert t.stop.reason is StopReason.FAULT and t.stop.addr == fp + 8


def test_unmapped_page_in_the_middle_of_a_chain():
    s = fp_chain(6)
    data = bytearray(s.memory.regions[s.stack_base])
    # unmap the page that holds frame 3's saved FP/RA: split the region around it
    fp3 = s.sps[4] - 16
    page = fp3 & ~0xFFF
    lo, hi = page - s.stack_base, page + 0x1000 - s.stack_base
    mem = BufferMemory({s.stack_base: bytes(data[:max(lo, 0)]), page + 0x1000: bytes(data[hi:])})
    t = unwind_user(mem, s.regs)
    assert t.stop.reason is StopReason.FAULT and page <= t.stop.addr < page + 0x1000
    assert t.ips == s.ips[: len(t.ips)]


def test_not_user_mode_and_vm86_give_empty_traces():
    t = unwind_user(BufferMemory(), UserRegs(ip=0xFFFFFFFF81000000, sp=1, bp=1, cs=0x10))
    assert t.ips == [] and t.stop.reason is StopReason.NOT_USER_MODE
    t = unwind_user(BufferMemory(), UserRegs(ip=IP0, sp=STACK, bp=STACK, cs=0x23, flags=X86_VM_MASK))
    assert t.ips == [] and t.stop.reason is StopReason.VM86


def test_max_entries_zero_is_a_config_error():
    with pytest.raises(UnwindConfigError):
        UserUnwinder(BufferMemory(), UnwindConfig(max_entries=0))


def test_rule_error_below_topmost_and_registers_at_topmost():
    # f0 (topmost) has CFA = rbx + 16 (a DRAP-like rule): evaluable only with the full registers.
    # f1 has the same rule but is not topmost: the walk stops there, naming the register.
    f0, f1 = 0x401000, 0x402000
    rule = FrameRule(ValueRule("r3", 16), ValueRule("cfa", -8, True), ValueRule("same"))
    table = RangeRules([(f0, f0 + 0x100, rule), (f1, f1 + 0x100, rule)])
    mem = BufferMemory({STACK: bytes(0x100) + q(0, f1 + 0x10) + bytes(0xEF0)})
    regs = UserRegs(ip=f0 + 4, sp=STACK + 0x80, bp=0, bx=STACK + 0x100)
    t = unwind_user(mem, regs, tables_for=lambda ip: table)
    assert t.ips == [f0 + 4, f1 + 0x10]
    assert t.stop.reason is StopReason.RULE_ERROR and "r3" in t.stop.detail


def test_no_unwind_info_without_fp_fallback():
    s = mixed_chain([("nofp", True), ("fp", False), ("fp", True)])
    t = unwind_user(s.memory, s.regs, tables_for=lambda ip: s.table, fp=False)
    assert t.ips == s.ips[:2]
    assert t.stop.reason is StopReason.NO_UNWIND_INFO and t.stop.addr == s.ips[1]


# --- the entry limit -----------------------------------------------------------------------

def test_1000_deep_chain_is_truncated_at_510_not_an_error():
    s = fp_chain(1000)
    t = unwind_user(s.memory, s.regs)
    assert len(t) == UNWIND_MAX_ENTRIES == 510
    assert t.ips == s.ips[:510]
    assert t.stop.reason is StopReason.LIMIT and not t.stop.reason.is_error


def test_early_revision_limit_512():
    s = fp_chain(1000)
    t = unwind_user(s.memory, s.regs, max_entries=UNWIND_MAX_ENTRIES_EARLY)
    assert len(t) == 512 and t.stop.reason is StopReason.LIMIT


@pytest.mark.parametrize("depth,reason", [(509, StopReason.END_OF_CHAIN), (510, StopReason.LIMIT),
                                          (511, StopReason.LIMIT)])
def test_limit_boundary(depth, reason):
    # unwind_user() stores the entry, then breaks at nr >= max_entries before trying the next step.
    s = fp_chain(depth)
    t = unwind_user(s.memory, s.regs)
    assert len(t) == min(depth, 510) and t.stop.reason is reason


# --- compat (32-bit) -------------------------------------------------------------------------

def relocated(s, delta: int) -> BufferMemory:
    return BufferMemory({base + delta: data for base, data in s.memory.regions.items()})


@pytest.mark.parametrize("profile", [Profile.SEED_V10, Profile.MAINLINE])
def test_compat_flat_segments_both_profiles(profile):
    s = fp_chain(6, ws=4)
    assert s.regs.compat
    t = unwind_user(s.memory, s.regs, profile=profile)
    assert t.ips == s.ips and t.stop.reason is StopReason.END_OF_CHAIN
    assert set(t.types[1:]) == {UnwinderType.COMPAT_FP}


def test_compat_reads_4_byte_words_and_checks_4_byte_alignment():
    s = fp_chain(3, ws=4, frame_size=20)  # frames 4- but not 8-aligned
    t = unwind_user(s.memory, s.regs)
    assert t.ips == s.ips
    regs = UserRegs(ip=IP0, sp=0x1000, bp=0x2002, cs=0x23, ss=0x2B)
    t = unwind_user(BufferMemory(), regs)
    assert t.stop.reason is StopReason.MISALIGNED_CFA


def test_compat_segment_base_changes_seed_v10_only():
    cs_base, ss_base = 0x1000_0000, 0x2000_0000
    bases = {0x23: cs_base, 0x2B: ss_base}
    s = fp_chain(5, ws=4, top=0x8000_0000)
    mem = relocated(s, ss_base)  # the stack lives at linear SS base + offset

    seed = unwind_user(mem, s.regs, profile=Profile.SEED_V10, segment_base=bases.__getitem__)
    assert seed.ips == [ip + cs_base for ip in s.ips]
    assert [f.sp for f in seed] == [sp + ss_base for sp in s.sps]
    # arch_unwind_user_next() bases the outermost saved FP too: the ABI's 0 becomes ss_base, so
    # the walk ends on a plain fp < sp rather than on a zero frame pointer.
    assert seed.stop.reason is StopReason.FP_BELOW_SP and f"fp={ss_base:#x}" in seed.stop.detail

    main = unwind_user(mem, s.regs, profile=Profile.MAINLINE, segment_base=bases.__getitem__)
    assert main.ips == [s.ips[0]]  # mainline ignores the base: the frame is not where it reads
    assert main.stop.reason is StopReason.FAULT

    flat_seed = unwind_user(s.memory, s.regs, profile=Profile.SEED_V10)
    flat_main = unwind_user(s.memory, s.regs, profile=Profile.MAINLINE)
    assert flat_seed.ips == flat_main.ips == s.ips


# --- the function-entry frame ------------------------------------------------------------------

ENTRY_FUNC = 0x40F000


def at_entry(insn: bytes):
    """fp_chain(5) with a new topmost frame stopped at the first instruction of ENTRY_FUNC."""
    s = fp_chain(5)
    sp = s.sps[0] - 8  # the call pushed the return address into frame 0's function
    data = bytearray(s.memory.regions[s.stack_base])
    struct.pack_into("<Q", data, sp - s.stack_base, s.ips[0])
    mem = BufferMemory({s.stack_base: bytes(data), ENTRY_FUNC: insn + b"\x48\x89\xe5\xc3"})
    regs = UserRegs(ip=ENTRY_FUNC, sp=sp, bp=s.regs.bp)
    return mem, regs, [ENTRY_FUNC] + s.ips


@pytest.mark.parametrize("insn", [b"\x55", bytes.fromhex("f30f1efa")])
def test_entry_frame_off_loses_the_caller(insn):
    mem, regs, full = at_entry(insn)
    t = unwind_user(mem, regs)  # mainline default: no uprobe, no entry frame
    assert t.ips == [full[0]] + full[2:]  # the known mainline divergence: caller full[1] is lost
    assert t.stop.reason is StopReason.END_OF_CHAIN


@pytest.mark.parametrize("insn", [b"\x55", bytes.fromhex("f30f1efa")])
def test_entry_frame_any_ip_gives_full_chain(insn):
    mem, regs, full = at_entry(insn)
    t = unwind_user(mem, regs, entry_frame=EntryFrame.ANY_IP)
    assert t.ips == full
    assert t.types[1] is UnwinderType.FP_ENTRY and set(t.types[2:]) == {UnwinderType.FP}


def test_entry_frame_any_ip_ignores_other_instructions_and_unreadable_code():
    mem, regs, full = at_entry(b"\x90")
    t = unwind_user(mem, regs, entry_frame=EntryFrame.ANY_IP)
    assert t.ips == [full[0]] + full[2:]
    mem.regions.pop(ENTRY_FUNC)
    mem = BufferMemory(mem.regions)
    t = unwind_user(mem, regs, entry_frame=EntryFrame.ANY_IP)
    assert t.ips == [full[0]] + full[2:]


def test_entry_frame_uprobe_mainline_only():
    mem, regs, full = at_entry(b"\x55")
    assert unwind_user(mem, regs, entry_frame=EntryFrame.UPROBE).ips == full
    seed = unwind_user(mem, regs, entry_frame=EntryFrame.UPROBE, profile=Profile.SEED_V10)
    assert seed.ips == [full[0]] + full[2:]


def test_entry_frame_applies_only_to_the_topmost_frame():
    # Every function in fp_chain starts with push %rbp here; the callers are mid-function anyway,
    # but make their IPs point at 0x55 bytes too: only the topmost may use the entry rule.
    mem, regs, full = at_entry(b"\x55")
    for ip in full[1:]:
        mem.add(ip, b"\x55")
    t = unwind_user(mem, regs, entry_frame=EntryFrame.ANY_IP)
    assert t.ips == full and t.types.count(UnwinderType.FP_ENTRY) == 1


# --- mixed SFrame + FP -------------------------------------------------------------------------

SPEC = [("nofp", True), ("fp", False), ("nofp", True), ("fp", True), ("fp", False), ("fp", True)]


def test_mixed_uses_sframe_where_it_has_a_rule_and_fp_elsewhere():
    s = mixed_chain(SPEC)
    t = unwind_user(s.memory, s.regs, tables_for=lambda ip: s.table)
    assert t.ips == s.ips and [f.sp for f in t] == s.sps
    T = UnwinderType
    assert t.types == [T.REGS, T.SFRAME, T.FP, T.SFRAME, T.SFRAME, T.FP]
    assert t.stop.reason is StopReason.END_OF_CHAIN and "undefined" in t.stop.detail


def test_fp_only_loses_the_callers_of_frameless_functions():
    s = mixed_chain(SPEC)
    t = unwind_user(s.memory, s.regs)
    assert t.ips == [s.ips[i] for i in (0, 2, 4, 5)]


def test_tables_for_none_falls_back_to_fp():
    s = mixed_chain([("fp", False)] * 4)
    t = unwind_user(s.memory, s.regs, tables_for=lambda ip: None)
    assert t.ips == s.ips and set(t.types[1:]) == {UnwinderType.FP}


def test_memory_fault_type_is_typed():
    with pytest.raises(MemoryFault):
        BufferMemory().read(0, 1)
