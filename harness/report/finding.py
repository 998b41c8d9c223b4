"""A fuzz signature as a Markdown bug report an upstream maintainer can act on.

Structured in (:class:`BugReport`, gathered by :mod:`harness.fuzz.bugreport` from a reproducer
directory and the toolchain's own tools), Markdown out: a title, the component and its exact
versions, the minimal source and the exact commands, expected against actual in the tools' own
words, the address with its section and symbol, what an SFrame or frame-pointer unwinder gets
wrong there, and, where known, the producer's source that emits it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BugReport", "Evidence", "render_report"]


@dataclass(frozen=True)
class Evidence:
    """One tool's words: which tool (with its version), the command, its output (cut)."""

    label: str  # "expected" / "actual" / "context"
    tool: str  # "objdump 2.47.50 (sid root)"
    command: str
    text: str


@dataclass
class BugReport:
    title: str
    component: str  # "ld.bfd (GNU ld 2.47.50.20261021)", "clang-22 22.1.8 integrated assembler"
    signature: str  # the signature's key
    versions: dict[str, str]  # as / ld / cc (and the linking toolchain's, when another)
    source_name: str
    source: str
    commands: list[str]
    summary: str  # expected against actual, in one paragraph
    evidence: list[Evidence] = field(default_factory=list)
    address: str | None = None  # "0x1030 in .plt.got, __cxa_finalize@plt"
    unwinder: str = ""  # what an SFrame / frame-pointer unwinder gets wrong there
    producer_source: str | None = None  # where known: the producer's code that emits it
    upstream: str | None = None  # what upstream knows, where found
    counts: str = ""  # "seen in 40 programs of the campaign"
    reproducer: str = ""  # the directory


def _fence(text: str, lang: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def render_report(r: BugReport) -> str:
    """The report as Markdown (one document per signature)."""
    out = [f"# {r.title}", "",
           f"**Component:** {r.component}  ", f"**Signature:** `{r.signature}`  "]
    if r.counts:
        out.append(f"**Seen:** {r.counts}  ")
    if r.reproducer:
        out.append(f"**Reproducer:** `{r.reproducer}`")
    out += ["", "## Versions", ""]
    out += [f"- `{k}`: {v}" for k, v in r.versions.items()]
    out += ["", "## What happens", "", r.summary, ""]
    if r.address:
        out += [f"**Address:** {r.address}", ""]
    if r.unwinder:
        out += ["## What an unwinder gets wrong there", "", r.unwinder, ""]
    out += ["## Minimal source", "", f"`{r.source_name}`:", "", _fence(r.source, "cpp" if r.source_name.endswith(".cc")
                                                                        else "c"), ""]
    out += ["## Commands", "", _fence("\n".join(r.commands), "sh"), ""]
    if r.evidence:
        out += ["## The tools' own words", ""]
        for e in r.evidence:
            out += [f"**{e.label}** -- {e.tool}: `{e.command}`", "", _fence(e.text or "(no output)"), ""]
    if r.producer_source:
        out += ["## Where the producer emits it", "", r.producer_source, ""]
    if r.upstream:
        out += ["## Upstream", "", r.upstream, ""]
    return "\n".join(out).rstrip() + "\n"
