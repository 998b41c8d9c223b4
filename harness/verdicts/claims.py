"""What a cause asserts about a binary, as data a second witness can check: the claims.

A cause that proves a divergence from a fact about a binary (no FDE covers an address, a function
sets up no frame pointer, a module has no .sframe, ...) read that fact with the harness's own
parsers, at a link-time address that the harness's own load bias gave.  Both can be wrong (a mold
PIE whose bias was one page off made "no .eh_frame FDE covers" true of the wrong address).  So each
such cause also states its facts as :class:`Claim` records: the fact's name from the closed list
:data:`CLAIMS`, the module (its guest path and the host file that holds it), the run-time address
with the mapping that holds it as ``/proc/PID/maps`` shows it (the kernel's word, not the
harness's), the link-time address the harness computed, and the fact's own arguments.

:mod:`harness.toolchain.witness` checks each claim with the toolchain's own tools (readelf,
objdump, the objdump of the binutils that reads the module's SFrame version) and gives a
:class:`Testimony`: confirmed, contradicted (both claims side by side) or unverifiable (and why).
Nothing here runs a tool: claims are built from what the cause's predicate looked at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..unwind.maps import VDSO

__all__ = ["CLAIMS", "CONFIRMED", "CONTRADICTED", "OUTCOMES", "UNVERIFIABLE", "Claim", "Testimony", "claim_at",
           "module_claim"]

# The facts a cause may assert about a binary, each with what it means; a witness checks each.
CLAIMS: dict[str, str] = {
    "no-eh-frame-fde": "no .eh_frame FDE covers the address",
    "eh-frame-signal-fde": "the .eh_frame FDE covering the address has a CIE whose augmentation has 'S'",
    "function": "a function (symbol, or an FDE where there is none) spans [start, end)",
    "no-frame-setup": "the function has no mov %rsp,%rbp: it sets up no frame pointer",
    "in-prologue": "the IP is an instruction of the function before its mov %rsp,%rbp completes at setup_done",
    "at-epilogue-ret": "the instruction at the IP is a ret right after pop %rbp or leave",
    "call-ends-at": "the instruction that ends at the address is a call",
    "no-sframe-fde": "the module's SFrame section has no FDE covering the address",
    "sframe-fde-range": "the SFrame FDE covering the address spans [start, end)",
    "no-sframe": "the module has no .sframe section and no PT_GNU_SFRAME segment",
    "sframe-without-segment": "the module has a .sframe section but no PT_GNU_SFRAME segment",
    "in-symbol": "the address is inside the named symbol",
    "no-call-to": "the function makes no call to the named target",
    "hook-window": "no call to the enter hook completes before the IP, or a call to the exit hook does",
    "cfi-row": "the CFI row in effect at the address starts at row_start with CFA = rsp+cfa and RA at CFA+ra",
    "writes-rsp": "some instruction in [start, end) writes %rsp",
    "drap-realign": "the function's first instructions are lea 0x8(%rsp),%rX then and $-N,%rsp (a DRAP realignment)",
}

CONFIRMED, CONTRADICTED, UNVERIFIABLE = "confirmed", "contradicted", "unverifiable"
OUTCOMES = (CONFIRMED, CONTRADICTED, UNVERIFIABLE)


@dataclass(frozen=True)
class Claim:
    """One fact a cause asserts, where a witness can check it.

    ``address`` is the run-time address (0 for a fact about the whole module), ``link`` the
    link-time address the harness computed for it (its own load bias), ``mapping`` the
    ``/proc/PID/maps`` mapping that holds the address: (start, end, file offset, perms).  A witness
    translates ``address`` again from ``mapping`` and the file's program headers, so a wrong bias
    is contradicted with the rest.  ``args`` hold the fact's own arguments, as (name, value) pairs
    (addresses at run time, like ``address``)."""

    fact: str
    module: str  # the guest's path ("[vdso]" for the vDSO)
    host: str | None  # the host file with the module's bytes; None: ``data`` holds them (the vDSO)
    address: int = 0
    link: int | None = None
    mapping: tuple[int, int, int, str] | None = None
    args: tuple[tuple[str, object], ...] = ()
    data: bytes | None = field(default=None, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.fact not in CLAIMS:
            raise ValueError(f"unknown claim {self.fact!r}; known: {', '.join(CLAIMS)}")

    def arg(self, name: str, default=None):
        return dict(self.args).get(name, default)

    @property
    def key(self) -> tuple:
        """What makes two claims the same question to a witness (the vDSO by its bytes' identity)."""
        return (self.fact, self.host or ("data", len(self.data or b""), hash(self.data)), self.address, self.link,
                self.mapping, self.args)

    def text(self) -> str:
        where = f" at {self.address:#x}" if self.address else ""
        link = f" (link {self.link:#x})" if self.link is not None and self.address else ""
        args = ", ".join(f"{k}={v:#x}" if isinstance(v, int) and not isinstance(v, bool) else f"{k}={v}"
                         for k, v in self.args)
        return f"{self.fact}{where}{link} in {self.module}" + (f" [{args}]" if args else "")

    def as_record(self) -> dict:
        out = {"fact": self.fact, "module": self.module, "address": self.address, "link": self.link,
               "args": {k: v for k, v in self.args}}
        if self.mapping is not None:
            out["mapping"] = list(self.mapping)
        return out


@dataclass(frozen=True)
class Testimony:
    """A witness's answer to one claim: what the tool said, and the command that said it."""

    claim: Claim
    outcome: str  # CONFIRMED, CONTRADICTED or UNVERIFIABLE
    said: str  # the tool's words (or why nothing could be asked)
    command: str = ""

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")

    def as_record(self) -> dict:
        return {"claim": self.claim.as_record(), "claimed": self.claim.text(), "outcome": self.outcome,
                "said": self.said, "command": self.command}


def claim_at(space, fact: str, address: int, *, probe: int | None = None, **args) -> Claim | None:
    """A claim about ``address`` in the ELF mapped at ``probe`` (default: the address itself; a
    return address is looked up at ``ra - 1``, and its facts with it).  None where no ELF is mapped
    there (nothing a tool could be asked about)."""
    at = address if probe is None else probe
    e = space.elf_at(at)
    m = space.mapping_at(at)
    if e is None or m is None:
        return None
    items = tuple((k, v) for k, v in args.items() if v is not None)
    host = None if e.path == VDSO else e.image.name  # the vDSO's image was read from memory
    return Claim(fact, e.path, host, at, e.link_address(at), (m.start, m.end, m.offset, m.perms), items,
                 e.image.data if host is None else None)


def module_claim(space, fact: str, address: int) -> Claim | None:
    """A claim about the whole module mapped at ``address`` (its sections and program headers)."""
    c = claim_at(space, fact, address)
    return None if c is None else Claim(fact, c.module, c.host, 0, None, None, (), c.data)
