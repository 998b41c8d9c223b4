"""The perf oracle (harness/oracles/perf.py) on the real captures of tests/data: what its frame list
says for a sample, and the helpers the perf causes read a sample with (the dump, its words, the
signal frame at sp, the kernel's chain against ours, a function's first byte).

The captures: ``perf-callchain-7.3.4.perfcc.gz`` (perf_callchain_user()'s FP chains; 64-bit,
every sample at getppid in c, 256-byte dumps), ``perf-callchain-defer-7.3.4.perfcc.gz`` (the same
with defer_callchain: each sample's CALLCHAIN_DEFERRED record), and
``debperf-7.3.4-compat-fp/perfcc.out.gz`` (a 32-bit callchain, deferred, with its program's
symbols).  tests/unit/perf/test_oracle_fixture.py says how they were taken.  mutmut found these
rules held by no test (the perf checks judge whole captures: a frame list's marks, its stop and
``outermost`` change nothing where the chains agree)."""

from __future__ import annotations

import dataclasses
import gzip
import struct

import pytest

from harness.memory import MemoryFault
from harness.oracles.base import NotChecked, OracleFrames, Request, Stack
from harness.oracles.perf import (
    SIGCONTEXT_64,
    UC_MCONTEXT,
    at_function_start,
    chain_agrees,
    in_dump,
    sigreturn_regs,
    stack_memory,
    word,
)
from harness.perf.oracle import PerfOracle, check_capture
from harness.perfparse.records import CallchainDeferred, Sample, TaskEvent, parse_capture
from harness.regs import SIGCONTEXT_32, compat_sigcontext_at
from harness.unwind.user import StopReason, unwind_user
from harness.verdicts.causes import CAUSES
from harness.verdicts.types import REGS, Divergence
from tests.support.gating import require
from tests.support.paths import TEST_DATA

CHAIN = (0x4016C7, 0x40173C, 0x401772, 0x4017BF, 0x401B94)  # c, b, a, main, __libc_start_call_main


def capture(name: str):
    return parse_capture(gzip.decompress((TEST_DATA / name).read_bytes()))


@pytest.fixture(scope="module")
def plain():
    return capture("perf-callchain-7.3.4.perfcc.gz")


@pytest.fixture(scope="module")
def deferred():
    return capture("perf-callchain-defer-7.3.4.perfcc.gz")


@pytest.fixture(scope="module")
def compat():
    return capture("debperf-7.3.4-compat-fp/perfcc.out.gz")


def samples(cap) -> list[Sample]:
    return [r for r in cap.records() if isinstance(r, Sample)]


def in_c(cap) -> Sample:
    """The capture's first sample of a 32-bit task in c (its walk: c, b, a, main, libc)."""
    return next(s for s in samples(cap) if s.regs is not None and s.regs.compat and len(unwind_user(
        stack_memory(s), s.regs).ips) == 5)


# -- the dump: stack_memory, in_dump, word -----------------------------------------------------------
def test_the_dump_is_its_bytes_at_sp_and_nothing_else(plain):
    s = samples(plain)[0]
    sp, end = s.regs.sp, s.regs.sp + len(s.stack)
    m = stack_memory(s)
    assert m.read(sp, len(s.stack)) == s.stack
    for addr in (sp - 1, end - 7):
        with pytest.raises(MemoryFault):
            m.read(addr, 8)
    # a word is in the dump from sp to its last 8 bytes; a smaller read to its last byte
    assert in_dump(s, sp) and in_dump(s, end - 8) and in_dump(s, end - 1, 1)
    assert not in_dump(s, sp - 1) and not in_dump(s, end - 7) and not in_dump(s, end, 1)
    assert word(s, sp) == 0x4B64D0 and word(s, end - 8) == struct.unpack_from("<Q", s.stack, len(s.stack) - 8)[0]
    assert word(s, sp - 8) is None and word(s, end - 7) is None


