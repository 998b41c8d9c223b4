"""The live half of ``harness fuzz``: a batch of built programs sampled in one guest, every stack
checked by every oracle, each program's result turned into a :class:`LiveOutcome`.

:func:`check_live` boots one guest for the whole batch (a boot costs tens of seconds on TCG) with
every program copied in as a user's binary (``/user/NAME``, with its interpreter and libraries),
and runs each in turn as ``harness run --program`` does (:func:`harness.scenarios.catalog.user_scenario`,
the engine's :class:`~harness.scenarios.engine.Engine`): the deferred walk is SFrame where the
binary has SFrame, else frame pointers (an i386 program's: the kernel's compat frame-pointer
walk, 4-byte words); the oracles are the CFI unwinder (through the vDSO by the vDSO's own
``.eh_frame``, read from guest memory), the request's registers, and the shadow stack for a
``-finstrument-functions`` build; with ``perf``, Debian's perf after the sampling, in the same
guest (:func:`perf_outcome`).  What comes back per program (:func:`live_outcome`):

- ``stacks``: the program's own stacks that were checked (``vdso_stacks``: of which sampled in
  the vDSO);
- ``disagreements``: every divergence no cause proves (kind ``unexplained``, the oracle named),
  every failing pair without one (``failure``: the oracle's reason), every delivery problem
  (``delivery``), every violated invariant of the deferred-unwinding model (``invariant``) and
  every cause proven outside the scenario's declaration (``undeclared``), every proven cause whose
  claims about a binary the toolchain's own tools contradict (``contradicted``: live, every cause is
  cross-examined, :mod:`harness.toolchain.witness`), with both frame lists
  of the stack where there is one;
- ``crash``: the program died during sampling (a signal, or a non-zero exit status: 127 is a
  program the guest's loader could not start), with the end of its output.  A crash is a
  finding of its own kind, never an error of the harness.

An infrastructure failure (QEMU gone, the gdb stub silent, the debugger's connection broken) is
no finding: it is raised, as the error the engine met (:mod:`harness.transport.errors`), with a
note naming the program it happened on.  ``outcomes`` (a list to append to) keeps what was done
before it, as :func:`~harness.scenarios.engine.run_scenarios`'s ``results`` does.

Every wait is bounded: the boot and each guest operation by the transport's timeouts, each
program's sampling by its requests (at most ten per sample asked for), its stops and ``timeout``
seconds of wall time (:attr:`~harness.scenarios.catalog.Scenario.time_limit`).

What a program must do to be checkable live
-------------------------------------------

(issue #25, item 3: "every generated program loops in syscalls inside its chain so the stops
land there".)  Requests are injected NMIs; a request's stack is delivered when the task next
returns to user space.  A program is checkable when:

1. **It spends its time at the deepest point of its chain, in a loop of cheap syscalls.**  An
   NMI then catches it there (in user mode between two syscalls, or in the kernel inside one),
   and every delivered stack holds the whole chain.  :data:`LIVE_LOOP_C` does it: paste it
   before the functions and put ``HARNESS_LIVE_LOOP();`` at the deepest point of the chain
   (each thread's, each signal handler's where the shape has them).  It makes ``getppid`` with
   an inline ``syscall`` (``int $0x80`` on i386) instruction, so no libc wrapper frame sits on
   top (a frameless leaf that a frame-pointer walk loses: explained, but no shape of the
   generator's own).
2. **It ends on its own.**  The loop ends after :data:`LIVE_SECONDS` seconds of the guest's
   ``CLOCK_MONOTONIC`` (which stands still while the debugger holds the guest, so sampling does
   not eat into it) and the program then returns from its chain and exits 0.  Normally the
   harness kills it first (SIGTERM, once its samples are in): it must not ignore or block
   SIGTERM.  It must not exit earlier, or sampling ends with fewer stacks (a note, no crash).
   A loop without an end of its own (harness fuzz's ``FZ_SPIN`` given ``0``) works as well:
   the bound is then the harness's kill alone.
3. **It needs no input** (stdin is not a terminal; its arguments are :attr:`LiveProgram.args`)
   and writes little (its output is kept on the host; the end of it goes into a crash's text).
4. **Its file name is best unique within a batch, also in its first 15 characters**: the guest
   has one ``/user/NAME`` per name, and the task's comm (the name's first 15 characters) is how
   the engine recognises the program's forked children.  Where they are not (every build's
   binary called ``prog``), each is copied under a name of its own (:func:`guest_names`: from
   :attr:`LiveProgram.name`), which the frames' module names then show.
5. It is an x86-64 or i386 ELF program, static or dynamic: linked as the harness links its own
   builds (:func:`harness.images.programs.cflags`: its interpreter ``/tc/ROOT/libNN/...``), its
   loader and libraries come from that toolchain root; else from this machine, as it was
   linked (DT_RPATH/DT_RUNPATH).  A library it dlopens goes in :attr:`LiveProgram.libs`.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..deferred.log import JsonlFile
from ..errors import HarnessError
from ..images.programs import Program, ProgramError
from ..perf.capture import PERFCC
from ..perf.debian import DebianReport
from ..perf.debian_run import DeferIgnored, check_run, deferred_unsupported, run_debian_perf
from ..scenarios.catalog import user_scenario
from ..scenarios.engine import Engine, Sampling
from ..scenarios.result import Result
from ..session import GuestSpec, Session
from ..toolchain.witness import CrossExaminer
from ..transport.errors import GuestError, TargetError
from ..verdicts.claims import CONTRADICTED
from ..verdicts.types import FAILURE
from .build import Built
from .defaults import LIVE_SAMPLES
from .finding import Finding, build_failed, dedupe

__all__ = ["COMM_LEN", "LIVE_LOOP_C", "LIVE_SAMPLES", "LIVE_SECONDS", "LIVE_TIMEOUT", "PERF_FREQ", "PERF_SECONDS",
           "LiveChecker", "LiveDisagreement", "LiveOutcome", "LiveProgram", "check_live", "findings_of", "guest_names",
           "live_outcome", "perf_outcome", "perf_unavailable"]

#: seconds of wall time one program's sampling may take at most
LIVE_TIMEOUT = 120.0
#: seconds of guest time :data:`LIVE_LOOP_C`'s loop runs before the program ends on its own
LIVE_SECONDS = 30
#: Debian's perf oracle on each program: seconds of perf record (perfcc's run of it) and its rate
PERF_SECONDS = 2.0
PERF_FREQ = 200

#: C for a generated program (before its functions): ``HARNESS_LIVE_LOOP();`` at the deepest
#: point of a chain loops in ``getppid`` for :data:`LIVE_SECONDS` seconds of guest time
#: (``-DHARNESS_LIVE_SECONDS=N`` changes it), then the statement ends.  Every loop of a program
#: (each thread's) ends at the same deadline, and a loop reached after it ends at once.  No
#: function of its own: the loop runs in the frame of the function that holds it.
LIVE_LOOP_C = r"""
/* The harness's live loop (harness/fuzz/live.py: LIVE_LOOP_C). */
#include <time.h>
#include <sys/syscall.h>
#ifndef HARNESS_LIVE_SECONDS
#define HARNESS_LIVE_SECONDS @SECONDS@
#endif
static volatile unsigned long harness_live_sink;
__attribute__((always_inline, no_instrument_function)) static inline long harness_live_syscall(void)
{
    long ret;
#if defined(__x86_64__)
    __asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
#else
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"((long)SYS_getppid) : "memory");
#endif
    return ret;
}
__attribute__((always_inline, no_instrument_function)) static inline int harness_live_expired(void)
{
    static long deadline; /* the first loop's start + HARNESS_LIVE_SECONDS, for every thread */
    long unset = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    __atomic_compare_exchange_n(&deadline, &unset, (long)ts.tv_sec + HARNESS_LIVE_SECONDS, 0,
                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return ts.tv_sec >= __atomic_load_n(&deadline, __ATOMIC_SEQ_CST);
}
#define HARNESS_LIVE_LOOP()                                                      \
    do {                                                                     \
        for (unsigned long harness_i_ = 0;; harness_i_++) {              \
            harness_live_sink = harness_live_syscall();              \
            if (harness_i_ % 4096 == 0 && harness_live_expired())   \
                break;                                           \
        }                                                                \
    } while (0)
""".replace("@SECONDS@", str(LIVE_SECONDS))


@dataclass(frozen=True)
class LiveProgram:
    """A built program to sample: its ELF on this machine, its arguments, the libraries it dlopens."""

    name: str
    path: Path
    args: tuple[str, ...] = ()
    libs: tuple[Path, ...] = ()
    description: str = ""  # toolchain, linker, flags: for messages


@dataclass(frozen=True)
class LiveDisagreement:
    """One thing a program's live run showed wrong.  ``kind``: ``unexplained`` (a divergence
    between the unwinder and ``oracle`` that no cause proves), ``failure`` (a failing pair
    without such a divergence: the oracle's reason), ``delivery`` (a delivered trace gone wrong:
    tracers given different traces, work never delivered), ``invariant`` (the deferred model's
    rules, ``oracle`` "model"), ``undeclared`` (a cause proven that the program's facts say it
    cannot show), ``contradicted`` (a proven cause whose claims about a binary the toolchain's own
    tools contradict) or ``unchecked`` (stacks judged, but the CFI oracle stepped through none of
    the program's own frames).  ``frames``: the unwinder's and the oracle's frames of that stack, each
    ``"0xADDR symbol+off (module)"`` (as symbolized at the stop), or two empty tuples."""

    kind: str
    unwinder: str
    oracle: str
    detail: str
    frames: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


@dataclass
class LiveOutcome:
    """One program's live run: stacks checked on it, what disagreed, whether it crashed."""

    program: LiveProgram
    stacks: int
    disagreements: list[LiveDisagreement] = field(default_factory=list)
    crash: str | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the program's run in the guest: its start, sampling, checks and end
    # frames of the program's own text the CFI oracle stepped from (Result.own_frames_checked)
    own_frames_checked: int = 0
    causes: dict[str, int] = field(default_factory=dict)  # divergences each cause proved
    cross: dict[str, int] = field(default_factory=dict)  # cross-examined divergences by outcome
    # the program's stacks whose topmost frame the CFI oracle found in the vDSO (Result.vdso_stacks)
    vdso_stacks: int = 0
    # Debian's perf oracle on the program (perf_outcome): its counts, or why it did not run
    perf: dict = field(default_factory=dict)
    perf_skipped: str | None = None

    @property
    def ok(self) -> bool:
        """Stacks were checked, nothing disagreed and the program did not crash."""
        return self.stacks > 0 and not self.disagreements and self.crash is None


# -- a scenario's result as an outcome -----------------------------------------------------------

def _frame_text(f) -> str:
    addr, module, sym = f
    text = f"{addr:#x}"
    if sym:
        text += f" {sym}"
    return f"{text} ({module})" if module else text


def _frames(rec: dict, unwinder: str, oracle: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    frames = rec.get("frames", {})
    return (tuple(_frame_text(f) for f in frames.get(unwinder, [])),
            tuple(_frame_text(f) for f in frames.get(oracle, [])))


def _where(rec: dict) -> str:
    ip = rec.get("regs", {}).get("ip")
    at = f" ip={ip:#x}" if isinstance(ip, int) else ""
    return f"pid {rec.get('task')} at {rec.get('point', '?')}{at}"


def _stack_disagreements(rec: dict) -> list[LiveDisagreement]:
    """Each failing pair of one stack record (as the engine logged it)."""
    out = []
    for v in rec.get("verdicts", []):
        if v.get("verdict") != FAILURE:
            continue
        unwinder, oracle = str(v["unwinder"]), v["oracle"]
        frames = _frames(rec, unwinder, oracle)
        if oracle == "delivery":  # the stack's delivery itself went wrong (snapshot.StackEvaluation)
            out.append(LiveDisagreement("delivery", unwinder, oracle, f"{_where(rec)}: {v.get('reason', '')}",
                                        (frames[0], ())))
            continue
        open_ = [d for d in v.get("divergences", []) if not d.get("cause")]
        for d in open_:
            out.append(LiveDisagreement("unexplained", unwinder, oracle, f"{_where(rec)}: {d['text']}", frames))
        false = [d for d in v.get("divergences", []) if d.get("cross") == CONTRADICTED]
        for d in false:
            out.append(LiveDisagreement("contradicted", unwinder, oracle, f"{_where(rec)}: {d['text']}", frames))
        open_ += false
        if not open_:
            why = v.get("reason") or "; ".join(d["text"] for d in v.get("divergences", [])) or "failed"
            out.append(LiveDisagreement("failure", unwinder, oracle, f"{_where(rec)}: {why}", frames))
    return out


def _crash(r: Result) -> str | None:
    """The program's death during sampling in words, or None (it ran until the harness ended it,
    or exited 0 on its own)."""
    status = r.program_exit
    if not status:
        return None
    if status > 128:
        try:
            what = f"killed by {signal.Signals(status - 128).name} (status {status})"
        except ValueError:
            what = f"exited with status {status}"
    elif status == 127:
        what = "could not start (status 127: not found, or its loader failed)"
    elif status == 126:
        what = "could not start (status 126: not executable)"
    else:
        what = f"exited with status {status}"
    own = r.own_stacks
    what += f" after {own} checked stack(s)" if own else " before its first checked stack"
    if r.output_tail:
        what += "; its output ends: " + " | ".join(line[:200] for line in r.output_tail[-3:])
    return what


def live_outcome(program: LiveProgram, result: Result) -> LiveOutcome:
    """What one program's scenario result says, as a :class:`LiveOutcome` (see the module's doc).
    Disagreements repeated stack after stack are kept once each (same kind, pair, text and frames)."""
    unwinder = str(result.scenario.unwinder)
    found: list[LiveDisagreement] = []
    for rec in result.failures:
        found += _stack_disagreements(rec)
    for cause, n in sorted(result.undeclared.items()):
        rec = result.examples.get(cause, {})
        v = next((v for v in rec.get("verdicts", []) if any(d.get("cause") == cause for d in v.get("divergences", []))),
                 {"unwinder": unwinder, "oracle": "?"})
        found.append(LiveDisagreement("undeclared", v["unwinder"], v["oracle"],
                                      f"cause {cause} proven {n} time(s), outside the program's declaration",
                                      _frames(rec, v["unwinder"], v["oracle"]) if rec else ((), ())))
    if result.own_stacks and "cfi" in result.oracles and not result.own_frames_checked:
        # Every stack agreed or was explained, yet the CFI oracle stepped through none of the
        # program's own frames (a mold PIE read with a wrong load bias: no FDE found for any of
        # them): a verdict on nothing.
        found.append(LiveDisagreement("unchecked", unwinder, "cfi",
                                      f"{result.own_stacks} stack(s) judged, but the CFI oracle stepped through "
                                      f"none of the program's own frames"))
    if result.vdso_lost:
        # A stack sampled in the vDSO whose CFI walk (the vDSO's own .eh_frame, read from guest
        # memory) never reached the program: the caller lost by the ground truth itself, which no
        # cause can explain (a cause explains an unwinder's difference from the oracle).
        found.append(LiveDisagreement("vdso-lost", unwinder, "cfi",
                                      f"{result.vdso_lost} of {result.vdso_stacks} stack(s) sampled in the vDSO: "
                                      f"the CFI oracle's walk from the vDSO never reached the program's own text"))
    found += [LiveDisagreement("delivery", unwinder, "delivery", p) for p in result.problems]
    found += [LiveDisagreement("invariant", unwinder, "model", m) for m in result.invariant_violations]
    notes = list(result.notes)
    if result.failed_stacks > len(result.failures):
        notes.append(f"{result.failed_stacks} failing stacks, the first {len(result.failures)} kept")
    for (oracle, reason), n in sorted(result.not_checked.items()):
        if reason:
            notes.append(f"{oracle} did not check {n} stack(s): {reason}")
    crash = _crash(result)
    if not result.own_stacks and crash is None:
        notes.append(result.shortfall() or "no stack of the program was checked")
    if result.log:
        notes.append(f"stacks logged in {result.log}")
    return LiveOutcome(program, result.own_stacks, list(dict.fromkeys(found)), crash, notes,
                       own_frames_checked=result.own_frames_checked, causes=dict(sorted(result.causes.items())),
                       cross=result.cross_outcomes(), vdso_stacks=result.vdso_stacks)


# -- Debian's perf oracle -----------------------------------------------------------------------

def perf_unavailable(kernel: str | None) -> str | None:
    """Why Debian's perf oracle cannot run on a guest of ``kernel`` (``--kernel`` as given: None
    is the default kernel), or None.  It needs ``linux-perf`` of a named kernel's suite (not a
    bzImage's path or a tree: no suite to take it from) and a kernel with perf's deferred
    callchains (``defer_callchain``, 6.19: :func:`harness.perf.debian_run.deferred_unsupported`)."""
    from ..images.kernel import TREE_PREFIX, get_kernel
    name = kernel or "default"
    if name.startswith(TREE_PREFIX) or "/" in name or Path(name).is_file():
        return f"--kernel {name}: Debian's perf comes with a named kernel's suite, not a kernel tree or file"
    k = get_kernel(name)
    why = deferred_unsupported(k.version)
    return f"{k.package}={k.version}: {why}" if why else None


def perf_outcome(report: DebianReport, unwinder: str) -> tuple[dict, list[LiveDisagreement], list[str]]:
    """Debian's perf report on one program (:func:`harness.perf.debian_run.check_run`: perf's own
    deferred callchains, stitched, printed by perf script, and against our unwinder on perfcc's
    sample of the same entry) as the outcome's counts, disagreements (kind ``perf``: a difference
    without a name, the oracle ``perf``; ``perf-undeclared``: a named one outside the program's
    declaration) and notes."""
    counts = {"samples": report.samples, "deferred_records": report.deferred_records,
              "merged_compared": report.merged_compared, "merged_equal": report.merged_equal,
              "ours_compared": report.ours_compared, "ours_equal": report.ours_equal,
              "named": dict(sorted(report.named.items()))}
    found = [LiveDisagreement("perf", unwinder, "perf", text) for text in report.unexplained]
    found += [LiveDisagreement("perf-undeclared", unwinder, "perf",
                               f"named difference {name} ({n} time(s)) outside the program's declaration")
              for name, n in sorted(report.undeclared.items())]
    notes = [f"Debian perf {report.perf_version}: {report.ours_compared} deferred record(s) against our unwinder "
             f"({report.ours_equal} equal), {report.merged_compared} merged callchain(s) against our stitcher"]
    if not report.ours_compared:
        notes.append("Debian's perf compared none of its deferred records with our unwinder (no entry perfcc "
                     "sampled too)")
    return counts, found, notes + list(report.notes)


def _perf_run(sess: Session, prog: LiveProgram, path: Path, outcome: LiveOutcome, unwinder: str,
              seconds: float, freq: int) -> None:
    """Debian's perf oracle on one program, in the guest that sampled it: its counts, findings and
    notes added to ``outcome``.  A program that crashed under the engine is not run again (the
    crash is its finding); a perf that records without deferred callchains is a skip, with why."""
    if outcome.crash is not None:
        outcome.perf_skipped = "the program crashed under the engine's sampling"
        return
    program = next((p for p in sess.programs.values() if Path(p.path).resolve() == path.resolve()), None)
    if not isinstance(program, Program):
        outcome.perf_skipped = f"{path.name} is no program of the guest"
        return
    try:
        files = run_debian_perf(sess, program, list(prog.args), seconds, freq)
        report = check_run(files, program)
    except DeferIgnored as exc:
        outcome.perf_skipped = str(exc).splitlines()[0]
        return
    counts, found, notes = perf_outcome(report, unwinder)
    outcome.perf = counts
    outcome.disagreements += [d for d in found if d not in outcome.disagreements]
    outcome.notes += notes


# -- the batch in one guest ---------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")
COMM_LEN = 15  # TASK_COMM_LEN - 1: what of a file name the task's comm keeps


def guest_names(programs: list[LiveProgram]) -> list[str]:
    """The file name each program gets in the guest (``/user/NAME``), unique in its first
    :data:`COMM_LEN` characters within the batch (rule 4 of the module's doc): the binary's own
    when the batch's are (one path given twice is one program), else the programs' names (made
    file names), else those behind their index in the batch."""
    paths = [Path(p.path).resolve() for p in programs]

    def unique(names: list[str]) -> bool:
        first: dict[str, tuple[Path, str]] = {}
        return all(first.setdefault(n[:COMM_LEN], (path, n)) == (path, n) for path, n in zip(paths, names, strict=True))

    own = [path.name for path in paths]
    if unique(own):
        return own
    named = [_UNSAFE.sub("_", p.name).lstrip(".") or path.name for p, path in zip(programs, paths, strict=True)]
    if unique(named):
        return named
    width = len(str(len(programs) - 1))
    return [f"{i:0{width}d}-{n}" for i, n in enumerate(named)]


def _stage(programs: list[LiveProgram], tmp: Path) -> list[Path]:
    """Each program's binary under its guest name: itself where that is its own name, else a copy
    in ``tmp`` (a DT_RUNPATH with ``$ORIGIN`` then points into ``tmp``: give such a program a
    file name of its own, unique in the batch)."""
    out = []
    for p, name in zip(programs, guest_names(programs), strict=True):
        src = Path(p.path).resolve()
        if src.name == name:
            out.append(src)
            continue
        dst = tmp / name
        if not dst.exists():
            if not src.is_file():
                raise ProgramError(f"live program {p.name}: {p.path}: no such file")
            shutil.copy2(src, dst)
        out.append(dst)
    return out


def check_live(programs: list[LiveProgram], *, samples: int = LIVE_SAMPLES, kernel: str | None = None,
               qemu: str | None = None, timeout: float = LIVE_TIMEOUT, log_dir: Path | None = None,
               progress: Callable[[Sampling], None] | None = None,
               outcomes: list[LiveOutcome] | None = None, perf: bool = False,
               perf_seconds: float = PERF_SECONDS, perf_freq: int = PERF_FREQ) -> list[LiveOutcome]:
    """Sample every program of the batch in one guest and return one :class:`LiveOutcome` each, in
    their order (see the module's doc).

    ``kernel``: a kernel name as ``--kernel`` takes it, or the path of a bzImage/vmlinux (None:
    the default kernel); ``qemu``: as ``--qemu`` (None: ``$HARNESS_QEMU`` or the default);
    ``timeout``: seconds of sampling per program at most; ``log_dir``: an existing directory for
    each program's JSONL log and output (``NAME.jsonl``, ``NAME.out``); ``progress``: the
    engine's sampling states; ``outcomes``: the list to append to, which keeps the programs done
    when an infrastructure error is raised; ``perf``: Debian's perf oracle on each program after
    its sampling, in the same guest (``perf record --call-graph fp,defer`` of it under perfcc for
    ``perf_seconds`` at ``perf_freq``: :func:`harness.perf.debian_run.run_debian_perf`), where
    the kernel has perf's deferred callchains; where not (:func:`perf_unavailable`) each
    outcome's ``perf_skipped`` says why.

    Raises :class:`~harness.images.programs.ProgramError` for a program that cannot go into the
    guest (before the boot), and the guest's or the debugger's
    error (:mod:`harness.transport.errors`) when the infrastructure fails."""
    outcomes = [] if outcomes is None else outcomes
    if not programs:
        return outcomes
    with tempfile.TemporaryDirectory(prefix="harness-live-") as tmp:
        staged = _stage(programs, Path(tmp))
        # Each binary is checked here (ProgramError), before anything is built or booted.
        scenarios = [dataclasses.replace(user_scenario(str(path), list(p.args), samples=samples,
                                                       libs=tuple(str(x) for x in p.libs)), time_limit=timeout)
                     for p, path in zip(programs, staged, strict=True)]
        libs = list(dict.fromkeys(str(x) for p in programs for x in p.libs))
        kernel_path = kernel if kernel is not None and not kernel.startswith("tree:") and (
            "/" in kernel or Path(kernel).is_file()) else None
        spec = GuestSpec(kernel="default" if kernel is None or kernel_path else kernel, kernel_path=kernel_path,
                         qemu=qemu, user_programs=list(dict.fromkeys(str(path) for path in staged)), libs=libs)
        spec.check()
        skipped = perf_unavailable(kernel) if perf else "not asked for"
        if skipped is None:
            from ..images.debperf import get_debian_perf
            spec.programs = [PERFCC]
            spec.extra_files = dict(get_debian_perf(kernel or "default").files)
        # Every proven cause's claims about the programs' binaries are asked again of the
        # toolchain's own tools: a contradicted one is a finding (kind "contradicted").
        with Session(spec) as sess, CrossExaminer() as examiner:
            for i, (prog, sc) in enumerate(zip(programs, scenarios, strict=True)):
                out = _run_one(sess, prog, sc, log_dir, progress, f"{i + 1} of {len(programs)}", examiner)
                if skipped is None:
                    try:
                        _perf_run(sess, prog, Path(sc.user_path), out, str(sc.unwinder), perf_seconds, perf_freq)
                    except HarnessError as exc:
                        exc.add_note(f"Debian's perf oracle on {prog.name} ({i + 1} of {len(programs)})")
                        raise
                else:
                    out.perf_skipped = skipped
                outcomes.append(out)
    return outcomes


def _run_one(sess: Session, prog: LiveProgram, sc, log_dir: Path | None, progress, which: str,
             examiner: CrossExaminer | None = None) -> LiveOutcome:
    start = time.monotonic()
    name = Path(sc.user_path).name
    where = f"live check of {prog.name} ({which}{f': {prog.description}' if prog.description else ''})"
    log = JsonlFile(Path(log_dir) / f"{name}.jsonl") if log_dir is not None else None
    try:
        engine = Engine(sess, sc, log, progress, examiner=examiner)
        if log is not None:
            engine.result.log = f"{name}.jsonl"
        result = engine.run()
    except (GuestError, TargetError) as exc:  # the program's start, before the engine's own handling
        exc.add_note(where)
        raise
    finally:
        if log is not None:
            log.close()
    if result.errors:
        exc = engine.failure
        if exc is None:  # an error the engine found itself: a stop at no breakpoint of its own
            raise TargetError(f"{where}: {'; '.join(e.splitlines()[0] for e in result.errors)}")
        exc.add_note(where)
        raise exc
    out = live_outcome(prog, result)
    if Path(prog.path).resolve().name != name:
        out.notes.append(f"in the guest as /user/{name} (a copy: another program of the batch has its file name)")
    out.seconds = time.monotonic() - start
    return out


# -- the campaign's live checker -----------------------------------------------------------------

_SIGNAL_OR_STATUS = re.compile(r"\bSIG[A-Z0-9]+\b|\bstatus \d+\b|could not start")


def findings_of(built: Built, outcome: LiveOutcome) -> list[Finding]:
    """A live outcome as the campaign's findings (:mod:`harness.fuzz.finding`): one per crash,
    per disagreement, or for a run that checked no stack.  Signatures name what disagreed (the
    kind, the unwinder and the oracle; a crash's signal or status), never an address, so the same
    defect in two programs is one signature; the addresses and frames are the evidence."""
    cfg = built.config
    out: list[Finding] = []
    if outcome.crash is not None:
        m = _SIGNAL_OR_STATUS.search(outcome.crash)
        out.append(Finding("live-crash", m.group(0) if m else "died", cfg, outcome.crash,
                           evidence={"notes": outcome.notes, "stacks": outcome.stacks}))
    elif outcome.stacks == 0:
        out.append(Finding("live-no-stacks", "", cfg, "; ".join(outcome.notes) or "no stack of the program was checked",
                           evidence={"notes": outcome.notes}))
    for d in outcome.disagreements:
        out.append(Finding(f"live-{d.kind}", f"{d.unwinder} vs {d.oracle}", cfg, d.detail,
                           evidence={"unwinder": list(d.frames[0]), "oracle": list(d.frames[1]),
                                     "stacks": outcome.stacks}))
    return dedupe(out)


class LiveChecker:
    """The live mode's checker of a campaign (:data:`harness.fuzz.campaign.Checker`): each built
    program sampled in a guest of its own with every oracle (:func:`check_live`), its outcome as
    findings (:func:`findings_of`).  One boot per program: a campaign's search and its shrinking
    check one program at a time (hypothesis decides the next from the last), which a batch of
    programs in one guest cannot follow.  The generated ``main`` spins for ever given ``0``
    (``FZ_SPIN``): the harness's kill is its end (rule 2 of the module's doc)."""

    def __init__(self, *, samples: int = LIVE_SAMPLES, kernel: str | None = None, qemu: str | None = None,
                 timeout: float = LIVE_TIMEOUT, perf: bool = True):
        self.samples, self.kernel, self.qemu, self.timeout, self.perf = samples, kernel, qemu, timeout, perf
        # Debian's perf oracle: records compared with our unwinder, and why it did not run (by reason)
        self.perf_compared = 0
        self.perf_skipped: dict[str, int] = {}
        self.stacks = 0  # checked on every program so far (the campaign's figure)
        self.vdso_stacks = 0  # of which sampled in the vDSO

    def __call__(self, built: Built) -> list[Finding]:
        if not built.ok:
            return build_failed(built)
        cfg = built.config
        prog = LiveProgram(f"fz-{cfg.toolchain}-{cfg.linker}", Path(built.binary), ("0",),
                           description=f"{cfg.toolchain} {cfg.linker} {cfg.flags}")
        [outcome] = check_live([prog], samples=self.samples, kernel=self.kernel, qemu=self.qemu,
                               timeout=self.timeout, perf=self.perf)
        self.perf_compared += outcome.perf.get("ours_compared", 0)
        if outcome.perf_skipped:
            self.perf_skipped[outcome.perf_skipped] = self.perf_skipped.get(outcome.perf_skipped, 0) + 1
        self.stacks += outcome.stacks
        self.vdso_stacks += outcome.vdso_stacks
        if "vdso" in built.shape.features() and not outcome.vdso_stacks:
            outcome.notes.append("a vDSO leaf, and no checked stack was sampled in the vDSO")
        return findings_of(built, outcome)
