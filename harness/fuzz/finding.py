"""A finding of a fuzz campaign, and its signature.

A :class:`Signature` says *what* disagreed (the finding's ``kind`` and a ``detail`` without
addresses: the two rules' shapes with their offsets taken out, a checker's finding kind, a
build error's text with numbers and paths taken out), and *where in the matrix*: toolchain,
linker and flags.  Two programs that show the same defect of the same build get one signature;
a campaign counts them under it and keeps one (shrunk) reproducer.  What the linker alone
decides (sframe check's linker kinds: sections concatenated, no PT_GNU_SFRAME, ...; no SFrame
section at all) does not depend on -O or frame pointers: such a signature's flags are the
link's only (``sframe static`` / ``sframe dyn``), so one linker defect is one signature per
toolchain, not one per compiler flag.

Kinds (:data:`KINDS`):

* ``sframe-check`` -- :func:`harness.unwind.sframe_check.check_binary` reported a finding
  (detail: its kind, and whether it is in a generated function or the runtime's code);
* ``sframe-step`` -- at an instruction of a generated function, the SFrame step's caller frame
  (ip, sp, fp) differs from the CFI step's, on a stack built from the CFI row;
* ``sframe-no-fre`` -- SFrame is built in, the function's CFI is one SFrame can express, and no
  FRE covers the instruction (the kernel falls back to frame pointers);
* ``sframe-missing`` -- SFrame is built in and the linked program has no SFrame section;
* ``sframe-dropped`` -- the compiler's object has SFrame FDEs for generated functions and the
  linked program has none for them (the linker dropped or ignored the input's section: sid's
  ld.bfd 2.47.50 and clang's V2);
* ``sframe-object`` -- in the compiler's object, before any linker: ``sframe check`` of the
  object (detail ``check KIND``), or the SFrame step against the CFI step at an instruction
  (``step ...``) or no FRE where the CFI is expressible (``no-fre ...``): the assembler's
  defect (clang's integrated assembler or gas), whatever the linker.  Its signature names no
  linker (``-``) and the compile flags only;
* ``fp-step`` -- in a frame-pointer body (the CFI's CFA is rbp-based), the frame-pointer step
  differs from the CFI step;
* ``build-failed`` -- the compiler or linker failed on a generated program;
* ``live-crash`` -- live: the program died in the guest (its signal or status is the detail);
* ``live-no-stacks`` -- live: the program ran and no stack on it was checked;
* ``live-unexplained``, ``live-failure``, ``live-delivery``, ``live-invariant``,
  ``live-undeclared``, ``live-contradicted``, ``live-unchecked``, ``live-vdso-lost``, ``live-perf``,
  ``live-perf-undeclared`` -- live: a stack sampled in the guest that an oracle (Debian's perf
  among them), the deferred model or the toolchain's own tools do not accept
  (:class:`harness.fuzz.live.LiveDisagreement`'s kinds; the detail names the unwinder and the
  oracle).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ..unwind.sframe_check import LINKER_KINDS
from .build import BuildConfig

KINDS = {
    "sframe-check": "sframe check against .eh_frame reported a finding",
    "sframe-step": "the SFrame step and the CFI step recover different caller frames",
    "sframe-no-fre": "no SFrame FRE covers an instruction whose CFI SFrame can express",
    "sframe-missing": "SFrame was asked for and the program has no SFrame section",
    "sframe-dropped": "the object's SFrame FDEs of generated functions are not in the linked program",
    "sframe-object": "in the compiler's object: sframe check, or the SFrame step against the CFI step",
    "fp-step": "the frame-pointer step and the CFI step differ in a frame-pointer body",
    "build-failed": "the compiler or the linker failed on a generated program",
    "live-crash": "the program died in the guest",
    "live-no-stacks": "the program ran in the guest and no stack on it was checked",
    "live-unexplained": "a sampled stack diverges from an oracle and no cause explains it",
    "live-failure": "a sampled stack fails an oracle's comparison",
    "live-delivery": "a sampled stack's deferred delivery went wrong",
    "live-invariant": "the deferred model's rules were broken at a sampled stack",
    "live-undeclared": "a sampled stack shows a cause the program's facts do not allow",
    "live-contradicted": "a cause proven at a sampled stack is contradicted by the toolchain's own tools",
    "live-unchecked": "stacks were judged, but the CFI oracle checked none of the program's own frames",
    "live-vdso-lost": "a stack sampled in the vDSO whose CFI walk never reached the program's own text",
    "live-perf": "a deferred callchain Debian's perf got from the kernel differs from our unwinder, without a name",
    "live-perf-undeclared": "Debian's perf shows a named difference outside the program's declaration",
}


def build_failed(built) -> list[Finding]:
    """A build that failed is a finding of its own kind, for every checker."""
    return [Finding("build-failed", built.error or "", built.config, f"the build failed: {built.error}")]


@dataclass(frozen=True, order=True)
class Signature:
    kind: str
    detail: str
    toolchain: str
    linker: str
    flags: str

    @property
    def key(self) -> str:
        what = self.kind + (f" [{self.detail}]" if self.detail else "")
        return f"{what} @ {self.toolchain}/{self.linker} {self.flags}"

    @property
    def id(self) -> str:
        """A short stable name (reproducer directories): a hash of the key."""
        return hashlib.sha1(self.key.encode()).hexdigest()[:12]

    def to_json(self) -> dict:
        return {"kind": self.kind, "detail": self.detail, "toolchain": self.toolchain, "linker": self.linker,
                "flags": self.flags, "key": self.key, "id": self.id}

    @classmethod
    def from_json(cls, d: dict) -> Signature:
        return cls(d["kind"], d["detail"], d["toolchain"], d["linker"], d["flags"])


def _decided_by_the_link(detail: str) -> bool:
    """An sframe check finding that the compile flags do not decide: what the linker did with the
    inputs' sections (:data:`LINKER_KINDS`, and ``fde-order``: a linker that does not sort the
    FDEs, seen only where -O2 and up put pieces in .text.startup/.text.unlikely), or one in
    runtime code (PLT stubs, crt and libc: made by the linker or built before the program).  Its
    signature keeps the link flags only, so one defect is one signature per toolchain and linker
    (a 1,200 s campaign gave 18 of ld.bfd's .plt.got FRE and 77 of fde-order by -O level)."""
    kind = detail.split(" ")[0]
    return kind in LINKER_KINDS or kind in ("fde-order", "empty-section") or detail.endswith(" in runtime code")


@dataclass
class Finding:
    """One disagreement in one program.  ``function``/``addr``: where (not in the signature);
    ``evidence``: what each side said (rules, recovered frames), JSON-ready."""

    kind: str
    detail: str
    config: BuildConfig
    message: str
    function: str | None = None
    addr: int | None = None
    evidence: dict = field(default_factory=dict)
    count: int = 1  # occurrences of this signature in the program (instructions, checker findings)

    @property
    def signature(self) -> Signature:
        c = self.config
        if self.kind == "sframe-object":  # the assembler's: no linker took part
            return Signature(self.kind, self.detail, c.toolchain, "-", c.compile_flags)
        link_only = self.kind in ("sframe-missing", "sframe-dropped") or (
            self.kind == "sframe-check" and _decided_by_the_link(self.detail))
        return Signature(self.kind, self.detail, c.toolchain, c.linker, c.link_flags if link_only else c.flags)

    def to_json(self) -> dict:
        return {"kind": self.kind, "detail": self.detail, "config": self.config.to_json(), "message": self.message,
                "function": self.function, "addr": self.addr, "evidence": self.evidence, "count": self.count}


def dedupe(findings: list[Finding]) -> list[Finding]:
    """One finding per signature (the first), its count the sum."""
    out: dict[Signature, Finding] = {}
    for f in findings:
        seen = out.get(f.signature)
        if seen is None:
            out[f.signature] = f
        else:
            seen.count += f.count
    return list(out.values())