def test_a_word_of_the_dump_is_unsigned(plain):
    s = samples(plain)[0]
    assert word(s, s.regs.sp + 0xF0) == 0x84FEEBBACA11548A  # a mangled pointer in the dump: top bit set


def test_a_32_bit_tasks_dump_is_where_its_walk_reads(compat):
    """unwind_user takes a 32-bit task's sp (and every address) modulo 2^32: the dump sits at the
    low half of the sampled sp, whatever the upper half holds."""
    s = in_c(compat)
    assert s.regs.sp < 1 << 32
    assert stack_memory(s).read(s.regs.sp, len(s.stack)) == s.stack
    high = dataclasses.replace(s, regs=dataclasses.replace(s.regs, sp=s.regs.sp | 0xFFFF_FFFF_0000_0000))
    assert stack_memory(high).read(s.regs.sp, len(s.stack)) == s.stack
    assert unwind_user(stack_memory(high), high.regs).ips == unwind_user(stack_memory(s), s.regs).ips


def test_without_registers_the_dump_has_no_place(plain):
    """No user registers, no sp: every read faults, whatever bytes came with the sample."""
    s = samples(plain)[0]
    m = stack_memory(dataclasses.replace(s, regs=None))
    with pytest.raises(MemoryFault):
        m.read(s.regs.sp, 8)


# -- sigreturn_regs: the sigcontext at the sampled sp --------------------------------------------------
SIGCONTEXT_END = UC_MCONTEXT + 8 * len(SIGCONTEXT_64)  # 184: the last byte rt_sigreturn's registers need


def test_the_restored_registers_are_the_sigcontexts_words(plain):
    s = samples(plain)[0]  # not in rt_sigreturn: the words are what a frame there would restore
    sp = s.regs.sp
    for dump in (s, dataclasses.replace(s, stack=s.stack[:SIGCONTEXT_END])):  # the whole dump; just enough of it
        r, at = sigreturn_regs(dump)
        assert at == UC_MCONTEXT
        assert {n: getattr(r, n) for n in SIGCONTEXT_64} == {
            n: word(s, sp + UC_MCONTEXT + 8 * i) for i, n in enumerate(SIGCONTEXT_64)}
        assert (r.cs, r.ss, r.compat) == (0x33, 0x2B, False)  # a 64-bit task's segments
    assert sigreturn_regs(dataclasses.replace(s, stack=s.stack[:SIGCONTEXT_END - 1])) is None


@pytest.fixture(scope="module")
def i386_signals():
    return capture("i386-sigreturn/perfcc.out.gz")


SIGRETURN_IP_32 = 0xF7FFCD88  # after the int $0x80 of the vDSO's __kernel_sigreturn (tests/data/i386-sigreturn)


def in_sigreturn_32(cap) -> list[Sample]:
    return [s for s in samples(cap) if s.regs is not None and s.regs.compat and s.regs.ip == SIGRETURN_IP_32]


def test_a_32_bit_tasks_sigreturn_restores_the_sigcontext_at_sp(i386_signals):
    """A real i386 capture: a handler without SA_SIGINFO has a sigframe_ia32, whose restorer pops
    the signal number, so at sigreturn's syscall the sigcontext_32 is at sp.  The registers read
    there are 32-bit ones, and the walk from them over the dump is the kernel's deferred record
    of that entry (taken at the return to user space, after sigreturn restored them)."""
    records = {r.cookie: r for r in i386_signals.records() if isinstance(r, CallchainDeferred)}
    found = in_sigreturn_32(i386_signals)
    assert len(found) == 5
    for s in found:
        r, at = sigreturn_regs(s)
        assert at == 0 and r.compat and (r.cs, r.ss) == (0x23, 0x2B)
        assert (r.ip, r.sp, r.bp) == (0x804975F, *struct.unpack_from("<II", s.stack, 4 * 6)[::-1])  # bp, sp
        assert tuple(unwind_user(stack_memory(s), r).ips) == records[s.cookie].ips


