"""Consumer side: join kernel samples with the deferred user stacks that arrive later, like perf.

A sample taken in NMI/IRQ context carries the kernel callchain and, instead of the user part, the
marker ``PERF_CONTEXT_USER_DEFERRED`` (-640 as u64) followed by the cookie
(``include/uapi/linux/perf_event.h``).  The user stack arrives later as a
``PERF_RECORD_CALLCHAIN_DEFERRED`` record (type 22): ``{header; u64 cookie; u64 nr; u64 ips[nr]}``,
emitted by the deferred callback when the task returns to user space.

:class:`Stitcher` keeps samples waiting by ``(pid, cookie)`` and joins them when the deferred record
comes.  Lost-events rule: a ``PERF_RECORD_LOST`` means records were dropped, possibly the deferred
record of a waiting sample, or the task's return to user space and re-entry; a deferred record
read after the loss may carry a cookie that means another stack to the samples from before it, so
every sample waiting at the loss is reported unjoined (reason ``"lost"``), and traces remembered
from before the loss are forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import EXIT_USAGE, HarnessError

U64 = (1 << 64) - 1
PERF_CONTEXT_USER_DEFERRED = -640 & U64  # 0xfffffffffffffd80
PERF_CONTEXT_KERNEL = -128 & U64
PERF_CONTEXT_USER = -512 & U64
PERF_CONTEXT_MAX = -4095 & U64  # markers are >= this
PERF_RECORD_CALLCHAIN_DEFERRED = 22


class StitchError(HarnessError, ValueError):
    """A callchain or record that does not follow the deferred-callchain format."""

    exit_code = EXIT_USAGE  # bad input


def deferred_marker(cookie: int) -> list[int]:
    """The two u64 words a sample's callchain ends with when its user part is deferred."""
    return [PERF_CONTEXT_USER_DEFERRED, cookie & U64]


def split_callchain(ips: list[int]) -> tuple[list[int], int | None]:
    """``(callchain without the deferred marker, cookie or None)``; ips are u64 values."""
    ips = [ip & U64 for ip in ips]
    for i, ip in enumerate(ips):
        if ip == PERF_CONTEXT_USER_DEFERRED:
            if i + 2 != len(ips):
                raise StitchError(
                    f"PERF_CONTEXT_USER_DEFERRED at index {i} must be followed by exactly one cookie "
                    f"(callchain has {len(ips)} entries)"
                )
            return ips[:i], ips[i + 1]
    return ips, None


@dataclass(frozen=True)
class Sample:
    seq: int
    pid: int
    callchain: tuple[int, ...]  # kernel part (may contain PERF_CONTEXT_* markers) + deferred marker

    @property
    def cookie(self) -> int | None:
        return split_callchain(list(self.callchain))[1]


@dataclass(frozen=True)
class DeferredCallchain:
    """``PERF_RECORD_CALLCHAIN_DEFERRED``: ``{u64 cookie; u64 nr; u64 ips[nr]}`` (+ sample_id pid)."""

    seq: int
    pid: int
    cookie: int
    ips: tuple[int, ...]

    @property
    def nr(self) -> int:
        return len(self.ips)


@dataclass(frozen=True)
class Lost:
    seq: int
    lost: int = 1


@dataclass(frozen=True)
class Joined:
    sample: Sample
    user: DeferredCallchain

    @property
    def callchain(self) -> list[int]:
        """The full callchain perf reports: kernel part, PERF_CONTEXT_USER, the user ips."""
        kernel, _ = split_callchain(list(self.sample.callchain))
        return kernel + [PERF_CONTEXT_USER] + list(self.user.ips)


@dataclass(frozen=True)
class Unjoined:
    sample: Sample
    reason: str  # "lost", "no-deferred-record" (end of stream)


@dataclass
class Stitcher:
    joined: list[Joined] = field(default_factory=list)
    unjoined: list[Unjoined] = field(default_factory=list)
    complete: list[Sample] = field(default_factory=list)  # samples with no deferred part
    _waiting: dict[tuple[int, int], list[Sample]] = field(default_factory=dict)
    _seen: dict[tuple[int, int], DeferredCallchain] = field(default_factory=dict)
    _last_seq: int = -1

    def _order(self, seq: int) -> None:
        if seq <= self._last_seq:
            raise StitchError(f"record seq {seq} is not after {self._last_seq}")
        self._last_seq = seq

    def sample(self, s: Sample) -> None:
        self._order(s.seq)
        _, cookie = split_callchain(list(s.callchain))
        if cookie is None:
            self.complete.append(s)
            return
        key = (s.pid, cookie)
        if key in self._seen:  # the callback already ran this entry (mainline returns 1): same stack
            self.joined.append(Joined(s, self._seen[key]))
        else:
            self._waiting.setdefault(key, []).append(s)

    def deferred(self, d: DeferredCallchain) -> None:
        self._order(d.seq)
        key = (d.pid, d.cookie & U64)
        for s in self._waiting.pop(key, []):
            self.joined.append(Joined(s, d))
        self._seen[key] = d

    def lost(self, record: Lost) -> None:
        self._order(record.seq)
        for samples in self._waiting.values():
            self.unjoined.extend(Unjoined(s, "lost") for s in samples)
        self._waiting.clear()
        self._seen.clear()

    def feed(self, record) -> None:
        if isinstance(record, Sample):
            self.sample(record)
        elif isinstance(record, DeferredCallchain):
            self.deferred(record)
        elif isinstance(record, Lost):
            self.lost(record)
        else:
            raise StitchError(f"unknown record {record!r}")

    def finish(self) -> None:
        """End of stream: samples still waiting never got their user stack."""
        for samples in self._waiting.values():
            self.unjoined.extend(Unjoined(s, "no-deferred-record") for s in samples)
        self._waiting.clear()


def stitch(records) -> Stitcher:
    st = Stitcher()
    for r in records:
        st.feed(r)
    st.finish()
    return st
