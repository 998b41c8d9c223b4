"""The guest kernel's own callchains against our unwinder, sample by sample.

Every perf sample carries the user registers (``PERF_SAMPLE_REGS_USER``) and the bytes of the user
stack from sp up (``PERF_SAMPLE_STACK_USER``) of the moment the kernel walked the user stack.  Our
model, :func:`harness.unwind.user.unwind_user`, runs on exactly those registers over a memory that
serves exactly those bytes at ``[sp, sp + dyn_size)`` and faults anywhere else; its return
addresses must equal the kernel's where the kernel's walk stays inside the dumped stack.

Two kernel walks are compared, depending on the event:

* without ``defer_callchain``: the user part of the sample's callchain (after
  ``PERF_CONTEXT_USER``) comes from the architecture's own frame-pointer walk,
  ``perf_callchain_user()`` in arch/x86/events/core.c: ``regs->ip`` first, then ``{next_frame,
  return_address}`` pairs read at ``fp`` while ``fp`` passes ``__access_ok()`` and the reads do
  not fault, up to ``perf_event_max_stack`` (127) entries.  It has none of unwind_user's checks
  (``fp < sp``, CFA growth, alignment), so where unwind_user stops at one of them the kernel's walk
  goes on through whatever the frame pointer points at: an expected difference, named as such;
* with ``defer_callchain`` (6.19+): the sample carries ``PERF_CONTEXT_USER_DEFERRED`` + cookie,
  and the user stack arrives as ``PERF_RECORD_CALLCHAIN_DEFERRED``, walked by the kernel's
  ``unwind_user()`` at the return to user space: the very function our model models, so its ips
  must equal our walk exactly (up to where our walk runs off the dumped bytes).

The deferred records are also checked the way the project checks its own model
(:mod:`harness.deferred.check`): the stream is translated into the model's event log (a sample with
a cookie is a ``request`` of tracer "perf", ret 0 for the first of its kernel entry and 1 after;
a deferred record is the entry's ``walk`` and ``callback``; a new cookie starts a new entry;
``PERF_RECORD_EXIT`` is ``exit``), then the samples are joined with their records by
:mod:`harness.deferred.stitch` (with its lost-events rule).

The DWARF CFI oracle (:func:`harness.unwind.cfi.unwind_cfi`) runs on the same registers and bytes
for 64-bit samples where the ELF files are at hand; its agreement is counted, not judged (for a
program without frame pointers, CFI is the truth that both FP walks miss).
"""

from __future__ import annotations

import collections
import struct
from dataclasses import dataclass, field

from ..deferred.check import check_events
from ..deferred.log import trace_hash
from ..deferred.stitch import (
    PERF_CONTEXT_USER_DEFERRED,
    DeferredCallchain,
    Joined,
    Stitcher,
)
from ..deferred.stitch import Lost as StitchLost
from ..deferred.stitch import Sample as StitchSample
from ..memory import BufferMemory, Memory, Overlay
from ..regs import UserRegs
from ..unwind.cfi import cfi_tables_for, unwind_cfi
from ..unwind.maps import AddressSpace, Resolver
from ..unwind.symbolize import Symbolizer
from ..unwind.user import (
    UNWIND_MAX_ENTRIES,
    StopReason,
    Trace,
    UnwindConfig,
    unwind_user,
)
from .records import (
    PERF_SAMPLE_REGS_ABI_NONE,
    CallchainDeferred,
    Capture,
    Lost,
    Record,
    Sample,
    TaskEvent,
)

PERF_MAX_STACK_DEPTH = 127  # kernel.perf_event_max_stack's default (include/uapi/linux/perf_event.h)

# Expected differences, by kind.  Each is a fact about the two walks, checked on the sample.
RAN_OFF_DUMP = "ours ran off the dumped stack (fault outside [sp, sp+dyn_size)); the kernel read on in live memory"
KERNEL_MAX_STACK = "the kernel's callchain is cut at perf_event_max_stack ({n} entries); ours goes on"
NO_CHECK = "unwind_user stops at '{why}'; perf's FP walk (perf_callchain_user) lacks the check, reads on"
EXEC_REGS = "sample in execve: the deferred walk ran on the new image's registers (no exec hook in unwind_deferred)"
AFTER_CALLBACK_REGS = ("sample after its entry's callback (request returned 1) with the user registers "
                       "changed since (signal frame set up): not the walked stack")
