"""Each cause's claims about binaries, for cross-examination by the toolchain's own tools.

For every cause of :data:`harness.verdicts.causes.CAUSES` exactly one of:

* a claims function ``(stack, divergence) -> [Claim | None, ...]``, registered with
  :func:`claims`: the facts about a binary the cause's proof rests on, stated where a second
  witness (:mod:`harness.toolchain.witness`) can check them; or
* a reason, registered with :func:`no_claims`, why the cause asserts no fact about a binary (it
  rests on the walk's length, a perf sample's records, the registers of a stop).

``tests/unit/verdicts/test_cross.py`` holds the registry to that: a cause with neither fails it.
The functions read the divergence's evidence (what the predicate looked at) and the stack's
address space; they run no tool.
"""

from __future__ import annotations

from collections.abc import Callable

from ..oracles.base import Stack
from ..oracles.shadow import HOOK_ENTER, HOOK_EXIT
from .causes import CAUSES, _fp_cannot_step, _from
from .claims import Claim, claim_at, module_claim
from .types import Divergence

__all__ = ["CLAIMS_OF", "NO_CLAIMS", "claims", "claims_for", "no_claims"]

ClaimsFn = Callable[[Stack, Divergence], list]
CLAIMS_OF: dict[str, ClaimsFn] = {}
NO_CLAIMS: dict[str, str] = {}


def _new(name: str) -> str:
    if name not in CAUSES:
        raise ValueError(f"claims for {name!r}, which is no registered cause")
    if name in CLAIMS_OF or name in NO_CLAIMS:
        raise ValueError(f"claims of {name!r} registered twice")
    return name


def claims(*names: str):
    """Register ``fn(stack, divergence) -> [Claim | None, ...]`` as the claims of the causes ``names``."""
    def deco(fn: ClaimsFn) -> ClaimsFn:
        for n in names:
            CLAIMS_OF[_new(n)] = fn
        return fn
    return deco


def no_claims(reason: str, *names: str) -> None:
    """Register why the causes ``names`` assert no fact about a binary."""
    for n in names:
        NO_CLAIMS[_new(n)] = reason


def claims_for(stack: Stack, d: Divergence) -> list[Claim]:
    """The claims about binaries of the cause that proved ``d`` (none for an unproven one)."""
    fn = CLAIMS_OF.get(d.cause or "")
    if fn is None:
        return []
    return [c for c in fn(stack, d) if c is not None]


# -- pieces shared by several causes -----------------------------------------------------------
def _function(stack: Stack, ev: dict) -> Claim | None:
    """The function the evidence names, at its bounds: a symbol (or an FDE) spans [start, end)."""
    if "start" not in ev or "end" not in ev:
        return None
    return claim_at(stack.space, "function", ev["start"], name=ev.get("function", ""), start=ev["start"],
                    end=ev["end"])


def _fp_reason(stack: Stack, addr: int, ev: dict) -> list[Claim | None]:
    """The claims behind "frame pointers could not step from ``addr``": the function sets up no
    frame pointer (a prologue in the evidence, no setup_done), the IP is in a prologue, or it is at
    an epilogue's ret."""
    if "setup_done" in ev:
        return [_function(stack, ev),
                claim_at(stack.space, "in-prologue", addr, start=ev["start"], setup_done=ev["setup_done"])]
    if "prologue" in ev:
        return [_function(stack, ev),
                claim_at(stack.space, "no-frame-setup", ev["start"], start=ev["start"], end=ev["end"],
                         name=ev.get("function", ""))]
    return [claim_at(stack.space, "at-epilogue-ret", addr)]


def _fallback(stack: Stack, d: Divergence) -> list[Claim | None]:
    """An SFrame walk's FP fallback could not step: why, as :func:`_fp_cannot_step` proved it."""
    found = _from(d)
    if found is None:
        return []
    addr, is_ip = found
    fp = _fp_cannot_step(stack, addr, is_ip)
    return [] if fp is None else _fp_reason(stack, addr, fp)


# -- frame pointers ----------------------------------------------------------------------------
@claims("fp-prologue-ip")
def _fp_prologue(stack: Stack, d: Divergence) -> list:
    ev = d.evidence
    return _fp_reason(stack, ev["ip"], ev)


@claims("fp-epilogue-ip")
def _fp_epilogue(stack: Stack, d: Divergence) -> list:
    return [claim_at(stack.space, "at-epilogue-ret", d.evidence["ip"])]


@claims("fp-frameless-function")
def _fp_frameless(stack: Stack, d: Divergence) -> list:
    addr, _is_ip = _from(d)
    return _fp_reason(stack, addr, d.evidence)


# -- SFrame ------------------------------------------------------------------------------------
def _tail_call(stack: Stack, d: Divergence) -> list:
    ev = d.evidence
    ra = ev["return_address"]
    return [_function(stack, ev),
            claim_at(stack.space, "call-ends-at", ra, probe=ra - 1, start=ev["start"], end=ra)]


@claims("sframe-tail-call")
def _sframe_tail_call(stack: Stack, d: Divergence) -> list:
    ev = d.evidence
    ra = ev["return_address"]
    lo, hi = ev["fde"]
    return [*_tail_call(stack, d),
            claim_at(stack.space, "sframe-fde-range", ra - 1, start=lo, end=hi),
            claim_at(stack.space, "no-sframe-fde", ra),
            *_fallback(stack, d)]