def test_a_32_bit_rt_frame_is_told_by_its_pinfo_and_puc(i386_signals):
    """An rt_sigframe_ia32 (a handler with SA_SIGINFO) has its sigcontext at sp + 160, where its
    pinfo and puc words, sp + 12 and sp + 140, say so; a dump whose words say neither frame has
    no restored registers."""
    s = in_sigreturn_32(i386_signals)[0]
    sp = s.regs.sp
    sc = s.stack[:4 * len(SIGCONTEXT_32)]
    rt = bytearray(0x200)
    struct.pack_into("<III", rt, 0, 14, sp + 12, sp + 140)
    rt[160:160 + len(sc)] = sc
    got = sigreturn_regs(dataclasses.replace(s, stack=bytes(rt)))
    assert got is not None and got[1] == 160 and got[0] == sigreturn_regs(s)[0]
    assert compat_sigcontext_at(bytes(rt), sp + 4) is None  # pointers that are not this frame's: no rt frame
    assert sigreturn_regs(dataclasses.replace(s, stack=bytes(0x200))) is None
    assert sigreturn_regs(dataclasses.replace(s, stack=s.stack[:4 * len(SIGCONTEXT_32) - 1])) is None


def test_the_perf_oracle_proves_the_32_bit_sigreturn(i386_signals):
    """The whole check of the capture: the five samples in sigreturn are proven sigreturn-restored,
    the frame named, none unexplained.  (Without the program's files the execve of the launcher
    is not proven here: its ELF entry is not known.)"""
    d = check_capture(i386_signals, None).deferred
    assert d.expected.get("sigreturn-restored") == 5
    assert not [f for f in d.failures if f"ip={SIGRETURN_IP_32:#x}" in f], d.failures
    texts = [e.evidence["text"] for e in d.explained if e.cause == "sigreturn-restored"]
    assert texts and all(t.startswith("the sample is in sigreturn: the signal frame's sigcontext at sp ") and
                         " + 0 holds ip 0x804975f " in t for t in texts)


# -- chain_agrees: our walk over the dump against a kernel chain ----------------------------------------
def test_a_chain_agrees_when_equal(plain):
    s = samples(plain)[0]
    walk = unwind_user(stack_memory(s), s.regs)
    assert walk.ips == list(CHAIN) and chain_agrees(s, walk, CHAIN) == "equal"


def test_a_chain_agrees_past_the_dump_only_where_our_walk_faulted_outside_it(plain):
    s = samples(plain)[0]
    # the dump cut inside b's frame record (at sp + 0x40): our walk faults reading it, past the dump
    short = dataclasses.replace(s, stack=s.stack[:0x48])
    walk = unwind_user(stack_memory(short), short.regs)
    assert walk.stop.reason is StopReason.FAULT and not in_dump(short, walk.stop.addr)
    assert walk.ips == list(CHAIN[:2]) and chain_agrees(short, walk, CHAIN) == "ran off the dump"
    # not a prefix of the kernel's chain: a difference, fault or not
    assert chain_agrees(short, walk, (CHAIN[0], CHAIN[1] + 1, *CHAIN[2:])) is None
    # the whole dump: our walk stops at a check (fp < sp), a prefix of the kernel's chain, which read
    # on through the frame pointer (perf_callchain_user has no such check): not the dump's end
    walk = unwind_user(stack_memory(s), s.regs)
    assert walk.stop.reason is StopReason.FP_BELOW_SP and s.user[:5] == CHAIN
    assert chain_agrees(s, walk, s.user) is None


# -- at_function_start: by the program's symbols -----------------------------------------------------
@pytest.fixture(scope="module")
def compat_oracle(compat):
    from harness.images.errors import ImageError
    from harness.images.programs import Variant, build_program
    from harness.images.toolchain import get_toolchain
    from harness.perf.capture import resolver

    try:
        program = build_program("callchain", get_toolchain("host"), Variant(bits=32, shadow=True))
    except ImageError as exc:
        require(False, f"the host toolchain cannot build guest_programs/callchain.c 32-bit: {exc}")
        raise
    return PerfOracle(compat, resolver([program]))