SIGRETURN_RESTORED = ("sample in rt_sigreturn: the deferred walk ran on the registers it restored "
                      "(those in the signal frame at the sampled sp)")
SIGNAL_DELIVERY = ("signal delivered after get_signal() ran the task work: the deferred walk ran on the "
                   "handler's registers (its frame holds the sampled ones)")
EXEC_SAME_ENTRY = ("samples of one execve entry on the old and the new image's registers (execve replaces "
                   "pt_regs within the entry)")
EXIT_UNANSWERED = ("sample in the task's last entry (exit): do_exit() runs perf_event_exit_task() before "
                   "unwind_deferred_task_exit(), so no CALLCHAIN_DEFERRED reaches perf")
NOT_COMPARED_NO_USER = "no user callchain (task without mm, or a kernel thread)"
NOT_COMPARED_NO_REGS = "no user registers (PERF_SAMPLE_REGS_ABI_NONE)"
NOT_COMPARED_DEFERRED = "user callchain deferred (compared with its CALLCHAIN_DEFERRED record)"
# unwind_user stop reasons that perf_callchain_user() does not have: it goes on where they stop us.
PERF_WALK_LACKS = {StopReason.FP_BELOW_SP: "fp < sp", StopReason.NON_MONOTONIC: "cfa <= sp",
                   StopReason.MISALIGNED_CFA: "cfa misaligned"}


@dataclass
class DeferredReport:
    samples: int = 0  # samples whose user callchain was deferred (cookie)
    refused: int = 0  # samples without a cookie in a defer_callchain run (the request was refused)
    records: int = 0  # PERF_RECORD_CALLCHAIN_DEFERRED
    cookies: int = 0  # distinct (tid, cookie) of the samples
    shared: int = 0  # samples sharing their entry's cookie with an earlier sample
    after_callback: int = 0  # samples whose record came before them (same entry, request returned 1)
    joined: int = 0
    unjoined: collections.Counter = field(default_factory=collections.Counter)  # by reason
    compared: int = 0
    equal: int = 0
    expected: collections.Counter = field(default_factory=collections.Counter)
    examples: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


@dataclass
class PerfReport:
    release: str = ""
    samples: int = 0
    user_mode: int = 0
    kernel_mode: int = 0
    compared: int = 0  # user callchains of the kernel compared with our walk
    compared_kernel_mode: int = 0  # of which from samples taken in kernel mode (entry pt_regs)
    equal: int = 0
    expected: collections.Counter = field(default_factory=collections.Counter)
    not_compared: collections.Counter = field(default_factory=collections.Counter)
    failures: list[str] = field(default_factory=list)
    examples: dict[str, str] = field(default_factory=dict)
    cfi: collections.Counter = field(default_factory=collections.Counter)
    lost: int = 0  # events lost (sum of PERF_RECORD_LOST.lost)
    lost_records: int = 0
    tasks: set = field(default_factory=set)
    deferred: DeferredReport | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        d = self.deferred
        return not self.failures and (d is None or not (d.failures or d.violations))

    def rows(self) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = [
            ("samples", self.samples),
            ("  in user mode", self.user_mode),
            ("  in kernel mode", self.kernel_mode),
            ("tasks sampled", len(self.tasks)),
            ("user callchains compared", self.compared),
            ("  of which from kernel-mode samples", self.compared_kernel_mode),
            ("equal", self.equal),
        ]
        out += [(f"expected: {k}", n) for k, n in sorted(self.expected.items())]
        out += [(f"not compared: {k}", n) for k, n in sorted(self.not_compared.items())]
        out.append(("failures", len(self.failures)))
        out += [(f"cfi: {k}", n) for k, n in sorted(self.cfi.items())]
        out.append(("lost events", self.lost))
        d = self.deferred
        if d is not None:
            out += [
                ("deferred: samples with a cookie", d.samples),
                ("deferred: samples without (request refused)", d.refused),
                ("deferred: cookies (task, cookie)", d.cookies),
                ("deferred: samples sharing an entry's cookie", d.shared),
                ("deferred: samples after their entry's callback", d.after_callback),
                ("deferred: CALLCHAIN_DEFERRED records", d.records),
                ("deferred: samples joined", d.joined),
            ]
            out += [(f"deferred: unjoined ({k})", n) for k, n in sorted(d.unjoined.items())]
            out += [("deferred: stacks compared", d.compared), ("deferred: equal", d.equal)]
            out += [(f"deferred: expected: {k}", n) for k, n in sorted(d.expected.items())]
            out += [("deferred: failures", len(d.failures)), ("deferred: invariant violations", len(d.violations))]
        return out

    def table(self) -> str:
        rows = self.rows()
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def stack_memory(sample: Sample) -> Memory:
    """The sampled user stack: ``dyn_size`` bytes at the user sp; every other read faults."""
    if sample.regs is None or not sample.stack:
        return BufferMemory()
    sp = sample.regs.sp & (0xFFFFFFFF if sample.regs.compat else (1 << 64) - 1)
    return BufferMemory({sp: sample.stack})


