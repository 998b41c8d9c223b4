"""The guest kernel's own deferred-unwinding rate, from a perfcc capture: the anchor ``harness
bench deferred`` prints beside the harness's traces/s.

With ``defer_callchain`` a sample in user context carries a cookie (PERF_CONTEXT_USER_DEFERRED)
and the kernel's task work writes the user stack later, once per kernel entry, as a
``PERF_RECORD_CALLCHAIN_DEFERRED``: those records are the kernel's deferred traces, counted over
the span of the capture's record times.  Pure: it reads a parsed :class:`~harness.perfparse.records.Capture`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..perfparse.records import CallchainDeferred, Capture, Sample

__all__ = ["DeferredRate", "deferred_rate"]


@dataclass(frozen=True)
class DeferredRate:
    samples: int  # samples in the capture
    cookies: int  # samples whose user callchain was deferred (they carry a cookie)
    deferred: int  # PERF_RECORD_CALLCHAIN_DEFERRED records: user stacks the kernel delivered
    seconds: float  # from the first record's time to the last's

    @property
    def per_second(self) -> float:
        """Deferred user callchains delivered per second."""
        return self.deferred / self.seconds if self.seconds > 0 else 0.0

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


def deferred_rate(cap: Capture) -> DeferredRate:
    samples = cookies = deferred = 0
    times = []
    for rec in cap.records():
        if isinstance(rec, Sample):
            samples += 1
            cookies += rec.deferred
            t = rec.time
        elif isinstance(rec, CallchainDeferred):
            deferred += 1
            t = rec.time
        else:
            continue
        if t is not None:
            times.append(t)
    span = (max(times) - min(times)) / 1e9 if len(times) >= 2 else 0.0
    return DeferredRate(samples, cookies, deferred, span)