def test_a_function_start_is_its_first_byte(compat, compat_oracle):
    s = in_c(compat)
    ps = compat_oracle.stack(s, None, True).sample
    c = compat_oracle.symbolizer.address_of("c")
    assert at_function_start(ps, c) == "c" and at_function_start(ps, c, "c") == "c"
    assert at_function_start(ps, c + 1) is None and at_function_start(ps, c + 1, "c") is None
    assert at_function_start(ps, c, "_start") is None  # another function's first byte


# -- PerfCallchainOracle.frames --------------------------------------------------------------------------
def test_a_stack_without_a_perf_sample_is_not_checked(plain):
    o = PerfOracle(plain)
    s = samples(plain)[0]
    stack = dataclasses.replace(o.stack(s, s.user, False), sample=None)  # as the live engine's stacks are
    assert o.perf.frames(stack) == NotChecked("not a perf sample")


def test_the_fp_chain_is_the_frame_list(plain):
    """perf_callchain_user()'s chain, the sampled IP first (an interrupted IP, looked up at itself);
    outermost unless it reached perf_event_max_stack."""
    o = PerfOracle(plain)
    for s in samples(plain):  # kernel mode and user mode
        assert o.perf.frames(o.stack(s, s.user, False)) == OracleFrames(
            s.user, frozenset({0}), "perf_callchain_user (kernel FP walk)", True)
    cut = capture("perf-callchain-7.3.4.perfcc.gz")
    cut.info["max_stack"] = str(len(s.user))  # as if kernel.perf_event_max_stack were the chain's length
    o = PerfOracle(cut)
    assert o.perf.frames(o.stack(s, s.user, False)) == OracleFrames(
        s.user, frozenset({0}), f"perf_callchain_user (kernel FP walk), cut at perf_event_max_stack ({len(s.user)})",
        False)


def test_an_fp_chain_not_at_the_sampled_user_ip_is_a_failure(plain):
    """The message names the user IP the chain should start at: the registers' in kernel mode (the
    sample's IP is the kernel's), the sample's own in user mode."""
    o = PerfOracle(plain)
    kernel = next(s for s in samples(plain) if not s.user_mode)
    wrong = (kernel.regs.ip + 1, *kernel.user[1:])
    assert o.perf.frames(o.stack(kernel, wrong, False)) == NotChecked(
        f"the kernel's user callchain does not start at the sampled user IP {kernel.regs.ip:#x}", failure=True)
    user = next(s for s in samples(plain) if s.user_mode)
    moved = dataclasses.replace(user, ip=user.ip + 1)  # PERF_SAMPLE_IP other than the registers' ip
    assert o.perf.frames(o.stack(moved, moved.user, False)) == NotChecked(
        f"the kernel's user callchain does not start at the sampled user IP {user.ip + 1:#x}", failure=True)


def answered(cap) -> list[tuple[int, Sample, int, CallchainDeferred]]:
    """Each sample of the capture with the CALLCHAIN_DEFERRED record of its cookie: (index, sample,
    index, record)."""
    recs = cap.records()
    out = []
    for i, s in enumerate(recs):
        if isinstance(s, Sample) and s.deferred:
            j = next(j for j, r in enumerate(recs) if isinstance(r, CallchainDeferred) and r.cookie == s.cookie)
            out.append((i, s, j, recs[j]))
    return out