# arch/x86/include/uapi/asm/ucontext.h + sigcontext.h: at rt_sigreturn's entry sp points at the
# struct ucontext of the rt_sigframe ({uc_flags, uc_link, stack_t uc_stack (24 bytes)}, then
# struct sigcontext_64 {r8..r15, di, si, bp, bx, dx, ax, cx, sp, ip, flags, cs, gs, fs, ss, ...}).
UC_MCONTEXT = 40
SIGCONTEXT_64 = ("r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "di", "si", "bp", "bx", "dx", "ax",
                 "cx", "sp", "ip", "flags")


def sigreturn_regs(sample: Sample) -> UserRegs | None:
    """The registers rt_sigreturn would restore if the sampled task is in it: the signal frame's
    sigcontext at the sampled sp, read from the dump (None where the dump does not hold it)."""
    if sample.regs is None or sample.regs.compat:
        return None
    need = UC_MCONTEXT + 8 * len(SIGCONTEXT_64)
    if len(sample.stack) < need:
        return None
    values = struct.unpack_from(f"<{len(SIGCONTEXT_64)}Q", sample.stack, UC_MCONTEXT)
    return UserRegs(**dict(zip(SIGCONTEXT_64, values)), cs=sample.regs.cs, ss=sample.regs.ss)


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading entries two chains share."""
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def relation(chain: list[int], cfi: list[int]) -> str:
    """How an FP chain relates to the CFI oracle's chain, in a few words for a counter."""
    n = common_prefix(chain, cfi)
    if n == len(chain) == len(cfi):
        return "= cfi"
    if n == len(chain):
        return "is a prefix of cfi (cfi goes on)"
    if n == len(cfi):
        return "goes on where cfi stops"
    return "differs from cfi at the IP's caller" if n == 1 else "differs from cfi deeper down"


