"""Debian's own ``perf script`` against our stitcher and our unwinder, entry by entry (domain, pure).

Inputs, all from one guest run (:mod:`.debian_run` makes them):

* ``perf.data`` of ``perf record -e cpu-clock --call-graph fp,defer --user-regs=ip,sp,bp``
  (:mod:`harness.perfparse.perfdata`): samples whose callchain ends in ``PERF_CONTEXT_USER_DEFERRED`` + cookie,
  and the ``PERF_RECORD_CALLCHAIN_DEFERRED`` records that carry the user stacks;
* ``perf script`` text of that file, merged (the default) and with ``--no-merge-callchains``
  (:mod:`harness.perfparse.script`);
* optionally the ``perfcc -d`` capture of the same program, sampled at the same time
  (:mod:`harness.perfparse.records`): perfcc was perf record's workload and ran the program, so both sample the
  same tasks.

(a) Our stitcher (:mod:`harness.deferred.stitch`) joins perf.data's samples with its deferred
records; each merged ``perf script`` sample must print exactly the stitched callchain (the kernel
part, then the deferred record's ips; ``PERF_CONTEXT_*`` markers are not printed), and each
unmerged entry exactly its record (a sample: its kernel part and a ``(cookie)`` line with its
cookie; a ``DEFERRED CALLCHAIN`` entry: the record's cookie and ips).  Entries are matched with
records by (tid, time in microseconds), in order.

(b) Our unwinder: perf record can add the user registers to fp,defer samples (``--user-regs``) but
not the stack bytes (only ``--call-graph dwarf`` dumps them, and ``dwarf,defer`` is refused), so
our unwinder cannot run on perf's own samples.  perfcc dumps registers and stack bytes with
``defer_callchain`` too, and the kernel walks a task's stack once per kernel entry and gives the
same cookie to every tracer that asked in that entry (unwind_deferred: one cache per task, one
cookie per entry).  Where perf and perfcc sampled the same entry (same tid and cookie), our
unwinder runs on perfcc's sample (registers and stack bytes) and is judged against *perf's*
deferred record with the same oracle and causes as ``harness perf`` (:mod:`harness.verdicts`);
perf's sampled user registers must equal perfcc's for that entry, and perfcc's deferred record
for the entry must carry the same ips as perf's.

Every difference is counted under a name; one without a name is "unexplained" and makes the
report fail.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field, replace

from ..deferred.stitch import PERF_CONTEXT_USER_DEFERRED, DeferredCallchain, Stitcher
from ..deferred.stitch import Lost as StitchLost
from ..deferred.stitch import Sample as StitchSample
from ..oracles.base import OracleFrames
from ..perfparse.perfdata import PerfData
from ..perfparse.records import CallchainDeferred, Capture, Lost, Sample
from ..perfparse.script import ScriptEntry
from ..unwind.maps import Resolver
from ..unwind.user import Trace
from ..verdicts.align import judge
from ..verdicts.causes import FP_STEPS, PERF_SCRIPT_AFTER_RECORD, STACK_WRITTEN, allowed_causes, explain, undeclared
from ..verdicts.types import AGREE, FAILURE, REGS, Divergence, PairVerdict
from .oracle import UNWINDER, PerfOracle

__all__ = ["STACK_WRITTEN", "DebianReport", "compare", "total", "written_during_entry"]



@dataclass
class DebianReport:
    release: str = ""
    perf_version: str = ""
    samples: int = 0  # PERF_RECORD_SAMPLE in perf.data
    deferred_samples: int = 0  # of which with PERF_CONTEXT_USER_DEFERRED + cookie
    deferred_records: int = 0  # PERF_RECORD_CALLCHAIN_DEFERRED in perf.data
    lost: int = 0
    joined: int = 0  # samples our stitcher joined with a record
    unjoined: collections.Counter = field(default_factory=collections.Counter)
    merged_compared: int = 0
    merged_equal: int = 0
    unmerged_compared: int = 0  # samples and DEFERRED CALLCHAIN entries
    unmerged_equal: int = 0
    ours_compared: int = 0  # perf.data's deferred records judged against our unwinder (on perfcc's sample)
    ours_equal: int = 0
    regs_compared: int = 0  # perf's sampled user regs against perfcc's, same entry
    regs_equal: int = 0
    records_shared: int = 0  # (tid, cookie) with a deferred record in both perf.data and perfcc's capture
    records_shared_equal: int = 0
    named: collections.Counter = field(default_factory=collections.Counter)  # name -> count
    examples: dict[str, str] = field(default_factory=dict)
    unexplained: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The run's facts and the differences they allow (None: unknown, nothing is declared).
    facts: frozenset[str] | None = None
    declared: frozenset[str] | None = None

    @property
    def ok(self) -> bool:
        return not self.unexplained

    @property
    def undeclared(self) -> dict[str, int]:
        """Named differences outside the run's declaration (a finding: tests fail on it)."""
        return {} if self.declared is None else undeclared(self.named, self.declared)

    def rows(self) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = [
            ("samples", self.samples),
            ("  with a deferred user callchain (cookie)", self.deferred_samples),
            ("  with an immediate user callchain (no cookie: the task was exiting)",
             self.samples - self.deferred_samples),
            ("deferred records (CALLCHAIN_DEFERRED)", self.deferred_records),
            ("lost events", self.lost),
            ("stitched: samples joined with their record", self.joined),
        ]
        out += [(f"stitched: unjoined ({k})", n) for k, n in sorted(self.unjoined.items())]
        out += [
            ("merged callchains compared (perf script vs stitcher)", self.merged_compared),
            ("  equal", self.merged_equal),
            ("unmerged entries compared (--no-merge-callchains vs records)", self.unmerged_compared),
            ("  equal", self.unmerged_equal),
            ("perf's deferred records vs our unwinder (perfcc's sample, same entry)", self.ours_compared),
            ("  equal", self.ours_equal),
            ("perf's user regs vs perfcc's (same entry)", self.regs_compared),
            ("  equal", self.regs_equal),
            ("deferred records in both perf.data and perfcc's capture", self.records_shared),
            ("  equal", self.records_shared_equal),
        ]
        out += [(f"named difference: {k}", n) for k, n in sorted(self.named.items())]
        out += [(f"outside the declaration (suspicious): {k}", n) for k, n in self.undeclared.items()]
        out.append(("unexplained", len(self.unexplained)))
        return out

    def name(self, what: str, example: str) -> None:
        self.named[what] += 1
        self.examples.setdefault(what, example)


