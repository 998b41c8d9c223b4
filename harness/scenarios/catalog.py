"""The scenario catalog: which program, toolchain, variant, unwinder, profile and request points.

A scenario names a guest program build (``guest_programs/*.c`` with one toolchain and variant),
the unwinder the deferred walk uses (frame pointers, or SFrame with the kernel's FP fallback),
the kernel revision's rules (``profile``), where tracers request (NMI, timer, syscall entry)
and how many requests must land on the program.  :data:`CATALOG` is what ``harness run all``
runs; :data:`DEFAULT_SET` is the one-minute main job.

What a scenario may show follows from facts about it (:attr:`Scenario.facts`: what its program
does, :data:`PROGRAM_FACTS`, and how it is requested) and the registry's conditions per cause
(:func:`harness.verdicts.causes.allowed_causes`); nothing here lists causes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import EXIT_USAGE, HarnessError
from ..images.programs import USER, Variant, program_facts, user_program
from ..unwind.user import UnknownUnwinder, Unwinder
from ..verdicts.causes import allowed_causes

__all__ = ["CATALOG", "DEFAULT_SAMPLES", "DEFAULT_SET", "Scenario", "UnknownScenario", "on_vcpus", "programs_for",
           "select_scenarios", "unwinder_for", "user_scenario"]

#: Requests that must land on a scenario's program, when the scenario (or --samples) names no other number.
DEFAULT_SAMPLES = 60


@dataclass(frozen=True)
class Scenario:
    name: str
    program: str = "callchain"
    toolchain: str = "host"
    variant: Variant = Variant(shadow=True)
    args: tuple[str, ...] = ("100000000", "spin")
    profile: str = "mainline"
    # Requests (injected NMIs, timer interrupts or syscall entries) that land on the program's
    # own tasks; those that land elsewhere (the idle task, init) are handled and counted too,
    # up to MAX_REQUESTS_PER_SAMPLE times this many in all.
    samples: int = DEFAULT_SAMPLES
    tracers: int = 2
    # The deferred walk: frame pointers only, or SFrame where an FRE exists, else FP.  A name
    # ("fp", "sframe") is taken and made the member; another name is an UnknownUnwinder.
    unwinder: Unwinder = Unwinder.FP
    # Where tracers request: "nmi" (QMP inject-nmi: reaches vCPU 0 only), "timer" (the local APIC
    # timer interrupt, on every vCPU: the request point for SMP guests) and/or "syscall" (entry
    # of do_syscall_64, a request from task context for every 64-bit syscall, on every vCPU).
    requests: tuple[str, ...] = ("nmi",)
    # Up to this many seconds of guest run time before each NMI, drawn at random (seeded): TCG
    # takes interrupts at translation-block boundaries, and without a delay the NMI lands at
    # the same few IPs sample after sample.
    jitter: float = 0.01
    # With a rate (NMIs per second of wall time), NMIs are injected on that schedule instead
    # (sampling mode); the jitter is then not used.
    rate: float = 0.0
    seed: int = 0
    # Seconds of wall time the sampling loop may take (0: no bound of its own): a program that
    # keeps the run stopping without its requests landing (one that sleeps, on a slow TCG guest)
    # ends the scenario with a note when they are up, as a batch of programs needs
    # (harness/fuzz/live.py).  The request and stop limits bound it in any case.
    time_limit: float = 0.0
    break_ra: bool = False  # test-only: every frame's RA read at the wrong offset
    user_path: str | None = None  # a user's own binary (toolchain "user") instead of a guest program

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "unwinder", Unwinder(self.unwinder))
        except UnknownUnwinder as exc:
            raise UnknownUnwinder(f"scenario {self.name}: {exc}") from None

    @property
    def facts(self) -> frozenset[str] | None:
        """What the scenario's tasks do and how they are requested (causes.FACTS); None for a
        user's own binary, whose behaviour is unknown."""
        if self.user_path:
            return None
        facts = program_facts(self.program, self.toolchain)
        if facts is None:
            return None
        if self.rate or {"nmi", "timer"} & set(self.requests):
            facts |= {"interrupts"}
        return facts

    def allowed_causes(self, oracles) -> frozenset[str]:
        """The causes this scenario may prove, judged by ``oracles`` (its declaration): a cause
        outside it is a finding (Result.undeclared)."""
        return allowed_causes(self.facts, oracles, self.unwinder)

    def describe(self) -> str:
        return (f"{self.program} [{self.variant.tag}] {self.toolchain}, {self.unwinder}, {self.profile}, "
                f"{self.samples} requests on its tasks at {'+'.join(self.requests)}, {self.tracers} tracers")


_NOFP = Variant(frame_pointers=False, shadow=True)