class PerfOracle:
    """Checks one capture; ``resolve`` maps the guest's paths to host files (symbols, CFI)."""

    def __init__(self, capture: Capture, resolve: Resolver | None = None, max_entries: int = UNWIND_MAX_ENTRIES):
        self.cap = capture
        self.max_entries = max_entries
        self.max_stack = capture.attr.sample_max_stack or capture.info_int("max_stack", PERF_MAX_STACK_DEPTH)
        vdso = BufferMemory({capture.vdso[0]: capture.vdso[1]}) if capture.vdso else BufferMemory()
        self.vdso_memory = vdso
        self.space = AddressSpace.from_maps(capture.maps, resolve or (lambda p: None), vdso) if capture.maps else None
        self.symbolizer = Symbolizer(self.space) if self.space else None
        self.cfi_tables = cfi_tables_for(self.space) if self.space and resolve else None
        self.report = PerfReport(release=capture.info.get("release", ""))
        self._walks: dict[int, Trace] = {}

    # -- helpers -----------------------------------------------------------------------------
    def walk(self, sample: Sample) -> Trace:
        """Our unwind_user() on the sample's user registers and stack bytes (memoized)."""
        if sample.offset not in self._walks:
            self._walks[sample.offset] = unwind_user(stack_memory(sample), sample.regs,
                                                     UnwindConfig(max_entries=self.max_entries))
        return self._walks[sample.offset]

    def name(self, addr: int, return_address: bool) -> str:
        if self.symbolizer is None:
            return f"{addr:#x}"
        return f"{self.symbolizer.name(addr, return_address)} ({addr:#x})"

    def side_by_side(self, title: str, ours: list[int], theirs: list[int], theirs_name: str) -> str:
        lines = [title, f"       {'ours (unwind_user model)':56} {theirs_name}"]
        for i in range(max(len(ours), len(theirs))):
            a = self.name(ours[i], i > 0) if i < len(ours) else ""
            b = self.name(theirs[i], i > 0) if i < len(theirs) else ""
            same = i < len(ours) and i < len(theirs) and ours[i] == theirs[i]
            lines.append(f"  {'  ' if same else '!!'} #{i:<3} {a:56} {b}")
        return "\n".join(lines)

    @staticmethod
    def _where(s: Sample) -> str:
        mode = "user" if s.user_mode else "kernel"
        regs = s.regs
        r = f" ip={regs.ip:#x} sp={regs.sp:#x} bp={regs.bp:#x}" if regs else ""
        return f"sample at byte {s.offset:#x} (tid {s.tid}, time {s.time}, {mode} mode{r}, {len(s.stack)} stack bytes)"

    def _in_dump(self, s: Sample, addr: int, size: int = 8) -> bool:
        sp = s.regs.sp
        return sp <= addr and addr + size <= sp + len(s.stack)

    def _word(self, s: Sample, addr: int) -> int | None:
        if not self._in_dump(s, addr):
            return None
        off = addr - s.regs.sp
        return struct.unpack_from("<Q", s.stack, off)[0]

    # -- the FP callchain of a sample ---------------------------------------------------------
    def compare_fp(self, s: Sample) -> None:
        r = self.report
        kernel = list(s.user)
        trace = self.walk(s)
        ours = trace.ips
        first = s.ip if s.user_mode else s.regs.ip
        if not kernel or kernel[0] != s.regs.ip or (s.user_mode and s.ip != s.regs.ip):
            r.failures.append(self.side_by_side(
                f"{self._where(s)}: the kernel's user callchain does not start at the sampled user IP "
                f"{first:#x}", ours, kernel, "perf callchain (kernel)"))
            return
        r.compared += 1
        r.compared_kernel_mode += not s.user_mode
        why = self._explain_fp(s, kernel, trace)
        if why == "":
            r.equal += 1
        elif why is None:
            r.failures.append(self.side_by_side(
                f"{self._where(s)}: the kernel's callchain and ours differ (stop: {trace.stop})",
                ours, kernel, "perf callchain (kernel)"))
        else:
            r.expected[why] += 1
            r.examples.setdefault(why, self.side_by_side(f"{self._where(s)}: {why}", ours, kernel,
                                                         "perf callchain (kernel)"))

    def _explain_fp(self, s: Sample, kernel: list[int], trace: Trace) -> str | None:
        """'' when equal, the expected kind, or None for a real difference."""
        ours = trace.ips
        n = common_prefix(ours, kernel)
        if n == len(ours) == len(kernel):
            return ""
        if n == len(kernel) < len(ours):
            return KERNEL_MAX_STACK.format(n=self.max_stack) if len(kernel) >= self.max_stack else None
        if n == len(ours) < len(kernel):
            stop = trace.stop
            if stop.reason is StopReason.FAULT and stop.addr is not None and not self._in_dump(s, stop.addr):
                return RAN_OFF_DUMP
            if stop.reason in PERF_WALK_LACKS and trace.frames:
                # The kernel's next entry is the return address at fp + 8 of the frame we stopped
                # in, where the dump has it.
                fp = trace.frames[-1].fp
                word = self._word(s, fp + 8)
                if word is not None and word != kernel[n]:
                    return None
                return NO_CHECK.format(why=PERF_WALK_LACKS[stop.reason])
            return None
        return None

    # -- CFI -------------------------------------------------------------------------------------
    def compare_cfi(self, s: Sample, kernel: list[int] | None) -> None:
        if self.cfi_tables is None or s.regs is None:
            return
        if self.space.elf_at(s.regs.ip) is None:
            self.report.cfi["not walked: no ELF file for the IP"] += 1
            return
        memory = Overlay(stack_memory(s), self.vdso_memory)
        cfi = unwind_cfi(memory, s.regs, self.cfi_tables, max_entries=self.max_entries).ips
        c = self.report.cfi
        c["walked"] += 1
        c[f"ours {relation(self.walk(s).ips, cfi)}"] += 1
        if kernel is not None:
            c[f"kernel's {relation(kernel, cfi)}"] += 1

    # -- the whole capture -------------------------------------------------------------------------
    def run(self) -> PerfReport:
        r = self.report
        records = self.cap.records()
        defer = self.cap.defer
        for rec in records:
            if isinstance(rec, Lost):
                r.lost += rec.lost
                r.lost_records += 1
            if not isinstance(rec, Sample):
                continue
            r.samples += 1
            r.user_mode += rec.user_mode
            r.kernel_mode += not rec.user_mode
            r.tasks.add(rec.tid)
            if rec.regs is None or rec.regs_abi == PERF_SAMPLE_REGS_ABI_NONE:
                r.not_compared[NOT_COMPARED_NO_REGS] += 1
                continue
            if rec.deferred:
                r.not_compared[NOT_COMPARED_DEFERRED] += 1
                self.compare_cfi(rec, None)
                continue
            if rec.user is None:
                r.not_compared[NOT_COMPARED_NO_USER] += 1
                continue
            self.compare_fp(rec)
            self.compare_cfi(rec, list(rec.user))
        if defer:
            r.deferred = DeferredChecker(self, records).run()
        if self.cap.info.get("defer") == "unsupported":
            r.notes.append(f"defer_callchain was asked for but {r.release} refused it (EINVAL): "
                           f"sampled without it")
        return r


