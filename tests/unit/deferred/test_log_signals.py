"""EventLog.emit under a signal: a SIGINT that comes while a record is written is raised after
it, so the log never has a seq counted for a line not written (harness check refuses a gap)."""

from __future__ import annotations

import io
import signal

import pytest

from harness import signals
from harness.deferred.log import EventLog, read_events


class SignalMidWrite(io.StringIO):
    """A log file whose n-th write is where the signal lands (as the handler would run it)."""

    def __init__(self, at: int):
        super().__init__()
        self.at = at
        self.n = 0

    def write(self, text: str) -> int:
        self.n += 1
        if self.n == self.at:
            signals.STATE.handler(signal.SIGINT, None)  # deferred: emit is a guarded section
        return super().write(text)


def test_a_signal_during_a_record_is_raised_after_it_and_the_log_stays_whole():
    signals.STATE.reset()
    fp = SignalMidWrite(at=3)
    log = EventLog(fp)
    log.emit("header", profile="mainline", word_bits=64, max_entries=511, version=2)
    log.emit("init", tracer="t0", bit=2, ret=0)
    with pytest.raises(KeyboardInterrupt):
        log.emit("init", tracer="t1", bit=3, ret=0)
    assert fp.getvalue().count("\n") == 3  # the record the signal came in is written whole
    log.end("interrupted", requests=0, errors=["interrupted (SIGINT)"])  # the clean-up's last line
    events = list(read_events(fp.getvalue().splitlines()))
    assert [e["seq"] for e in events] == [1, 2, 3, 4] and events[-1]["ev"] == "end"
    signals.STATE.reset()
