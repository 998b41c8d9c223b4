"""Event logs as the writer writes them, for tests that build a log record by record.

A test that edits a log's records to make one violation (a callback run twice, a stack record
with the wrong frames) wants the checker to find that violation, not the edit itself: :func:`relog`
writes the records again through :class:`harness.deferred.log.EventLog`, so each line has its
seq (its line number) and a version 2 log's end record the digest of what is now before it.
The reader's own checks of seq, header and digest are tested on logs that are not rewritten.
"""

from __future__ import annotations

import io

from harness.deferred.log import EventLog

# what the reader adds (line) or the writer computes (seq, digest): not given to EventLog.emit
_COMPUTED = ("seq", "ev", "line", "digest")


def relog(events: list[dict]) -> list[str]:
    """``events`` (dicts as parsed, edited or not) written again by :class:`EventLog`: its lines."""
    fp = io.StringIO()
    log = EventLog(fp, keep=False)
    for e in events:
        log.emit(e["ev"], **{k: v for k, v in e.items() if k not in _COMPUTED})
    return fp.getvalue().splitlines()