class DeferredChecker:
    """The deferred records of a ``defer_callchain`` capture, checked against the samples."""

    def __init__(self, oracle: PerfOracle, records: list[Record]):
        self.o = oracle
        self.records = records
        self.d = DeferredReport()

    def run(self) -> DeferredReport:
        d = self.d
        by_index = {}
        stitcher = Stitcher()
        seen_records: dict[tuple[int, int], int] = {}
        for i, rec in enumerate(self.records):
            if isinstance(rec, Sample):
                if rec.deferred:
                    d.samples += 1
                    by_index[i] = rec
                    stitcher.sample(StitchSample(i, rec.tid, (PERF_CONTEXT_USER_DEFERRED, rec.cookie)))
                elif rec.regs is not None:
                    d.refused += 1
            elif isinstance(rec, CallchainDeferred):
                d.records += 1
                key = (rec.tid, rec.cookie)
                if key in seen_records:
                    d.violations.append(f"record {i}: a second CALLCHAIN_DEFERRED for task {rec.tid} cookie "
                                        f"{rec.cookie:#x} (first: record {seen_records[key]})")
                seen_records.setdefault(key, i)
                stitcher.deferred(DeferredCallchain(i, rec.tid, rec.cookie, rec.ips))
            elif isinstance(rec, Lost):
                stitcher.lost(StitchLost(i, rec.lost))
        stitcher.finish()
        d.cookies = len({(s.tid, s.cookie) for s in by_index.values()})
        d.joined = len(stitcher.joined)
        last_at_exit = self._last_entry_at_exit()
        for u in stitcher.unjoined:
            s = by_index[u.sample.seq]
            if u.reason != "lost" and last_at_exit.get(s.tid) == s.cookie:
                d.unjoined["at exit"] += 1
                d.expected[EXIT_UNANSWERED] += 1
                continue
            d.unjoined[u.reason] += 1
            if u.reason != "lost":
                d.violations.append(f"record {u.sample.seq}: sample of task {s.tid} with cookie {s.cookie:#x} "
                                    f"never answered by a CALLCHAIN_DEFERRED record ({u.reason})")
        self._entries(by_index)
        for j in stitcher.joined:
            self._compare(j, by_index[j.sample.seq])
        for segment in deferred_log(self.records, self.o.max_entries):
            verdict = check_events(segment)
            d.violations += [f"deferred log (line = record number): {m}" for m in verdict.messages()]
        return d

    def _last_entry_at_exit(self) -> dict[int, int]:
        """tid -> the cookie of the task's last sampled entry, for tasks whose PERF_RECORD_EXIT
        came after it with no deferred record for that entry in between."""
        current: dict[int, int | None] = {}
        out: dict[int, int] = {}
        for rec in self.records:
            if isinstance(rec, Sample) and rec.deferred:
                current[rec.tid] = rec.cookie
            elif isinstance(rec, CallchainDeferred) and current.get(rec.tid) == rec.cookie:
                current[rec.tid] = None
            elif isinstance(rec, TaskEvent) and rec.kind == "exit" and current.get(rec.tid) is not None:
                out[rec.tid] = current.pop(rec.tid)
            elif isinstance(rec, Lost):
                current.clear()
        return out

    def _entries(self, by_index: dict[int, Sample]) -> None:
        """Samples with one cookie are one kernel entry: the same user registers until the
        callback ran; the first one assigned the cookie on its own CPU (mainline: cpu + 1 in the
        low half)."""
        d = self.d
        first: dict[tuple[int, int], Sample] = {}
        answered: dict[tuple[int, int], int] = {}
        for i, rec in enumerate(self.records):
            if isinstance(rec, CallchainDeferred):
                answered.setdefault((rec.tid, rec.cookie), i)
            if i not in by_index:
                continue
            s = by_index[i]
            key = (s.tid, s.cookie)
            if key not in first:
                first[key] = s
                if s.cpu is not None and s.cookie & 0xFFFFFFFF != s.cpu + 1:
                    d.violations.append(f"record {i}: cookie {s.cookie:#x} of the entry's first sample does not "
                                        f"carry its CPU {s.cpu} + 1 in the low 32 bits")
                continue
            d.shared += 1
            f = first[key]
            same = (f.regs.ip, f.regs.sp, f.regs.bp) == (s.regs.ip, s.regs.sp, s.regs.bp)
            if key in answered and answered[key] < i:
                d.after_callback += 1
                if not same:
                    d.expected[AFTER_CALLBACK_REGS] += 1
            elif not same and s.regs.fresh_exec:
                d.expected[EXEC_SAME_ENTRY] += 1
            elif not same:
                d.violations.append(
                    f"record {i}: task {s.tid} cookie {s.cookie:#x} on user registers ip={s.regs.ip:#x} "
                    f"sp={s.regs.sp:#x} bp={s.regs.bp:#x}, but the entry's first sample (byte {f.offset:#x}) "
                    f"had ip={f.regs.ip:#x} sp={f.regs.sp:#x} bp={f.regs.bp:#x}: two entries share a cookie")

    def _compare(self, j: Joined, s: Sample) -> None:
        d, o = self.d, self.o
        theirs = list(j.user.ips)
        trace = o.walk(s)
        ours = trace.ips
        title = f"{o._where(s)}, cookie {s.cookie:#x}: deferred record (seq {j.user.seq})"
        name = "CALLCHAIN_DEFERRED (kernel unwind_user)"
        if theirs and theirs[0] != s.regs.ip:
            why = None
            if self._at_elf_entry(theirs[0]) or self._at_function_start(theirs[0], "_start"):
                why = EXEC_REGS  # the new image's stack is not in the dump: nothing more to check
            elif j.user.seq < j.sample.seq:
                return  # after the callback, on other registers: counted as AFTER_CALLBACK_REGS
            else:
                restored = sigreturn_regs(s)
                if restored is not None and restored.ip == theirs[0]:
                    walk = unwind_user(stack_memory(s), restored, UnwindConfig(max_entries=o.max_entries))
                    if self._agrees(s, walk, theirs) is not None:
                        why = SIGRETURN_RESTORED
                if why is None and self._at_function_start(theirs[0]) and len(ours) > 1:
                    # The handler's walk starts with the sampled bp, as ours does: the same callers.
                    tail = Trace(trace.frames[1:], trace.stop)
                    if self._agrees(s, tail, theirs[1:]) is not None:
                        why = SIGNAL_DELIVERY
            if why is not None:
                d.expected[why] += 1
                d.examples.setdefault(why, o.side_by_side(f"{title}: {why}", ours, theirs, name))
                return
        d.compared += 1
        how = self._agrees(s, trace, theirs)
        if how == "":
            d.equal += 1
        elif how is not None:
            d.expected[how] += 1
            d.examples.setdefault(how, o.side_by_side(f"{title}: {how}", ours, theirs, name))
        else:
            d.failures.append(o.side_by_side(f"{title} and ours differ (our stop: {trace.stop})", ours, theirs,
                                             name))

    def _agrees(self, s: Sample, trace: Trace, theirs: list[int]) -> str | None:
        """'' when our walk equals the kernel's, RAN_OFF_DUMP when it is a prefix of it and stopped
        reading outside the dump, else None."""
        ours = trace.ips
        n = common_prefix(ours, theirs)
        if n == len(ours) == len(theirs):
            return ""
        stop = trace.stop
        if (n == len(ours) < len(theirs) and stop.reason is StopReason.FAULT and stop.addr is not None
                and not self.o._in_dump(s, stop.addr)):
            return RAN_OFF_DUMP
        return None

    def _at_elf_entry(self, ip: int) -> bool:
        """``ip`` is the entry point (e_entry) of the ELF mapped there: the program's, or for a
        dynamic one the interpreter's, where a successful execve starts."""
        space = self.o.space
        e = space.elf_at(ip) if space is not None else None
        if e is None:
            return False
        return ip == e.image.elf.header["e_entry"] + e.bias  # elf_at() has parsed it already

    def _at_function_start(self, ip: int, name: str | None = None) -> bool:
        """``ip`` is the first byte of a function (of ``name``, if given), by the ELF's symbols."""
        sym = self.o.symbolizer
        if sym is None:
            return False
        loc = sym.locate(ip)
        return loc.symbol is not None and loc.offset == 0 and (name is None or loc.symbol == name)