def _fmt(ips) -> str:
    return " ".join(f"{ip:#x}" for ip in ips)


def _match(entries: list[ScriptEntry], records: list, key, report: DebianReport, what: str) -> list[tuple]:
    """Pair entries with records by key (tid, time_us[, cookie]) in order; leftovers are unexplained."""
    waiting: dict[tuple, collections.deque] = collections.defaultdict(collections.deque)
    for i, r in records:
        waiting[key(r)].append((i, r))
    pairs = []
    for e in entries:
        k = (e.tid, e.time_us) + ((e.cookie,) if e.deferred else ())
        if not waiting.get(k):
            report.unexplained.append(f"{what}: perf script entry at line {e.line} ({e.comm} {e.pid}/{e.tid} "
                                      f"{e.time_us / 1e6:.6f}) matches no record of perf.data")
            continue
        pairs.append((e, *waiting[k].popleft()))
    for k, left in waiting.items():
        for i, _ in left:
            report.unexplained.append(f"{what}: perf.data record {i} (tid {k[0]}, {k[1] / 1e6:.6f}) printed by "
                                      f"no perf script entry")
    return pairs


def compare(data: PerfData, merged: list[ScriptEntry], unmerged: list[ScriptEntry],
            cc: Capture | None = None, resolve: Resolver | None = None,
            facts: frozenset[str] | None = None) -> DebianReport:
    """perf script (merged, unmerged) against perf.data and our stitcher, and perf's deferred
    records against our unwinder on perfcc's samples; ``facts``: the run's (None: unknown), whose
    declaration the named differences are held to."""
    r = DebianReport(facts=facts)
    if facts is not None:
        r.declared = allowed_causes(facts, ("perf",), UNWINDER)
    records = data.kernel_records()
    samples = [(i, s) for i, s in enumerate(records) if isinstance(s, Sample)]
    defs = [(i, d) for i, d in enumerate(records) if isinstance(d, CallchainDeferred)]
    r.samples = len(samples)
    r.deferred_samples = sum(s.deferred for _, s in samples)
    r.deferred_records = len(defs)
    r.lost = sum(x.lost for x in records if isinstance(x, Lost))

    # (a) the stitcher on perf.data's records, in perf's order
    st = Stitcher()
    for i, rec in enumerate(records):
        if isinstance(rec, Sample):
            st.sample(StitchSample(i, rec.tid, (PERF_CONTEXT_USER_DEFERRED, rec.cookie) if rec.deferred else ()))
        elif isinstance(rec, CallchainDeferred):
            st.deferred(DeferredCallchain(i, rec.tid, rec.cookie, rec.ips))
        elif isinstance(rec, Lost):
            st.lost(StitchLost(i, rec.lost))
    st.finish()
    joined = {j.sample.seq: j.user for j in st.joined}
    r.joined = len(joined)
    for u in st.unjoined:
        r.unjoined[u.reason] += 1

    def unmerged_form(e: ScriptEntry, s: Sample) -> bool:
        """perf printed the sample's kernel part and its cookie in place of the user part."""
        return e.ips in (s.kernel, s.kernel + (s.cookie,)) and e.sample_cookie in (None, s.cookie) and (
            e.ips == s.kernel + (s.cookie,) or e.sample_cookie == s.cookie)

    skey = lambda s: (s.tid, s.time // 1000)  # noqa: E731
    for e, i, s in _match([e for e in merged if not e.deferred], samples, skey, r, "merged"):
        r.merged_compared += 1
        if not s.deferred:
            want = s.kernel + (s.user or ())
        elif i in joined:
            want = s.kernel + tuple(joined[i].ips)
        else:
            want = None  # unjoined: perf cannot merge it either
        if want is not None and e.ips == want:
            r.merged_equal += 1
            continue
        if want is None and unmerged_form(e, s):
            r.merged_equal += 1
            continue
        title = (f"merged sample line {e.line} (tid {s.tid}, cookie {s.cookie or 0:#x}):\n"
                 f"  perf script: {_fmt(e.ips)}\n  stitcher:    {_fmt(want or s.kernel)}")
        if s.deferred and i in joined and joined[i].seq < i and unmerged_form(e, s):
            # The entry's CALLCHAIN_DEFERRED came before this sample (the request returned 1 after the
            # callback ran: mainline keeps the cookie until the return to user space).  Our stitcher
            # joins it with that record; perf script merges only samples waiting when the record
            # arrives, and prints this one with its cookie.
            r.name(PERF_SCRIPT_AFTER_RECORD,
                   f"{title}\n  the entry's record is perf.data record {joined[i].seq}, before this sample "
                   f"(record {i}), same tid and cookie: perf script printed the cookie, unmerged")
            continue
        r.unexplained.append(title)
    for e in merged:
        if e.deferred:
            r.unexplained.append(f"merged output line {e.line}: a DEFERRED CALLCHAIN entry without "
                                 f"--no-merge-callchains")

    # unmerged: samples (kernel part + cookie line) and DEFERRED CALLCHAIN entries
    for e, _, s in _match([e for e in unmerged if not e.deferred], samples, skey, r, "unmerged"):
        r.unmerged_compared += 1
        want = s.kernel if s.deferred else s.kernel + (s.user or ())
        if e.ips == want and e.sample_cookie == s.cookie:
            r.unmerged_equal += 1
        else:
            r.unexplained.append(f"unmerged sample line {e.line} (tid {s.tid}): perf script {_fmt(e.ips)} "
                                 f"cookie {e.sample_cookie}, perf.data {_fmt(want)} cookie {s.cookie}")
    dkey = lambda d: (d.tid, d.time // 1000, d.cookie)  # noqa: E731
    for e, _, d in _match([e for e in unmerged if e.deferred], defs, dkey, r, "unmerged deferred"):
        r.unmerged_compared += 1
        if e.ips == tuple(d.ips):
            r.unmerged_equal += 1
        else:
            r.unexplained.append(f"DEFERRED CALLCHAIN line {e.line} (tid {d.tid}, cookie {d.cookie:#x}): "
                                 f"perf script {_fmt(e.ips)}, record {_fmt(d.ips)}")

    if cc is not None:
        _against_ours(r, records, joined, cc, resolve)
    return r


def _against_ours(r: DebianReport, records: list, joined: dict, cc: Capture, resolve: Resolver | None) -> None:
    """(b): perf's deferred records against our unwinder on perfcc's samples of the same entries."""
    o = PerfOracle(cc, resolve)
    cc_records = cc.records()
    cc_first: dict[tuple[int, int], tuple[int, Sample]] = {}
    cc_record: dict[tuple[int, int], tuple[int, CallchainDeferred]] = {}
    for k, rec in enumerate(cc_records):
        if isinstance(rec, Sample) and rec.deferred and rec.regs is not None:
            cc_first.setdefault((rec.tid, rec.cookie), (k, rec))
        elif isinstance(rec, CallchainDeferred):
            cc_record.setdefault((rec.tid, rec.cookie), (k, rec))
    perf_records: dict[tuple[int, int], CallchainDeferred] = {}
    perf_index: dict[tuple[int, int], int] = {}
    for j, d in enumerate(records):
        if isinstance(d, CallchainDeferred):
            key = (d.tid, d.cookie)
            if key in perf_index:  # the kernel walks an entry once and answers each tracer once
                r.unexplained.append(f"perf.data record {j}: a second CALLCHAIN_DEFERRED for tid {d.tid} cookie "
                                     f"{d.cookie:#x} (first: record {perf_index[key]})")
                continue
            perf_records[key], perf_index[key] = d, j
    for key, d in perf_records.items():
        if key in cc_record:
            r.records_shared += 1
            if tuple(cc_record[key][1].ips) == tuple(d.ips):
                r.records_shared_equal += 1
            else:
                r.unexplained.append(f"entry tid {key[0]} cookie {key[1]:#x}: perf's deferred record "
                                     f"{_fmt(d.ips)} but perfcc's {_fmt(cc_record[key][1].ips)}: two walks")
    for i, rec in enumerate(records):
        if not (isinstance(rec, Sample) and rec.deferred and rec.regs is not None):
            continue
        key = (rec.tid, rec.cookie)
        if key not in cc_first:
            continue
        ccs = cc_first[key][1]
        r.regs_compared += 1
        got, want = (rec.regs.ip, rec.regs.sp, rec.regs.bp), (ccs.regs.ip, ccs.regs.sp, ccs.regs.bp)
        if got == want:
            r.regs_equal += 1
            continue
        title = (f"perf.data record {i}: tid {rec.tid} cookie {rec.cookie:#x} user regs ip/sp/bp {_fmt(got)}, "
                 f"perfcc's first sample of the entry (byte {ccs.offset:#x}) {_fmt(want)}")
        # One entry, two register sets: proven by the causes the perf oracle uses (execve replaces
        # pt_regs within the entry: this sample has the registers a successful execve installs).
        # The sample is perf's (no stack bytes; a negative offset keeps it apart from perfcc's).
        # The later of the two samples (both files share the kernel's perf clock) is judged
        # against the earlier; seq and record_seq are perf.data's own order when perf's is the
        # later one (the entry's record before it: the callback had run and the registers changed
        # since, e.g. a signal frame set up).
        if (ccs.time or 0) <= (rec.time or 0):
            stack = o.stack(replace(rec, offset=-1 - i), None, True, seq=i, record_seq=perf_index.get(key),
                            entry_first=ccs)
            div = explain(stack, Divergence(UNWINDER, "perf", REGS, 0, 0, got, want))
        else:
            stack = o.stack(ccs, None, True, entry_first=replace(rec, offset=-1 - i))
            div = explain(stack, Divergence(UNWINDER, "perf", REGS, 0, 0, want, got))
        if div.explained:
            r.name(div.cause, f"{title}\n  [{div.cause}] {div.evidence.get('text', div.evidence)}")
        else:
            r.unexplained.append(title)
    # Every deferred record of perf.data (what perf script prints) whose entry perfcc sampled: the
    # kernel answers every tracer of the task at the task's return with the one walk of the entry.
    for key, d in perf_records.items():
        if key not in cc_first:
            continue
        k, ccs = cc_first[key]
        theirs = tuple(d.ips)
        rec_k = cc_record.get(key, (None,))[0]
        stack = o.stack(ccs, theirs, True, seq=k, record_seq=rec_k)
        r.ours_compared += 1
        title = (f"tid {d.tid} cookie {d.cookie:#x}: perf's deferred record against our unwinder on "
                 f"perfcc's sample at byte {ccs.offset:#x}")
        if theirs and theirs[0] != ccs.regs.ip:
            # The kernel's walk started elsewhere than the sampled registers (execve, sigreturn,
            # signal delivery): a regs divergence, proven by the causes harness perf uses.
            div = explain(stack, Divergence(UNWINDER, "perf", REGS, 0, 0, (theirs[0],),
                                            (ccs.regs.ip, ccs.regs.sp, ccs.regs.bp)))
            if div.explained:
                v = PairVerdict(UNWINDER, "perf", "explained", [div])
                r.name(div.cause, o.show(title, stack, theirs, v))
            else:
                r.unexplained.append(f"{title}: the record starts at {theirs[0]:#x}, the sample's ip is "
                                     f"{ccs.regs.ip:#x}, and no cause proves why")
            continue
        of = o.perf.frames(stack)
        if not isinstance(of, OracleFrames):
            r.unexplained.append(f"{title}: {of}")
            continue
        v = judge(stack, o.perf, of)
        if v.verdict == AGREE:
            r.ours_equal += 1
        elif v.verdict == FAILURE:
            why = written_during_entry(ccs, tuple(stack.trace.ips), theirs, stack.trace)
            if why:
                r.name(STACK_WRITTEN, f"{o.show(title, stack, theirs, v, of.stop)}\n  [{STACK_WRITTEN}] {why}")
            else:
                r.unexplained.append(o.show(f"{title}: differ", stack, theirs, v, of.stop))
        else:
            for dv in v.divergences:
                r.name(dv.cause, o.show(title, stack, theirs, v, of.stop))


def written_during_entry(s: Sample, ours: tuple[int, ...], theirs: tuple[int, ...],
                         trace: Trace | None = None) -> str | None:
    """Why our walk over the sample's stack bytes and the kernel's deferred walk of the same entry
    differ, when the user stack changed in between: perfcc dumps the stack when it samples, the
    kernel walks it at the return to user space, and while the task is in the kernel (a syscall)
    the kernel itself may write into it (readlink, read, ... copying into a buffer on the stack).

    Proven when the sample was taken in kernel mode, both walks agree up to frame k, and either
    (with our ``trace``) our frame k was an FP step's return address read from the dump at a known
    address, which the kernel read as its entry k: the same word, another value; or the kernel's
    entry k occurs nowhere in the dumped bytes (it was not on the stack at the sample) while ours
    was read from them."""
    if s.user_mode:
        return None
    k = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs)))
    if k >= len(theirs) or k == 0:
        return None
    ws = 4 if s.regs_abi == 1 else 8
    val = theirs[k]
    if val >= 1 << (8 * ws):
        return None
    raw = val.to_bytes(ws, "little")
    text = raw.decode("ascii") if all(32 <= c < 127 for c in raw) else ""
    what = f"the kernel's entry #{k} {val:#x}{f' (the text {text!r})' if text else ''}"
    written = "the stack was written between the sample and the deferred walk at the return to user space"
    if trace is not None and k < len(ours) and k < len(trace.frames) and trace.frames[k].how in FP_STEPS:
        addr = trace.frames[k - 1].fp + ws  # where an FP step reads the return address
        off = addr - s.regs.sp
        if 0 <= off <= len(s.stack) - ws:
            dumped = int.from_bytes(s.stack[off:off + ws], "little")
            if dumped == ours[k] != val:
                return (f"the sample was taken in kernel mode; both walks agree for {k} frame(s); our entry "
                        f"#{k} {ours[k]:#x} is the word at {addr:#x} (fp + {ws}) in the stack dumped at the "
                        f"sample, {what} was read from that word at the walk: {written}")
    if any(s.stack[i:i + ws] == raw for i in range(0, len(s.stack) - ws + 1, ws)):
        return None
    if k < len(ours) and not any(s.stack[i:i + ws] == ours[k].to_bytes(ws, "little", signed=False)
                                 for i in range(0, len(s.stack) - ws + 1, ws)):
        return None
    return (f"the sample was taken in kernel mode; both walks agree for {k} frame(s); {what} is nowhere in "
            f"the {len(s.stack)} stack bytes dumped at the sample, ours "
            f"{f'{ours[k]:#x}' if k < len(ours) else '(none)'} is: {written}")


def total(reports: list[DebianReport]) -> DebianReport:
    """The sum of several runs' reports (counts added, lists joined)."""
    out = DebianReport()
    for r in reports:
        for name, value in vars(r).items():
            mine = getattr(out, name)
            if isinstance(value, int):
                setattr(out, name, mine + value)
            elif isinstance(value, collections.Counter):
                mine.update(value)
            elif isinstance(value, list):
                mine.extend(value)
            elif isinstance(value, dict):
                for k, v in value.items():
                    mine.setdefault(k, v)
        out.release = out.release or r.release
        out.perf_version = out.perf_version or r.perf_version
    # a difference is declared for the total where its run declared it: the union, unless a run's
    # facts are unknown (then nothing is)
    known = [r.declared for r in reports]
    out.declared = None if not known or None in known else frozenset().union(*known)
    return out