@claims("sframe-tail-call-next-fde")
def _sframe_tail_call_next(stack: Stack, d: Divergence) -> list:
    ev = d.evidence
    lo, hi = ev["fde"]
    return [*_tail_call(stack, d), claim_at(stack.space, "sframe-fde-range", ev["return_address"], start=lo, end=hi)]


@claims("sframe-function-without-fde")
def _sframe_no_fde(stack: Stack, d: Divergence) -> list:
    return [claim_at(stack.space, "no-sframe-fde", d.evidence["address"]), *_fallback(stack, d)]


@claims("sframe-module-without-pt-gnu-sframe")
def _sframe_no_segment(stack: Stack, d: Divergence) -> list:
    return [module_claim(stack.space, "sframe-without-segment", d.evidence["address"]), *_fallback(stack, d)]


@claims("sframe-module-without-sframe")
def _sframe_no_section(stack: Stack, d: Divergence) -> list:
    return [module_claim(stack.space, "no-sframe", d.evidence["address"]), *_fallback(stack, d)]


@claims("sframe-after-drap-fp-step")
def _after_drap(stack: Stack, d: Divergence) -> list:
    ev = d.evidence
    return [_function(stack, ev),
            claim_at(stack.space, "drap-realign", ev["start"], start=ev["start"]),
            claim_at(stack.space, "no-sframe-fde", ev["start"])]


# -- the shadow stack --------------------------------------------------------------------------
@claims("shadow-in-hooks")
def _shadow_in_hooks(stack: Stack, d: Divergence) -> list:
    return [claim_at(stack.space, "in-symbol", d.got[0], name=d.evidence["function"])]


@claims("shadow-uninstrumented")
def _shadow_uninstrumented(stack: Stack, d: Divergence) -> list:
    ev = d.evidence
    return [_function(stack, ev),
            claim_at(stack.space, "no-call-to", ev["start"], start=ev["start"], end=ev["end"], target=HOOK_ENTER)]


@claims("shadow-hook-window")
def _shadow_hook_window(stack: Stack, d: Divergence) -> list:
    ev = d.evidence
    return [_function(stack, ev),
            claim_at(stack.space, "hook-window", ev["ip"], start=ev["start"], enter=HOOK_ENTER, exit=HOOK_EXIT)]


# -- CFI ---------------------------------------------------------------------------------------
@claims("cfi-no-fde")
def _cfi_no_fde(stack: Stack, d: Divergence) -> list:
    k = len(d.want) - 1
    addr = d.want[k]
    return [claim_at(stack.space, "no-eh-frame-fde", addr, probe=addr - (0 if k in d.want_marks else 1))]


@claims("cfi-untracked-sp-change")
def _cfi_untracked_sp(stack: Stack, d: Divergence) -> list:
    ev = d.evidence
    k = len(d.want) - 1
    is_ip = k in d.want_marks
    addr = ev["address"]
    probe = addr if is_ip else addr - 1
    cfa, ra = _row_offsets(ev["row"])
    end = addr if is_ip else addr - _call_size(stack, ev, addr)
    return [claim_at(stack.space, "cfi-row", addr, probe=probe, row_start=ev["row_start"], cfa=cfa, ra=ra),
            claim_at(stack.space, "writes-rsp", ev["row_start"], start=ev["row_start"], end=end)]


def _row_offsets(rule: str) -> tuple[int, int]:
    # "CFA = rsp+16, return address at CFA-8" (causes._cfi_untracked_sp's own words)
    cfa = int(rule.split("rsp", 1)[1].split(",", 1)[0])
    ra = int(rule.rsplit("CFA", 1)[1])
    return cfa, ra


def _call_size(stack: Stack, ev: dict, ra: int) -> int:
    f = stack.code.function_at(ra, True)
    call = stack.code.insn_ending_at(f, ra) if f is not None else None
    return call.size if call is not None else 0


# -- signals -----------------------------------------------------------------------------------
@claims("signal-frame")
def _signal_frame(stack: Stack, d: Divergence) -> list:
    j = d.want_index
    tramp, at_ip = d.want[j - 1], j - 1 in d.want_marks
    return [claim_at(stack.space, "eh-frame-signal-fde", tramp, probe=tramp if at_ip else tramp - 1)]


@claims("signal-delivery")
def _signal_delivery(stack: Stack, d: Divergence) -> list:
    ev = d.evidence
    if "pretcode" not in ev or "CIE has 'S'" not in ev.get("text", ""):
        return []  # read by the kernel's layout (the restorer's code), or perf's: no binary fact
    return [claim_at(stack.space, "eh-frame-signal-fde", ev["pretcode"])]


no_claims("a fact of the kernel's layout read from its own /proc/kallsyms (the entry/exit asm symbol, "
          "__entry_text_start..__entry_text_end): Debian's vmlinux has no symbol table and no .entry.text section "
          "header (readelf -S shows .text only) for a tool to check it against", "request-in-entry-asm")
no_claims("the walk's own length against UNWIND_MAX_ENTRIES: no fact about a binary", "truncated")
no_claims("facts of the perf sample and records (perf_event_max_stack, the dump's bounds, record order): no fact "
          "about a binary", "perf-max-stack", "perf-ran-off-dump", "perf-unchecked-fp", "perf-after-callback",
          "perf-exit-unanswered")
no_claims("the registers an execve installs and the syscall number the task was in: no fact about a binary",
          "execve-replaced")
no_claims("the registers rt_sigreturn restored from the signal frame in the task's memory: no fact about a binary",
          "sigreturn-restored")
