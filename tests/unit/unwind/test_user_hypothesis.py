"""Property: whatever the stack holds, a walk ends with a StopReason within max_entries steps."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.memory import BufferMemory
from harness.regs import UserRegs
from harness.rule import FrameRule, ValueRule
from harness.unwind.access import TASK_SIZE_MAX_4LEVEL
from harness.unwind.synth import RangeRules
from harness.unwind.user import EntryFrame, Profile, StopReason, UnwindConfig, UserUnwinder

STACK = 0x7FFF_F000_0000
CODE = 0x400000

words = st.one_of(
    st.integers(0, (1 << 64) - 1),
    st.integers(STACK - 0x100, STACK + 0x2100),  # pointers near and into the stack
    st.sampled_from([0, 1, TASK_SIZE_MAX_4LEVEL - 8, TASK_SIZE_MAX_4LEVEL, (1 << 64) - 8]),
)

bases = st.sampled_from(["sp", "fp", "cfa", "r3", "r7", "same", "undefined"])
value_rules = st.builds(ValueRule, bases, st.integers(-64, 64), st.booleans())
rules = st.builds(FrameRule, value_rules, value_rules, value_rules)


class CountingUnwinder(UserUnwinder):
    steps = 0

    def next(self, st_):
        self.steps += 1
        return super().next(st_)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stack=st.lists(words, min_size=0, max_size=512),
    code=st.binary(min_size=0, max_size=8),
    ip=st.one_of(st.integers(CODE, CODE + 16), words),
    sp=words,
    bp=words,
    cs=st.sampled_from([0x33, 0x23, 0x10, 0x2B]),
    flags=st.sampled_from([0x202, 0x20202]),
    profile=st.sampled_from(list(Profile)),
    entry=st.sampled_from(list(EntryFrame)),
    max_entries=st.integers(1, 40),
    table=st.one_of(st.none(), st.lists(st.tuples(st.integers(0, 0x20), rules), max_size=4)),
    fp=st.booleans(),
)
def test_walk_always_ends_with_a_reason(stack, code, ip, sp, bp, cs, flags, profile, entry,
                                        max_entries, table, fp):
    mem = BufferMemory({STACK: b"".join(w.to_bytes(8, "little") for w in stack)})
    if code:
        mem.add(CODE, code)
    provider = None
    if table is not None:
        entries, start = [], CODE
        for size, rule in table:
            entries.append((start, start + size + 1, rule))
            start += size + 1
        provider = RangeRules(entries)
    cfg = UnwindConfig(profile=profile, entry_frame=entry, max_entries=max_entries, fp=fp,
                       tables_for=(lambda ip_: provider) if provider else None,
                       segment_base=lambda sel: 0x1000 * (sel & 3))
    u = CountingUnwinder(mem, cfg)
    t = u.unwind(UserRegs(ip=ip, sp=sp, bp=bp, cs=cs, flags=flags, bx=STACK + 0x40))
    assert isinstance(t.stop.reason, StopReason)
    assert len(t) <= max_entries
    assert u.steps <= max_entries  # the kernel loop: one step per stored entry at most
    assert (t.stop.reason is StopReason.LIMIT) == (len(t) == max_entries and u.steps < len(t))
    if t.stop.reason in (StopReason.FAULT, StopReason.NOT_USER_ADDRESS):
        assert t.stop.addr is not None
    for f in t.frames:
        assert 0 <= f.ip < 1 << 64 and 0 <= f.sp < 1 << 64 and 0 <= f.fp < 1 << 64