def deferred_log(records: list[Record], max_entries: int = UNWIND_MAX_ENTRIES) -> list[list[dict]]:
    """The deferred records as :mod:`harness.deferred.log` events, one list per stretch between
    ``PERF_RECORD_LOST`` records (a loss may have eaten any record: each stretch is checked on its
    own).  ``line`` is the record's index in the stream.

    Per task: a sample with a new cookie is a new kernel entry (``enter``, and ``reset`` of the
    previous one) and a ``request`` returning 0; a sample with the entry's cookie a ``request``
    returning 1 (mainline also returns 1 after the callback ran in the entry); a deferred record
    the entry's ``walk`` and the tracer's ``callback``; ``PERF_RECORD_EXIT`` ``exit`` and
    ``exit_done``."""
    header = {"ev": "header", "profile": "mainline", "word_bits": 64, "max_entries": max_entries,
              "version": 1, "line": 0}
    segments: list[list[dict]] = [[dict(header)]]
    state: dict[int, dict] = {}  # tid -> {"entry", "cookie", "walked"}

    def emit(line: int, **ev) -> None:
        ev["line"] = line
        segments[-1].append(ev)

    for i, rec in enumerate(records):
        if isinstance(rec, Lost):
            segments.append([dict(header)])
            state.clear()
        elif isinstance(rec, Sample) and rec.deferred:
            t = state.get(rec.tid)
            if t is None or t["cookie"] != rec.cookie:
                if t is not None:
                    emit(i, ev="reset", task=rec.tid, entry=t["entry"], epoch=t["entry"], cleared=True)
                t = state[rec.tid] = {"entry": (t["entry"] if t else 0) + 1, "cookie": rec.cookie, "walked": False}
                emit(i, ev="enter", task=rec.tid, entry=t["entry"], how="user" if rec.user_mode else "kernel")
                ret = 0
            else:
                ret = 1
            emit(i, ev="request", tracer="perf", task=rec.tid, entry=t["entry"], epoch=t["entry"], cpu=rec.cpu,
                 context="irq", user_mode=rec.user_mode, ret=ret, cookie=rec.cookie)
        elif isinstance(rec, CallchainDeferred):
            if rec.tid not in state and len(segments) > 1:
                continue  # its samples came before a loss: nothing here to check it against
            t = state.setdefault(rec.tid, {"entry": 1, "cookie": None, "walked": False})
            h = trace_hash(rec.ips)
            if not t["walked"]:
                emit(i, ev="walk", task=rec.tid, entry=t["entry"], epoch=t["entry"], nr=len(rec.ips),
                     truncated=len(rec.ips) >= max_entries, trace_hash=h)
                t["walked"] = True
            emit(i, ev="callback", tracer="perf", task=rec.tid, entry=t["entry"], epoch=t["entry"],
                 cookie=rec.cookie, nr=len(rec.ips), trace_hash=h)
            emit(i, ev="callback_done", tracer="perf", task=rec.tid)
        elif isinstance(rec, TaskEvent) and rec.kind == "exit":
            t = state.pop(rec.tid, None)
            if t is not None and t["cookie"] is not None and not t["walked"]:
                # The task's last entry got no record: do_exit() detached perf's events before it ran
                # the deferred work (EXIT_UNANSWERED, checked by DeferredChecker); the epoch is left
                # open rather than reported as a callback that never ran.
                continue
            emit(i, ev="exit", task=rec.tid, entry=t["entry"] if t else 0)
            emit(i, ev="exit_done", task=rec.tid)
    return segments


def check_capture(capture: Capture, resolve: Resolver | None = None) -> PerfReport:
    return PerfOracle(capture, resolve).run()

