"""The perf-like stitcher: samples joined with deferred user stacks; the lost-events rule."""

from __future__ import annotations

import pytest

from harness.deferred.stitch import (
    PERF_CONTEXT_KERNEL,
    PERF_CONTEXT_USER,
    PERF_CONTEXT_USER_DEFERRED,
    PERF_RECORD_CALLCHAIN_DEFERRED,
    DeferredCallchain,
    Lost,
    Sample,
    StitchError,
    deferred_marker,
    split_callchain,
    stitch,
)

K = [PERF_CONTEXT_KERNEL, 0xFFFFFFFF81000000, 0xFFFFFFFF81000100]


def sample(seq, pid, cookie):
    return Sample(seq, pid, tuple(K + deferred_marker(cookie)))


def test_marker_values():
    assert PERF_CONTEXT_USER_DEFERRED == 2**64 - 640 == 0xFFFFFFFFFFFFFD80
    assert PERF_RECORD_CALLCHAIN_DEFERRED == 22
    assert deferred_marker(0x1234) == [0xFFFFFFFFFFFFFD80, 0x1234]
    assert split_callchain(K + deferred_marker(7)) == (K, 7)
    assert split_callchain([-640, 9]) == ([], 9)  # negative as written in C
    assert split_callchain(K) == (K, None)


def test_marker_must_end_the_chain_with_one_cookie():
    with pytest.raises(StitchError, match="exactly one cookie"):
        split_callchain(K + [PERF_CONTEXT_USER_DEFERRED])
    with pytest.raises(StitchError):
        split_callchain([PERF_CONTEXT_USER_DEFERRED, 1, 2])


def test_samples_join_the_deferred_stack_that_arrives_later():
    user = DeferredCallchain(4, 10, 0xAB, (0x401000, 0x401100))
    st = stitch([sample(1, 10, 0xAB), sample(2, 10, 0xAB), sample(3, 11, 0xAB), user])
    assert [j.sample.seq for j in st.joined] == [1, 2]
    assert st.joined[0].callchain == K + [PERF_CONTEXT_USER, 0x401000, 0x401100]
    assert [(u.sample.seq, u.reason) for u in st.unjoined] == [(3, "no-deferred-record")]  # other pid
    assert user.nr == 2


def test_sample_after_the_callback_joins_the_remembered_stack():
    """mainline: a request after the callback ran returns 1 with the same cookie; no new record."""
    user = DeferredCallchain(2, 10, 5, (0x401000,))
    st = stitch([sample(1, 10, 5), user, sample(3, 10, 5)])
    assert [j.sample.seq for j in st.joined] == [1, 3] and not st.unjoined


def test_lost_events_unjoin_samples_from_before_the_loss():
    st = stitch(
        [
            sample(1, 10, 5),
            Lost(2, lost=3),
            sample(3, 10, 5),  # same cookie after the loss
            DeferredCallchain(4, 10, 5, (0x401000,)),
        ]
    )
    assert [j.sample.seq for j in st.joined] == [3]
    assert [(u.sample.seq, u.reason) for u in st.unjoined] == [(1, "lost")]


def test_lost_forgets_stacks_seen_before_it():
    st = stitch([DeferredCallchain(1, 10, 5, (0x1,)), Lost(2), sample(3, 10, 5)])
    assert not st.joined and [(u.sample.seq, u.reason) for u in st.unjoined] == [(3, "no-deferred-record")]


def test_samples_without_deferred_part_pass_through():
    s = Sample(1, 10, tuple(K + [PERF_CONTEXT_USER, 0x401000]))
    st = stitch([s])
    assert st.complete == [s] and not st.joined and not st.unjoined


def test_records_must_be_in_order():
    with pytest.raises(StitchError, match="not after"):
        stitch([sample(2, 10, 5), sample(2, 10, 5)])
    with pytest.raises(StitchError, match="unknown record"):
        stitch(["nonsense"])
