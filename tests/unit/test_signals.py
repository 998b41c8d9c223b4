"""harness/signals.py: the first of SIGINT/SIGTERM/SIGHUP raises, a later one is quiet, a
deferred section is never cut, and a signal ignored at start stays ignored."""

from __future__ import annotations

import os
import signal

import pytest

from harness import signals
from harness.signals import Interrupted, SignalState, handling


def test_the_first_signal_raises_with_its_name_a_second_is_quiet_and_hurries():
    st = SignalState()
    exc = st.on_signal(signal.SIGTERM)
    assert isinstance(exc, Interrupted) and isinstance(exc, KeyboardInterrupt)
    assert exc.name == "SIGTERM" and signals.signal_name(exc) == "SIGTERM" and not st.hurry
    assert st.on_signal(signal.SIGINT) is None and st.hurry
    assert st.on_signal(signal.SIGHUP) is None and st.received == [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]


def test_a_plain_keyboard_interrupt_is_sigint():
    assert signals.signal_name(KeyboardInterrupt()) == "SIGINT"


def test_a_signal_in_a_deferred_section_is_raised_as_it_ends_and_only_then():
    st = SignalState()
    done = []
    with pytest.raises(Interrupted) as info:
        with st.deferring():
            with st.deferring():  # nested: raised at the outermost end
                assert st.on_signal(signal.SIGHUP) is None
                done.append("inner")
            done.append("outer")  # not cut by the signal
    assert done == ["inner", "outer"] and info.value.name == "SIGHUP"
    # enter/leave, the hot path's form: the same
    st2 = SignalState()
    st2.enter()
    assert st2.on_signal(signal.SIGINT) is None
    with pytest.raises(Interrupted):
        st2.leave()
    st2.enter()
    st2.leave()  # nothing pending: nothing raised


def test_handling_installs_the_handler_and_a_real_signal_takes_ctrl_c_s_way():
    old = signal.getsignal(signal.SIGTERM)
    with handling() as st:
        with pytest.raises(KeyboardInterrupt) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs at the next bytecode boundary
                pass
        assert info.value.name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)  # during the clean-up: nothing raised
        for _ in range(1000):
            pass
        assert st.hurry
    assert signal.getsignal(signal.SIGTERM) == old


def test_a_signal_ignored_at_start_stays_ignored_and_restore_false_ignores_after():
    old_hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup
    old_term = signal.getsignal(signal.SIGTERM)
    try:
        with handling(restore=False):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN  # the process exits next
    finally:
        signal.signal(signal.SIGHUP, old_hup)
        signal.signal(signal.SIGTERM, old_term)