def test_the_deferred_record_is_the_frame_list(deferred):
    """The record's ips (unwind_user at the return to user space); outermost unless the walk
    reached UNWIND_MAX_ENTRIES, where it may have been cut."""
    o = PerfOracle(deferred)
    pairs = answered(deferred)
    assert len(pairs) == 10
    for i, s, j, rec in pairs:
        assert rec.ips == CHAIN
        assert o.perf.frames(o.stack(s, rec.ips, True, seq=i, record_seq=j)) == OracleFrames(
            CHAIN, frozenset({0}), "CALLCHAIN_DEFERRED (kernel unwind_user)", True)
    i, s, j, rec = pairs[0]
    o = PerfOracle(deferred, max_entries=len(CHAIN))
    assert o.perf.frames(o.stack(s, rec.ips, True, seq=i, record_seq=j)) == OracleFrames(
        CHAIN, frozenset({0}), f"CALLCHAIN_DEFERRED (kernel unwind_user), cut at UNWIND_MAX_ENTRIES ({len(CHAIN)})",
        False)
    o = PerfOracle(deferred, max_entries=len(CHAIN) + 1)
    assert o.perf.frames(o.stack(s, rec.ips, True, seq=i, record_seq=j)).outermost


def test_an_entry_the_task_left_by_exit_has_an_empty_frame_list(deferred):
    """No record came: the task exited (7.3.4's do_exit() detaches perf's events before the
    deferred work runs).  The kernel walked nothing: an empty list, not the stack's end."""
    o = PerfOracle(deferred)
    recs = deferred.records()
    exit_seq = next(k for k, r in enumerate(recs) if isinstance(r, TaskEvent) and r.kind == "exit")
    i, s, _, _ = answered(deferred)[-1]
    assert o.perf.frames(o.stack(s, None, True, seq=i, exit_seq=exit_seq)) == OracleFrames(
        (), frozenset({0}), f"no CALLCHAIN_DEFERRED: the task exited (record {exit_seq}) before its entry's "
        f"deferred work ran", False)


def test_a_sample_without_a_kernel_chain_is_not_checked(deferred):
    """An entry no record answered and no exit ended (the checker's violation): nothing to compare."""
    o = PerfOracle(deferred)
    i, s, _, _ = answered(deferred)[0]
    assert o.perf.frames(o.stack(s, None, True, seq=i)) == NotChecked(
        "the kernel gave no user callchain for this sample")


def test_the_engines_32_bit_sigreturn_is_told_by_its_syscall_number(i386_signals):
    """The live engine's side (the regs oracle): a 32-bit task's request in sigreturn (compat
    syscall 119) or rt_sigreturn (173) is walked on the registers restored from the frame, at sp
    or at sp + 160 as the syscall says.  Read here from the real sample's registers and stack."""
    s = in_sigreturn_32(i386_signals)[0]
    restored, _ = sigreturn_regs(s)
    rt = bytearray(0x200)
    rt[160:160 + 4 * len(SIGCONTEXT_32)] = s.stack[:4 * len(SIGCONTEXT_32)]
    predicate = CAUSES["sigreturn-restored"].predicate
    d = Divergence("fp", "regs", REGS, 0, 0, (restored.ip,), (s.regs.ip,))

    def judged(stack: bytes, syscall: int):
        st = Stack(restored, unwind_user(stack_memory(s), restored), "fp", 127,
                   stack_memory(dataclasses.replace(s, stack=stack)), None, None,
                   request=Request(s.regs, syscall=syscall, own="main"))
        return predicate(st, d)

    ev = judged(s.stack, 119)
    assert ev is not None and ev["text"].startswith("the task was in sigreturn (compat syscall 119) and the walked "
                                                    f"registers are those it restored from the signal frame's "
                                                    f"sigcontext at sp {s.regs.sp:#x} + 0")
    ev = judged(bytes(rt), 173)
    assert ev is not None and "in rt_sigreturn (compat syscall 173)" in ev["text"] and ev["text"].endswith(" + 160")
    assert judged(s.stack, 173) is None  # the rt frame's place holds no such registers
    assert judged(s.stack, 20) is None  # getpid: no frame restored
    assert judged(bytes(0x200), 119) is None