CATALOG: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("fp-spin"),
        Scenario("fp-syscall", args=("100000000", "raw")),
        Scenario("fp-libc-syscall", args=("100000000", "libc")),
        Scenario("sframe-v1-nofp", variant=_NOFP, unwinder=Unwinder.SFRAME),
        Scenario("sframe-v2-nofp", toolchain="trixie", variant=_NOFP, unwinder=Unwinder.SFRAME),
        Scenario("sframe-v3-nofp", toolchain="sid", variant=_NOFP, unwinder=Unwinder.SFRAME),
        Scenario("fp-seed-v10", profile="seed-v10"),
        Scenario("fp-dynamic", variant=Variant(static=False, shadow=True), args=("100000000", "raw")),
        Scenario("fp-timer", requests=("timer",)),
        Scenario("sframe-v2-timer", toolchain="trixie", variant=_NOFP, unwinder=Unwinder.SFRAME, requests=("timer",),
                 args=("100000000", "raw")),
        # Requests from task context: every syscall entry (do_syscall_64) is a request point.
        Scenario("fp-syscall-entry", args=("100000000", "raw"), requests=("syscall",)),
        # Threads: the shadow stack is a __thread variable, found from each thread's fs_base.
        Scenario("threads", program="threads", args=("3", "spin")),
        # Fork, exec and exit from known chains; children are tasks of their own.
        Scenario("forkexec", program="forkexec", args=("8192",)),
        Scenario("forkexec-syscall", program="forkexec", args=("8192",), requests=("syscall",)),
        # A SIGALRM handler spinning in a known chain: FP across the signal frame.
        Scenario("signal", program="signal", args=("spin",)),
        Scenario("signal-syscall", program="signal", args=("raw",), requests=("syscall",)),
        # A loop in the vDSO's clock_gettime (the vDSO's image is read from guest memory).
        Scenario("vdso", program="vdso", args=("mono",)),
        # Deeper than UNWIND_MAX_ENTRIES: truncated at 510 (mainline) or 512 (seed v10).
        Scenario("recurse", program="recurse", args=("600",)),
        Scenario("recurse-seed-v10", program="recurse", args=("600",), profile="seed-v10"),
        # Samples at function entry and exit: FP loses the caller there, SFrame does not.
        Scenario("prologues", program="prologues", args=()),
        Scenario("prologues-sframe", program="prologues", toolchain="sid", unwinder=Unwinder.SFRAME, args=()),
        # Calls in tail position (noreturn callees, -O2, no frame pointers): the kernel's SFrame
        # lookup of a return address at its function's end finds no FDE (or the next function's).
        Scenario("sframe-tailcall", program="tailcall", toolchain="sid", unwinder=Unwinder.SFRAME,
                 variant=Variant(frame_pointers=False, opt="-O2"), args=("-1", "spin")),
        # A 32-bit task: compat FP (4-byte words) against the shadow stack and i386 DWARF CFI.
        Scenario("compat-fp", variant=Variant(bits=32, shadow=True)),
        Scenario("compat-int80", variant=Variant(bits=32, shadow=True), args=("100000000", "raw")),
    )
}
DEFAULT_SET = ("fp-spin", "fp-syscall", "sframe-v3-nofp")


class UnknownScenario(HarnessError):
    """A scenario name the catalog does not have (bad usage: exit 2, one line)."""

    exit_code = EXIT_USAGE


def select_scenarios(names, default=DEFAULT_SET) -> list[Scenario]:
    """The catalog's scenarios for the names a user gave (``default`` when none; ``all``: every
    one), in their order; an unknown name raises :class:`UnknownScenario` naming it."""
    names = list(names or default)
    if names == ["all"]:
        names = list(CATALOG)
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise UnknownScenario(f"unknown scenarios {unknown}; known: {', '.join(CATALOG)}")
    return [CATALOG[n] for n in names]


def unwinder_for(variant: Variant, toolchain: str) -> Unwinder:
    """The unwinder a build is sampled with when nothing names one: SFrame where the binary has
    SFrame and is not known to keep frame pointers, else frame pointers.  Our own builds say
    whether they keep frame pointers (a frame-pointer build with SFrame is there to test the FP
    walk); a user's binary cannot (:func:`~harness.images.programs.user_program` leaves
    ``frame_pointers`` True), so its SFrame is used wherever it has one, as the kernel's SFrame
    series does."""
    if not variant.sframe:
        return Unwinder.FP
    if toolchain == USER or not variant.frame_pointers:
        return Unwinder.SFRAME
    return Unwinder.FP


def on_vcpus(sc: Scenario, smp: int) -> Scenario:
    """``sc`` as it can sample a guest of ``smp`` vCPUs: on more than one, its NMI requests become
    timer interrupts, which every vCPU takes.  QEMU's injected NMI (QMP ``inject-nmi``) reaches
    vCPU 0 only (Linux masks LINT1 on the others), so a program the scheduler put on another vCPU
    got none: a catalog scenario run with ``--smp 2`` on QEMU 11.1 had all 200 of its requests
    refused with -EINVAL (idle and kernel threads) in one run of three (``harness matrix``,
    2026-12-07)."""
    if smp > 1 and "nmi" in sc.requests:
        return dataclasses.replace(sc, requests=tuple(dict.fromkeys("timer" if r == "nmi" else r
                                                                     for r in sc.requests)))
    return sc


def user_scenario(path: str, args: list[str], samples: int = DEFAULT_SAMPLES, smp: int = 1,
                  libs: tuple[str, ...] = ()) -> Scenario:
    """A scenario for a user's own binary: SFrame-based unwinding where it has SFrame, else
    frame pointers (:func:`unwinder_for`); the CFI oracle always, the shadow stack only for our
    instrumented builds.

    Its requests are injected NMIs on one vCPU; on more (``smp`` > 1) timer interrupts, which
    every vCPU takes: an NMI reaches vCPU 0 only (Linux masks LINT1 on the others), so a program
    the scheduler puts on another vCPU would get none.  The binary is checked here (a
    :class:`harness.images.programs.ProgramError` before anything boots)."""
    p = user_program(path, libs)
    sc = Scenario(f"user:{p.name}", program=p.name, toolchain=p.toolchain, variant=p.variant,
                  args=tuple(args), samples=samples, unwinder=unwinder_for(p.variant, p.toolchain),
                  user_path=str(p.path))
    return on_vcpus(sc, smp)


def programs_for(scenarios: list[Scenario]) -> list[tuple[str, str, Variant]]:
    seen = []
    for sc in scenarios:
        if sc.user_path:
            continue
        key = (sc.program, sc.toolchain, sc.variant)
        if key not in seen:
            seen.append(key)
    return seen
