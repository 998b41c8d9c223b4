"""The closed registry of divergence causes: each one a predicate that proves its case.

A cause is a function ``(stack, divergence) -> evidence | None``: it looks at the binary and the
task's memory at the stop where the stack was delivered, and returns what it looked at (a dict
with a one-line ``text`` and the facts: the decoded prologue, the FDE range, the module without
.sframe, ...) when that explains the divergence, None when it does not.  :func:`explain` tries the
causes registered for the divergence's kind, unwinder and oracle in registry order (specific
before general) and returns the divergence proven by the first that accepts.  A divergence no
cause accepts is a failure.  Adding a cause is one function with one :func:`cause` line.

What a run may show is declared here too, once: each cause names the facts about a run without
which it cannot arise (``needs``: the program execs, has signal handlers, recurses deeper than the
kernel's limits, ...; :data:`FACTS`), a run declares its facts (a scenario's follow from its
program and its request points, :attr:`harness.scenarios.catalog.Scenario.facts`; a perf capture's
from perfcc and its target, :func:`harness.perf.oracle.capture_facts`), and
:func:`allowed_causes` is what such a run may prove.  A proven cause outside it is a finding: the
run says so (``undeclared``), and the tests fail on it.

Oracles that run the unwinder's own algorithm (``perf``: the kernel's FP callchain, or its
deferred unwind_user() record) set ``generic_causes = False``: a cause registered for any oracle
says why an unwinder misses the truth, which the same walk misses the same way, so only causes
that name such an oracle may prove a difference from it.

The model stays exactly the kernel's: the SFrame series looks up every frame with the IP itself
(``sframe_find(state->ip)``), never ``ra - 1``; where that makes a walk lose frames (a call in tail
position), the cause names what the kernel does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from elftools.common.exceptions import ELFError
from elftools.dwarf.callframe import RegisterRule

from ..memory import MemoryFault
from ..oracles.base import ORACLES, Stack, load_all
from ..oracles.cfi import RT_SIGRETURN_CODE, is_signal_trampoline, kernel_sigframe_regs, signal_frame_regs
from ..oracles.perf import (
    PERF_WALK_LACKS,
    PerfSample,
    at_elf_entry,
    at_function_start,
    chain_agrees,
    in_dump,
    sigreturn_regs,
    stack_memory,
    word,
)
from ..oracles.shadow import HOOK_ENTER, HOOK_EXIT, instrumented, shadow_pushed
from ..regs import SIGCONTEXT_32, UC_MCONTEXT_32, compat_sigcontext_regs
from ..unwind.cfi import RSP, X86_64, CorruptCFI, cfi_table, cfi_tables_for, unwind_cfi
from ..unwind.code import Function
from ..unwind.user import StopReason, Trace, UnwindConfig, UnwinderType, unwind_user
from .facts import FACTS
from .types import DIFFERS, ENDS, EXTRA, KINDS, LOST, PAST_END, REGS, Divergence

__all__ = ["CAUSES", "FACTS", "NAMED", "Cause", "allowed_causes", "cause", "evidence", "explain", "named", "undeclared"]

PT_GNU_SFRAME = 0x6474E554
# p_type as pyelftools gives it: the number (0.33 has no name for it), or the name a later version
# may give.
# not mutated (equivalent: pyelftools 0.33 reports this p_type as the number; the name is for a later version)
SFRAME_P_TYPES = ("PT_GNU_SFRAME", PT_GNU_SFRAME)  # pragma: no mutate
FP_STEPS = (UnwinderType.FP, UnwinderType.COMPAT_FP, UnwinderType.FP_ENTRY)
EXECVE, EXECVEAT, RT_SIGRETURN = 59, 322, 15  # x86-64 syscall numbers
#: a 32-bit task's sigreturn and rt_sigreturn (arch/x86/entry/syscalls/syscall_32.tbl): the call,
#: and where from the task's sp at its entry the frame's sigcontext lies (harness/regs.py)
IA32_SIGRETURNS = {119: ("sigreturn", 0), 173: ("rt_sigreturn", UC_MCONTEXT_32)}
# An instruction's text (Capstone's, Intel syntax) that is a call: "call ...", or after one prefix
# ("addr32 call ...", "notrack call ...").
_A_CALL = re.compile(r"(?:\S+ )?call\b")

@dataclass(frozen=True)
class Cause:
    name: str
    kinds: frozenset[str]
    summary: str
    predicate: Callable[[Stack, Divergence], dict | None]
    oracles: frozenset[str] | None = None  # None: any oracle
    unwinders: frozenset[str] | None = None  # None: any unwinder
    # The facts of a run without which the cause cannot arise: each item is one fact the run must
    # have, or a set of facts of which it must have one.
    needs: tuple[frozenset[str], ...] = ()

    def applies(self, d: Divergence) -> bool:
        if self.oracles is None:
            oracle = ORACLES.get(d.oracle)
            if oracle is not None and not oracle.generic_causes:
                return False
        return (d.kind in self.kinds and (self.oracles is None or d.oracle in self.oracles)
                and (self.unwinders is None or d.unwinder in self.unwinders))

    def possible(self, facts: frozenset[str] | None, oracles, unwinder: str) -> bool:
        """Whether a run with ``facts`` (None: unknown, as for a user's own binary), judged by
        ``oracles`` with ``unwinder``, can show this cause."""
        if self.unwinders is not None and unwinder not in self.unwinders:
            return False
        if self.oracles is None:
            # a generic cause: some oracle of the run that takes generic causes
            judged = any(getattr(ORACLES.get(o), "generic_causes", True) for o in oracles)
        else:
            judged = bool(self.oracles & set(oracles))
        return judged and (facts is None or all(need & facts for need in self.needs))


CAUSES: dict[str, Cause] = {}
# Differences named (and proven) outside this registry's predicates, declared here with their
# facts all the same: harness/perf/debian.py's, between Debian's perf and perf.data or our walk.
NAMED: dict[str, Cause] = {}


def _needs(needs) -> tuple[frozenset[str], ...]:
    out = tuple(frozenset([n]) if isinstance(n, str) else frozenset(n) for n in needs)
    # not mutated (equivalent: the union of no sets is the empty set)
    unknown = set().union(*out) - set(FACTS) if out else set()  # pragma: no mutate
    if unknown:
        raise ValueError(f"unknown facts {sorted(unknown)}; known: {', '.join(FACTS)}")
    return out


def cause(name: str, kinds, summary: str, *, oracles=None, unwinders=None, needs=()):
    """Register a predicate as the cause ``name`` for divergences of ``kinds``, which can arise only
    in a run with the facts ``needs`` (each a fact, or a set of which one):
    ``cause(name, ...)(predicate)`` returns ``predicate``.

    Each predicate below is a plain function followed by its ``cause(...)(fn)`` line, not decorated
    with ``@cause(...)``: mutmut 3 mutates no decorated function, and the predicates are the rules
    mutation testing must reach (tests/MUTATION.md).  The line right after the function keeps what
    the decorator gave: the cause's declaration beside the code that proves it, and the registry's
    order (which :func:`explain` tries first) the order of the file, as a table at the end would
    not without repeating it."""
    needs = _needs(needs)

    def deco(fn):
        if name in CAUSES or name in NAMED:
            raise ValueError(f"cause {name!r} registered twice")
        CAUSES[name] = Cause(name, frozenset(kinds), summary, fn, frozenset(oracles) if oracles else None,
                             frozenset(unwinders) if unwinders else None, needs)
        return fn
    return deco


def named(name: str, summary: str, *, oracles, needs=()) -> str:
    """Declare a difference that code outside this registry names and proves (no predicate here)."""
    if name in CAUSES or name in NAMED:
        raise ValueError(f"cause {name!r} registered twice")
    NAMED[name] = Cause(name, frozenset(), summary, lambda stack, d: None, frozenset(oracles), None, _needs(needs))
    return name


def allowed_causes(facts: frozenset[str] | None, oracles, unwinder: str) -> frozenset[str]:
    """The causes a run may prove (its declaration): those whose oracle and unwinder the run has
    and whose facts it has.  ``facts`` None: unknown (a user's own binary), every cause its
    oracles and unwinder allow."""
    if facts is not None and set(facts) - set(FACTS):
        raise ValueError(f"unknown facts {sorted(set(facts) - set(FACTS))}; known: {', '.join(FACTS)}")
    load_all()  # every oracle registered: which take generic causes
    oracles = set(oracles)
    return frozenset(c.name for c in (*CAUSES.values(), *NAMED.values()) if c.possible(facts, oracles, unwinder))


def undeclared(counts, allowed: frozenset[str]) -> dict[str, int]:
    """The causes of ``counts`` (cause -> n) outside a run's declaration ``allowed``: each a
    proven difference the run's facts say it cannot show, which is suspicious."""
    return {c: n for c, n in sorted(counts.items()) if n and c not in allowed}


def explain(stack: Stack, d: Divergence) -> Divergence:
    """``d`` proven by the first registered cause that accepts it, or ``d`` as it is.

    A frame of the oracle's that is no address of the task (0, or in no mapping) is not a frame
    any cause looks at (a cause examines the step that diverged, and ENDS takes the oracle's whole
    rest with it): the unwinder "lost" it or "ended" before it only in the oracle's own walk gone
    past its end, which is the oracle's failure to show, not the
    unwinder's to explain.  (Not for the oracles that run the kernel's own walk, ``perf``: their
    frames past a check the unwinder makes are garbage by design, and their causes say so.)"""
    oracle = ORACLES.get(d.oracle)
    if (oracle is None or oracle.generic_causes) and d.kind in (LOST, ENDS, DIFFERS):
        # LOST covers one frame of the oracle's; ENDS and DIFFERS cover the rest of its walk.
        covered = d.want[d.want_index:d.want_index + 1] if d.kind == LOST else d.want[d.want_index:]
        # A DIFFERS only where the oracle's rest holds a 0: elsewhere its walk went astray at a
        # frame of its own, and a cause about the oracle's walk (cfi-no-fde: no FDE for that
        # frame) is about exactly that frame.
        bad = (ip == 0 for ip in covered) if d.kind == DIFFERS else (not _task_address(stack, ip) for ip in covered)
        if any(bad):
            return d
    for c in CAUSES.values():
        if c.applies(d):
            ev = c.predicate(stack, d)
            if ev is not None:
                return d.proven(c.name, ev)
    return d


def _task_address(stack: Stack, addr: int) -> bool:
    """``addr`` is in one of the task's mappings (the file-backed ones, the vDSO, anonymous)."""
    if addr == 0:
        return False
    try:
        return stack.space.mapping_at(addr) is not None
    except (AttributeError, ValueError):  # a stack without an address space: nothing to say
        return True


def evidence(text: str, **facts) -> dict:
    return {"text": text, **facts}


# -- what the failing step started from ------------------------------------------------------
def _from(d: Divergence) -> tuple[int, bool] | None:
    """The frame the step that went wrong started from, and whether it is an interrupted IP
    (looked up at itself) rather than a return address (looked up at ra - 1).  None when the
    unwinder's step did not start there: the oracle's frame before the divergence is not the
    unwinder's (a frame lost just before it, say), so what a cause would examine at that frame
    is not the step that diverged."""
    if d.kind in (EXTRA, PAST_END):
        k = d.got_index - 1
        return d.got[k], k == 0
    k = d.want_index - 1
    if d.got_index < 1 or k < 0 or d.got[d.got_index - 1] != d.want[k]:
        return None
    return d.want[k], k in d.want_marks


def _step(stack: Stack, d: Divergence) -> UnwinderType | None:
    """The unwinder type of the step that went wrong: for ENDS the one tried when the walk
    stopped (the kernel's state->current_type), else the one that produced got[i]."""
    if d.kind == ENDS:
        return stack.trace.stopped_in
    frames = stack.trace.frames
    return frames[d.got_index].how if d.got_index < len(frames) else None


def _outcome(stack: Stack, d: Divergence) -> str:
    if d.kind == ENDS:
        return f"ended the walk ({stack.trace.stop})"
    if d.kind == LOST:
        return f"skipped {d.want[d.want_index]:#x}"
    return f"gave {d.got[d.got_index]:#x} where {d.oracle} has {d.want[d.want_index]:#x}"


def _fn(f: Function) -> dict:
    return {"function": f.name, "module": f.module, "start": f.start, "end": f.end}


def _where(addr: int, is_ip: bool) -> str:
    return f"the IP {addr:#x}" if is_ip else f"the return address {addr:#x}"


# -- frame pointers ----------------------------------------------------------------------------
def _frameless(stack: Stack, addr: int, is_ip: bool) -> dict | None:
    """The function at ``addr`` sets up no frame pointer (its decoded prologue shows it)."""
    code = stack.code
    f = code.function_at(addr, not is_ip)
    if f is None or code.frame_setup(f) is not None:
        return None
    insns = code.prologue(f)
    return {**_fn(f), "prologue": [str(i) for i in insns],
            "why_fp": f"{f.name} sets up no frame pointer (no push %rbp; mov %rsp,%rbp: "
                      f"{'; '.join(i.text for i in insns[:4])})"}


def _in_prologue(stack: Stack, addr: int) -> dict | None:
    code = stack.code
    f = code.function_at(addr)
    setup = code.frame_setup(f) if f is not None else None
    if setup is None or not f.start <= addr < setup.done:
        return None
    return {**_fn(f), "ip": addr, "setup_done": setup.done,
            "code": [str(i) for i in code.disassemble(f.start, setup.done)],
            "why_fp": f"the IP is in {f.name}'s prologue, before mov %rsp,%rbp completes at {setup.done:#x}: "
                      f"rbp still holds the caller's value (its frame pointer, where it keeps one)"}


def _at_epilogue(stack: Stack, addr: int) -> dict | None:
    if not stack.code.at_epilogue(addr):
        return None
    f = stack.code.function_at(addr)
    return {**(_fn(f) if f else {}), "ip": addr,
            "code": [str(i) for i in stack.code.disassemble(addr - 1, addr + 1)],
            "why_fp": "the IP is the ret after pop %rbp/leave: rbp is the caller's frame pointer already"}


def _fp_cannot_step(stack: Stack, addr: int, is_ip: bool) -> dict | None:
    """Why a frame-pointer step from ``addr`` cannot find its caller, or None when it should."""
    found = _frameless(stack, addr, is_ip)
    if found is None and is_ip:
        found = _in_prologue(stack, addr) or _at_epilogue(stack, addr)
    return found


def _signal_frame(stack: Stack, d: Divergence) -> dict | None:
    j = d.want_index
    # The trampoline is the frame above (a return address into it), or the topmost frame itself
    # (the handler has returned into it) or an interrupted IP: an IP, looked up at itself.
    if (j not in d.want_marks or j < 1
            or not is_signal_trampoline(stack.space, d.want[j - 1], at_ip=j - 1 in d.want_marks)):
        return None
    # The frame's "return address" is the trampoline's first byte (the handler returns to it):
    # named at itself; glibc's FDE for it starts one byte earlier, at a nop.
    tramp = stack.code.function_at(d.want[j - 1]) or stack.code.function_at(d.want[j - 1], True)
    name = tramp.name if tramp else f"{d.want[j - 1]:#x}"
    return evidence(f"{d.want[j]:#x} is the IP a signal interrupted; the frame above it is the trampoline "
                    f"{name} (CIE augmentation 'S'), whose step follows the interrupted rbp to the interrupted "
                    f"function's caller", trampoline=name, interrupted_ip=d.want[j])
cause("signal-frame", (LOST,), "the interrupted IP below a signal frame: no frame links it to the handler",
      needs=("signals",))(_signal_frame)


def _truncated(stack: Stack, d: Divergence) -> dict | None:
    t = stack.trace
    if t.stop.reason is not StopReason.LIMIT or len(t) != stack.max_entries:
        return None
    return evidence(f"truncated at {stack.max_entries} entries (UNWIND_MAX_ENTRIES); {d.oracle} goes on to "
                    f"{len(d.want)}", nr=len(t), max_entries=stack.max_entries, oracle_frames=len(d.want))
cause("truncated", (ENDS,), "the walk stopped at UNWIND_MAX_ENTRIES (the deferred cache is one page)",
      needs=("deep",))(_truncated)


def _fp_prologue(stack: Stack, d: Divergence) -> dict | None:
    found_from = _from(d)
    if found_from is None:
        return None
    addr, is_ip = found_from
    if not is_ip or _step(stack, d) not in FP_STEPS:
        return None
    found = _in_prologue(stack, addr)
    if found is None:
        return None
    return evidence(f"{found['why_fp']}, so the FP step {_outcome(stack, d)} (the kernel's function-entry "
                    f"frame applies only at a uprobe)", **found)
cause("fp-prologue-ip", (LOST, ENDS, DIFFERS),
      "an IP in a prologue: the FP step takes the caller's rbp (entry rule off) and skips the caller, or "
      "ends or goes astray where the caller keeps no frame pointer in rbp", unwinders={"fp"})(_fp_prologue)


def _fp_epilogue(stack: Stack, d: Divergence) -> dict | None:
    found_from = _from(d)
    if found_from is None:
        return None
    addr, is_ip = found_from
    if not is_ip or _step(stack, d) not in FP_STEPS:
        return None
    found = _at_epilogue(stack, addr)
    if found is None:
        return None
    return evidence(f"{found['why_fp']}, so the FP step {_outcome(stack, d)}", **found)
cause("fp-epilogue-ip", (LOST,), "an IP at an epilogue ret: the FP step skips the caller",
      unwinders={"fp"})(_fp_epilogue)


def _fp_frameless(stack: Stack, d: Divergence) -> dict | None:
    if _step(stack, d) not in FP_STEPS:
        return None
    found_from = _from(d)
    if found_from is None:
        return None
    addr, is_ip = found_from
    found = _frameless(stack, addr, is_ip)
    if found is None:
        return None
    return evidence(f"{found['why_fp']}: the FP step from {_where(addr, is_ip)} {_outcome(stack, d)}", **found)
cause("fp-frameless-function", (LOST, ENDS, DIFFERS),
      "the FP step from a function that sets up no frame pointer (rbp is not its frame)",
      unwinders={"fp"})(_fp_frameless)


# -- SFrame ------------------------------------------------------------------------------------
def _sframe_fallback(stack: Stack, d: Divergence) -> tuple[int, bool, dict] | None:
    """The step went wrong in the FP fallback of an SFrame walk, and FP could not step there:
    (address, is_ip, why FP could not)."""
    if _step(stack, d) not in FP_STEPS:
        return None  # SFrame had an FRE and took the step (or another unwinder did)
    found_from = _from(d)
    if found_from is None:
        return None
    addr, is_ip = found_from
    fp = _fp_cannot_step(stack, addr, is_ip)
    if fp is None:
        return None
    return addr, is_ip, fp


def _has_sframe(stack: Stack, addr: int) -> bool | None:
    """The ELF mapped at ``addr`` has a .sframe section or a PT_GNU_SFRAME segment (None: no ELF)."""
    e = stack.space.elf_at(addr)
    if e is None:
        return None
    try:
        elf = e.image.elf
        if elf.num_sections() and elf.get_section_by_name(".sframe") is not None:
            return True
        return any(s["p_type"] in SFRAME_P_TYPES for s in elf.iter_segments())
    except ELFError:
        return None


def _sframe_tail_call(stack: Stack, d: Divergence) -> dict | None:
    found = _sframe_fallback(stack, d)
    if found is None or found[1]:
        return None
    ra, _, fp = found
    table = stack.sframe_for(ra)
    if table is None or table.find_fde(ra) is not None:
        return None
    f = stack.code.function_at(ra, True)
    call = stack.code.call_before(ra)
    if f is None or f.end != ra or call is None:
        return None
    fde = table.find_fde(call.addr)  # the FDE of the call itself (ra - 1's)
    if fde is None or fde.func_end != ra:
        return None
    # From a return address FP's reason is always _frameless's, which has the decoded prologue.
    return evidence(
        f"the return address {ra:#x} is the end of {f.name} (its last instruction is `{call.text}`, a call "
        f"that never returns); the kernel's SFrame lookup takes the address itself, not ra - 1, and no FDE "
        f"covers it ({f.name}'s FDE is [{fde.func_start:#x}, {fde.func_end:#x})), so the walk falls back to "
        f"frame pointers: {fp['why_fp']}, and the fallback {_outcome(stack, d)}",
        **_fn(f), return_address=ra, fde=[fde.func_start, fde.func_end], call=str(call),
        fp_fallback=fp["why_fp"], prologue=fp["prologue"])
cause("sframe-tail-call", (LOST, ENDS, DIFFERS),
      "a call in tail position: the return address is its function's end; the kernel looks it up "
      "at itself, no FDE covers it, and the FP fallback cannot step", unwinders={"sframe"},
      needs=("noreturn-calls",))(_sframe_tail_call)


def _sframe_tail_call_next(stack: Stack, d: Divergence) -> dict | None:
    if _step(stack, d) is not UnwinderType.SFRAME:
        return None
    found_from = _from(d)
    if found_from is None:
        return None
    ra, is_ip = found_from
    if is_ip:
        return None
    table = stack.sframe_for(ra)
    # not mutated (equivalent: SFrame took the step from ra, which it does only with ra's table)
    if table is None:  # pragma: no mutate
        return None
    f = stack.code.function_at(ra, True)
    call = stack.code.call_before(ra)
    if f is None or f.end != ra or call is None:
        return None
    # found is not None: SFrame took the step, looking ra itself up.  The call's own FDE (ra - 1's)
    # plays no part in that lookup: a function without one ends here all the same.
    found, own = table.find_fde(ra), table.find_fde(call.addr)
    if found.func_start != ra or (own is not None and own.func_end != ra):
        return None
    nxt = stack.code.function_at(ra)
    name = nxt.name if nxt else f"{ra:#x}"
    return evidence(
        f"the return address {ra:#x} is the end of {f.name} (its last instruction is `{call.text}`, a call that "
        f"never returns) and the start of {name}; the kernel's SFrame lookup takes the address itself, not "
        f"ra - 1, so it finds {name}'s FDE [{found.func_start:#x}, {found.func_end:#x}) and applies its "
        f"function-entry row to {f.name}'s frame: the step {_outcome(stack, d)}",
        **_fn(f), return_address=ra, fde=[found.func_start, found.func_end],
        own_fde=[own.func_start, own.func_end] if own else [], next_function=name, call=str(call))
cause("sframe-tail-call-next-fde", (LOST, ENDS, DIFFERS),
      "a call in tail position whose return address is the next function's start: the kernel's lookup "
      "finds that function's FDE and applies its entry row", unwinders={"sframe"},
      needs=("noreturn-calls",))(_sframe_tail_call_next)


def _fp_drap_sp(stack: Stack, d: Divergence) -> dict | None:
    """The step from frame k went wrong because frame k's sp is wrong: the FP step that found frame
    k came from a function that realigned its stack through a DRAP register, so it gave rbp + 16
    (the realigned copy of the return address) as the CFA; the CFI walk's sp there differs."""
    if _step(stack, d) is not UnwinderType.SFRAME or _from(d) is None:
        return None
    k = d.got_index - 1
    frames = stack.trace.frames
    if k < 1 or frames[k].how not in FP_STEPS:
        return None
    f = stack.code.function_at(frames[k - 1].ip, k - 1 > 0)
    drap = stack.code.drap_realign(f) if f is not None else None
    if drap is None:
        return None
    cfi = unwind_cfi(stack.memory, stack.regs, cfi_tables_for(stack.space), max_entries=k + 1)
    if [fr.ip for fr in cfi.frames[:k + 1]] != list(d.got[:k + 1]) or cfi.frames[k].sp == frames[k].sp:
        return None
    lea, realign = drap
    given, real = frames[k].sp, cfi.frames[k].sp
    return evidence(
        f"{f.name} realigns its stack through a DRAP register (`{lea.text}; {realign.text}`) before `push rbp; "
        f"mov rbp, rsp`, and has no SFrame FDE: the kernel's FP fallback took rbp + 16, the realigned copy of its "
        f"return address, as its CFA and gave its caller sp {given:#x}, where the CFI's CFA is {real:#x}; the "
        f"caller's SFrame step from that sp {_outcome(stack, d)}",
        **_fn(f), drap=[str(lea), str(realign)], given_sp=given, cfa=real, address=frames[k - 1].ip)
cause("sframe-after-drap-fp-step", (DIFFERS, ENDS),
      "the FP fallback through a function that realigns its stack with a DRAP register (no SFrame FDE: V1 and V2 "
      "cannot describe it) gives its caller a wrong sp; the caller's SFrame step reads the wrong words",
      unwinders={"sframe"})(_fp_drap_sp)


def _sframe_no_fde(stack: Stack, d: Divergence) -> dict | None:
    found = _sframe_fallback(stack, d)
    if found is None:
        return None
    addr, is_ip, fp = found
    table = stack.sframe_for(addr)
    if table is None or table.find_fde(addr) is not None:
        return None
    e = stack.space.elf_at(addr)  # mapped: the table is the ELF's there
    f = stack.code.function_at(addr, not is_ip)
    if f is not None and not is_ip and f.end == addr:
        # A return address at its function's end (a call in tail position): sframe-tail-call's
        # case where the call has an SFrame FDE that ends there; without one, this cause's.
        call = stack.code.call_before(addr)
        own = table.find_fde(call.addr) if call is not None else None
        if own is not None and own.func_end == addr:
            return None
    name = f.name if f else f"{addr:#x}"
    return evidence(
        f"{e.path} has .sframe ({len(table.fdes)} FDEs) but none covers {name} at "
        f"{_where(addr, is_ip)} (its object file carried no .sframe: static glibc archives do not); the "
        f"walk falls back to frame pointers: {fp['why_fp']}, and the fallback {_outcome(stack, d)}",
        **{"module": e.path, **(_fn(f) if f else {})}, address=addr, fdes=len(table.fdes),
        fp_fallback=fp["why_fp"], prologue=fp.get("prologue", []))
cause("sframe-function-without-fde", (LOST, ENDS, DIFFERS),
      "no SFrame FDE covers the function (its object carried no .sframe); the FP fallback cannot step",
      unwinders={"sframe"})(_sframe_no_fde)


def _sframe_section_only(stack: Stack, addr: int) -> tuple[int, int] | None:
    """(address, size) of the .sframe section of the ELF mapped at ``addr`` when it has one but
    no PT_GNU_SFRAME program header (gold, mold, lld), else None."""
    e = stack.space.elf_at(addr)
    if e is None:
        return None
    try:
        elf = e.image.elf
        # not mutated (equivalent: without section headers pyelftools finds no section by name either)
        sec = elf.get_section_by_name(".sframe") if elf.num_sections() else None  # pragma: no mutate
        if sec is None or any(s["p_type"] in SFRAME_P_TYPES for s in elf.iter_segments()):
            return None
        return sec["sh_addr"], sec["sh_size"]
    except ELFError:
        return None


def _sframe_no_segment(stack: Stack, d: Divergence) -> dict | None:
    found = _sframe_fallback(stack, d)
    if found is None:
        return None
    addr, is_ip, fp = found
    sec = _sframe_section_only(stack, addr)
    if sec is None:
        return None
    e = stack.space.elf_at(addr)
    return evidence(
        f"{e.path} has a .sframe section ({sec[1]} bytes at {sec[0]:#x}) but no PT_GNU_SFRAME program header "
        f"(its linker did not make one): the kernel finds a module's SFrame data through that segment only, so "
        f"its lookup sees none, and the walk falls back to frame pointers at {_where(addr, is_ip)}: "
        f"{fp['why_fp']}, and the fallback {_outcome(stack, d)}",
        module=e.path, address=addr, sframe_section=list(sec), fp_fallback=fp["why_fp"],
        prologue=fp.get("prologue", []), function=fp.get("function", ""))
cause("sframe-module-without-pt-gnu-sframe", (LOST, ENDS, DIFFERS),
      "the module has a .sframe section but no PT_GNU_SFRAME: the kernel's lookup sees none; the FP "
      "fallback cannot step", unwinders={"sframe"})(_sframe_no_segment)


def _sframe_no_section(stack: Stack, d: Divergence) -> dict | None:
    found = _sframe_fallback(stack, d)
    if found is None:
        return None
    addr, is_ip, fp = found
    if _has_sframe(stack, addr) is not False:
        return None
    e = stack.space.elf_at(addr)
    return evidence(
        f"{e.path} has no .sframe section and no PT_GNU_SFRAME segment, so the walk falls back to frame "
        f"pointers at {_where(addr, is_ip)}: {fp['why_fp']}, and the fallback {_outcome(stack, d)}",
        module=e.path, address=addr, fp_fallback=fp["why_fp"], prologue=fp.get("prologue", []),
        function=fp.get("function", ""))
cause("sframe-module-without-sframe", (LOST, ENDS, DIFFERS),
      "the module has no .sframe at all; the FP fallback cannot step", unwinders={"sframe"})(_sframe_no_section)


# -- the shadow stack --------------------------------------------------------------------------
def _shadow_in_hooks(stack: Stack, d: Divergence) -> dict | None:
    f = stack.code.function_at(d.got[0])
    if f is None or f.name not in (HOOK_ENTER, HOOK_EXIT):
        return None
    return evidence(f"the IP is inside {f.name}, half-way through editing the shadow stack", **_fn(f))
cause("shadow-in-hooks", KINDS, "the IP is inside the instrumentation hooks, which edit the shadow stack",
      oracles={"shadow"})(_shadow_in_hooks)


def _shadow_uninstrumented(stack: Stack, d: Divergence) -> dict | None:
    found_from = _from(d)
    if found_from is None:
        return None
    addr, is_ip = found_from
    f = stack.code.function_at(addr, not is_ip)
    if f is None or instrumented(stack.code, f):
        return None
    if d.kind == PAST_END:
        # The shadow's last entry is the outermost instrumented call; the frames the unwinder
        # finds beyond an uninstrumented function are CFI's to check, not the shadow's.
        return evidence(f"the shadow stack ends below {f.name}, which makes no call to {HOOK_ENTER} (built "
                        f"without -finstrument-functions): the {len(d.got) - d.got_index} frame(s) past it are "
                        f"beyond what the shadow stack can know", **_fn(f), unchecked=len(d.got) - d.got_index)
    return evidence(f"{f.name} makes no call to {HOOK_ENTER} (built without -finstrument-functions), so the "
                    f"shadow stack has no frame for it", **_fn(f))
cause("shadow-uninstrumented", (EXTRA, PAST_END),
      "the shadow stack has no frame for code built without the hooks (nor for anything past it)",
      oracles={"shadow"})(_shadow_uninstrumented)


def _shadow_hook_window(stack: Stack, d: Divergence) -> dict | None:
    found_from = _from(d)
    if found_from is None:
        return None
    addr, is_ip = found_from
    if not is_ip:
        return None
    f = stack.code.function_at(addr)
    if f is None or not instrumented(stack.code, f) or shadow_pushed(stack.code, addr, f) is not False:
        return None
    return evidence(f"the IP {addr:#x} in {f.name} is before its call to {HOOK_ENTER} completes or after its "
                    f"call to {HOOK_EXIT}: its shadow frame is not pushed", **_fn(f), ip=addr,
                    calls_before_ip=[hex(a) for a in sorted(stack.code.calls(f.start, addr))])
cause("shadow-hook-window", (EXTRA,), "the IP is before the enter hook's call or after the exit hook's",
      oracles={"shadow"})(_shadow_hook_window)


# -- the CFI oracle's own end ------------------------------------------------------------------
def _cfi_no_fde(stack: Stack, d: Divergence) -> dict | None:
    if d.want_outermost:
        return None  # CFI ended at the outermost frame: anything past it is wrong
    k = len(d.want) - 1
    addr, probe = d.want[k], d.want[k] - (0 if k in d.want_marks else 1)
    e = stack.space.elf_at(probe)
    try:
        if e is not None and cfi_table(e.image).fde_for(e.link_address(probe)) is not None:
            return None
    except CorruptCFI:
        return None
    where = e.path if e is not None else "no ELF file (anonymous or generated code)"
    return evidence(f"no .eh_frame FDE covers {addr:#x} ({where}): the CFI walk ends there and the "
                    f"{len(d.got) - d.got_index} frame(s) the unwinder reports past it are unchecked",
                    address=addr, module=e.path if e else "", unchecked=len(d.got) - d.got_index)
cause("cfi-no-fde", (PAST_END,), "the CFI oracle ended for want of an FDE: frames past it cannot be checked",
      oracles={"cfi"})(_cfi_no_fde)


def _cfi_untracked_sp(stack: Stack, d: Divergence) -> dict | None:
    k = len(d.want) - 1
    if k < 0 or d.want_index != len(d.want) or d.got_index < 1 or d.got[d.got_index - 1] != d.want[k]:
        return None
    addr, is_ip = d.want[k], k in d.want_marks
    probe = addr if is_ip else addr - 1  # where the oracle looked its row up
    code = stack.code
    # The function is looked up at the probe too, in the ELF mapped there: no ELF, no function.
    e, f = stack.space.elf_at(probe), code.function_at(probe)
    if f is None:
        return None
    call = None if is_ip else code.insn_ending_at(f, addr)
    if not (is_ip or call is not None and _A_CALL.match(call.text)):
        return None
    end = addr if is_ip else call.addr  # the state the row must describe: before the call
    try:
        table = cfi_table(e.image)
        found = table.row_for(e.link_address(probe))
    except CorruptCFI:
        return None
    if found is None or table.arch is not X86_64:
        return None
    row, ra_col = found
    cfa, ra = row["cfa"], row.get(ra_col)
    # An undefined return address ends the walk by the rule itself, whatever the CFA.
    if (cfa.expr is not None or cfa.reg != RSP or not isinstance(ra, RegisterRule)
            or ra.type != RegisterRule.OFFSET):
        return None
    start = row["pc"] + e.bias
    paths = code.sp_paths(f, start, end)
    if not paths or not all(p.moved for p in paths):
        return None
    rule = f"CFA = rsp{cfa.offset:+d}, return address at CFA{ra.arg:+d}"
    took = " (0: it ended there as at the outermost frame)" if d.want_outermost else ""
    return evidence(
        f"the CFI row at {_where(addr, is_ip)} in {f.name} ({rule}, from {start:#x}) does not hold there: on every "
        f"path from {start:#x} to {end:#x} the code moves rsp and no row follows ({' | '.join(map(str, paths))}), "
        f"so the word the oracle read as the return address{took} is another one, and the "
        f"{len(d.got) - d.got_index} frame(s) the unwinder reports past it are unchecked",
        **_fn(f), address=addr, row_start=start, row=rule, paths=[str(p) for p in paths],
        unchecked=len(d.got) - d.got_index)
cause("cfi-untracked-sp-change", (PAST_END,),
      "the CFI oracle ended at a step whose row takes the CFA from rsp where the function has moved rsp "
      "and no row says so (Go's nanotime1 realigns it for the vDSO call): its return address was another "
      "word, and frames past it cannot be checked", oracles={"cfi"}, needs=("stale-cfi",))(_cfi_untracked_sp)


# -- the kernel's perf callchain ---------------------------------------------------------------
# ``harness perf``: the stack is our unwinder on a sample's registers over its dumped stack bytes
# (``stack.sample``: the sample and the kernel's chain).  For the regs-kind divergences of the
# deferred records (the kernel's walk started elsewhere than the sample's registers), ``got`` is
# what the kernel's walk started from as far as known (its first IP, or a later sample of the
# entry's registers), ``want`` the sample's (the request's) ip/sp/bp.
def _perf(stack: Stack) -> PerfSample | None:
    # not mutated (equivalent: a Stack's sample is a PerfSample (harness/perf/oracle.py) or None)
    return stack.sample if isinstance(stack.sample, PerfSample) else None  # pragma: no mutate


def _perf_max_stack(stack: Stack, d: Divergence) -> dict | None:
    ps = _perf(stack)
    if ps is None or ps.deferred or d.want_outermost or len(d.want) < ps.max_stack or d.want_index != len(d.want):
        return None
    return evidence(f"the kernel's callchain is cut at perf_event_max_stack ({ps.max_stack} entries); "
                    f"{d.unwinder} goes on to {len(d.got)}", max_stack=ps.max_stack, kernel_entries=len(d.want),
                    unwinder_entries=len(d.got))
cause("perf-max-stack", (PAST_END,), "the kernel's FP callchain is cut at perf_event_max_stack; the unwinder "
      "goes on", oracles={"perf"}, needs=("deep",))(_perf_max_stack)


def _perf_ran_off_dump(stack: Stack, d: Divergence) -> dict | None:
    ps = _perf(stack)
    stop = stack.trace.stop
    if ps is None or stop.reason is not StopReason.FAULT or stop.addr is None or in_dump(ps.sample, stop.addr):
        return None
    sp = ps.sample.regs.sp
    return evidence(f"{d.unwinder} read {stop.addr:#x}, outside the {len(ps.sample.stack)} bytes dumped at sp "
                    f"[{sp:#x}, {sp + len(ps.sample.stack):#x}); the kernel read on in live memory",
                    fault=stop.addr, dump=[sp, sp + len(ps.sample.stack)])
cause("perf-ran-off-dump", (ENDS,), "the unwinder ran off the dumped stack (a fault outside [sp, sp + dyn_size)); "
      "the kernel read on in live memory", oracles={"perf"})(_perf_ran_off_dump)


def _perf_unchecked_fp(stack: Stack, d: Divergence) -> dict | None:
    ps = _perf(stack)
    t = stack.trace
    if ps is None or ps.deferred or t.stop.reason not in PERF_WALK_LACKS or not t.frames:
        return None
    # The kernel's next entry is the return address at fp + 8 of the frame we stopped in, where
    # the dump has it.
    fp = t.frames[-1].fp
    ra = word(ps.sample, fp + 8)
    if ra is not None and ra != d.want[d.want_index]:
        return None
    check = PERF_WALK_LACKS[t.stop.reason]
    seen = f"the word at fp + 8 is its next entry {ra:#x}" if ra is not None else "fp + 8 is not in the dump"
    return evidence(f"unwind_user stops at '{check}' (fp {fp:#x}); perf's FP walk (perf_callchain_user) lacks "
                    f"the check and reads on: {seen}", check=check, fp=fp, return_address=ra)
cause("perf-unchecked-fp", (ENDS,), "unwind_user stops at a check perf's FP walk (perf_callchain_user) lacks "
      "(fp < sp, cfa <= sp, cfa misaligned): the kernel reads on", oracles={"perf"})(_perf_unchecked_fp)


def _perf_after_callback(stack: Stack, d: Divergence) -> dict | None:
    ps = _perf(stack)
    if ps is None or ps.record_seq is None or ps.seq is None:
        return None
    # not mutated (equivalent: > for >=: a record and a sample are never the same record, seq)
    if ps.record_seq >= ps.seq:  # pragma: no mutate
        return None
    return evidence(f"the entry's CALLCHAIN_DEFERRED (record {ps.record_seq}) came before this sample (record "
                    f"{ps.seq}): the callback had run, and the registers changed after the walk",
                    record=ps.record_seq, sample=ps.seq)
cause("perf-after-callback", (REGS,), "a sample after its entry's CALLCHAIN_DEFERRED (the request returned 1), "
      "with the user registers changed since (a signal frame set up): not the walked stack", oracles={"perf"},
      needs=("defer", {"execs", "signals"}))(_perf_after_callback)


def _perf_exit_unanswered(stack: Stack, d: Divergence) -> dict | None:
    ps = _perf(stack)
    if ps is None or not ps.deferred or ps.chain is not None or ps.exit_seq is None or d.want:
        return None
    return evidence(f"PERF_RECORD_EXIT (record {ps.exit_seq}) came after the task's last sampled entry and no "
                    f"CALLCHAIN_DEFERRED answered it: do_exit() detaches perf's events "
                    f"(perf_event_exit_task) before it runs the deferred work", exit=ps.exit_seq)
cause("perf-exit-unanswered", (PAST_END,), "the task's last entry (exit): do_exit() runs perf_event_exit_task() "
      "before unwind_deferred_task_exit(), so no CALLCHAIN_DEFERRED reaches perf", oracles={"perf"},
      needs=("defer", "exits"))(_perf_exit_unanswered)


# -- the request's registers ------------------------------------------------------------------
def _in_entry_asm(stack: Stack, d: Divergence) -> dict | None:
    req = stack.request
    if req is None or req.window is None:
        return None
    return evidence(f"the request interrupted {req.window} (pt_regs incomplete, or past the last "
                    f"return-to-user point): the work is delivered at the task's next exit, with its registers",
                    window=req.window)
cause("request-in-entry-asm", (REGS,), "the request hit the entry/exit assembly: delivered at the next exit",
      oracles={"regs"}, needs=("interrupts",))(_in_entry_asm)


def _kernel_layout_applies(stack: Stack, req, restorer: int) -> bool:
    """Whether a signal frame may be read by the kernel's own layout (proven by the restorer's
    code, :func:`kernel_sigframe_regs`) where no CFI with 'S' describes it: for another task
    (the scenario's space does not map its binaries), and for the program's own when its space
    maps the restorer in an ELF whose CFI has no 'S' for it (Go's runtime.sigreturn: Go has only
    .debug_frame, and runs its handlers on the goroutine's signal stack).  An own task's space
    is authoritative: a restorer it does not map is not read that way."""
    return req.own is None or stack.space.elf_at(restorer) is not None


def _signal_delivery(stack: Stack, d: Divergence) -> dict | None:
    if d.oracle == "perf":
        return _perf_signal_delivery(stack, d)
    regs, req = stack.regs, stack.request
    if req is None or req.want is None or regs.compat:
        return None
    try:
        pretcode = int.from_bytes(stack.memory.read(regs.sp, 8), "little")
    except MemoryFault:
        return None
    saved, how = signal_frame_regs(stack.space, stack.memory, pretcode, regs.sp + 8), "its CIE has 'S'"
    if saved is None and _kernel_layout_applies(stack, req, pretcode):
        saved, how = kernel_sigframe_regs(stack.memory, pretcode, regs.sp + 8), "its code is rt_sigreturn"
    if saved is None or (saved.ip, saved.sp, saved.bp) != (req.want.ip, req.want.sp, req.want.bp):
        return None
    return evidence(f"the walk started from a signal handler's registers whose frame (pretcode {pretcode:#x}: "
                    f"{how}) saved exactly the requested ones: the request came while the kernel delivered the "
                    f"signal, after get_signal() had run the task work", pretcode=pretcode)
cause("signal-delivery", (REGS,), "the request came during signal delivery, after get_signal() ran the work",
      oracles={"regs", "perf"}, needs=("signals",))(_signal_delivery)


def _execve(stack: Stack, d: Divergence) -> dict | None:
    if d.oracle == "perf":
        return _perf_execve(stack, d)
    req = stack.request
    if req is None or req.syscall not in (EXECVE, EXECVEAT) or not stack.regs.fresh_exec:
        return None
    return evidence(f"the task was in execve (syscall {req.syscall}) and the walked registers are those a "
                    f"successful execve installs (only ip, sp, flags set): unwind_deferred has no exec hook",
                    syscall=req.syscall)
cause("execve-replaced", (REGS,), "the request came during execve: the new image's registers were walked",
      oracles={"regs", "perf"}, needs=("execs",))(_execve)


def _compat_sigreturn(stack: Stack) -> dict | None:
    """A 32-bit task in sigreturn or rt_sigreturn (its syscall number says which frame: the
    sigcontext at sp or at sp + 160, harness/regs.py) and walked on the registers it restored."""
    req, regs = stack.request, stack.regs
    call, at = IA32_SIGRETURNS.get(req.syscall, (None, None))
    if call is None:
        return None
    sp = req.want.sp & 0xFFFFFFFF
    try:
        restored = compat_sigcontext_regs(stack.memory.read(sp + at, 4 * len(SIGCONTEXT_32)))
    except MemoryFault:
        return None
    if restored is None or (restored.ip, restored.sp, restored.bp) != (regs.ip, regs.sp, regs.bp):
        return None
    return evidence(f"the task was in {call} (compat syscall {req.syscall}) and the walked registers are those it "
                    f"restored from the signal frame's sigcontext at sp {sp:#x} + {at}", frame_sp=sp)


def _sigreturn(stack: Stack, d: Divergence) -> dict | None:
    if d.oracle == "perf":
        return _perf_sigreturn(stack, d)
    req, regs = stack.request, stack.regs
    if req is not None and req.want is not None and req.want.compat:
        return _compat_sigreturn(stack)
    if req is None or req.syscall != RT_SIGRETURN or req.want is None:
        return None
    restored = signal_frame_regs(stack.space, stack.memory, req.want.ip, req.want.sp)
    restorer = req.want.ip - len(RT_SIGRETURN_CODE)
    if restored is None and _kernel_layout_applies(stack, req, restorer):
        restored = kernel_sigframe_regs(stack.memory, restorer, req.want.sp)
    if restored is None or (restored.ip, restored.sp, restored.bp) != (regs.ip, regs.sp, regs.bp):
        return None
    return evidence("the task was in rt_sigreturn and the walked registers are those it restored from the "
                    f"signal frame at sp {req.want.sp:#x}", frame_sp=req.want.sp)
cause("sigreturn-restored", (REGS,), "the request came during rt_sigreturn: the restored registers were walked",
      oracles={"regs", "perf"}, needs=("signals",))(_sigreturn)


# The same facts proven from a perf sample: the kernel's deferred record starts elsewhere than
# the sample's registers (``got[0]``), or a later sample of the entry has other registers.
#: our walk's stops at its first step that the sampled bp alone decides (no read of the dump): the
#: kernel's walk from a handler's first byte, with the same bp, stops there too
_BP_STOPS = (StopReason.FP_BELOW_SP, StopReason.NON_MONOTONIC, StopReason.MISALIGNED_CFA)


def _perf_signal_delivery(stack: Stack, d: Divergence) -> dict | None:
    ps = _perf(stack)
    if ps is None or not ps.deferred:
        return None
    r = stack.regs
    if (len(d.got) == 3 and d.got == (r.ip, r.sp, r.bp) and len(d.want) == 3 and ps.entry_first is not None
            and r.bp == d.want[2] and r.sp < d.want[1]):
        # Two samples of one entry: this later one on a handler's registers (its first byte, a
        # frame pushed below the earlier sample's sp, bp untouched), the entry's first on the
        # interrupted ones: the signal frame was set up between them, within the entry.
        handler = at_function_start(ps, r.ip)
        if handler is None:
            return None
        first = ps.entry_first.offset
        return evidence(f"this sample's registers are a signal handler's ({handler}, its first byte; sp "
                        f"{d.want[1] - r.sp:#x} bytes below the entry's first sample's (byte {first:#x}), bp the "
                        f"same): the signal frame was set up within the entry, after the first sample",
                        handler=handler, how="same entry", first_sample=first)
    if not ps.chain or not len(stack.trace):
        return None
    handler = at_function_start(ps, d.got[0])
    if handler is None:
        return None
    if len(stack.trace) == 1:
        # No caller to compare: the sampled bp is no frame pointer (glibc's pthread_kill keeps the
        # signal number in rbp, bp=0xa for SIGUSR1: raise() sampled in its tgkill), so our walk
        # stopped at its first step; the kernel's, from the handler with the same bp, must have
        # stopped at once too (a record of the handler alone).  A stop by a read of the dump, or a
        # record with callers, proves nothing.
        if stack.trace.stop.reason not in _BP_STOPS or len(ps.chain) != 1:
            return None
        return evidence(f"the kernel's deferred walk is {handler} alone ({d.got[0]:#x}, a function's first byte) "
                        f"and ours stopped at once too ({stack.trace.stop.reason.value}: the sampled bp "
                        f"{stack.regs.bp:#x} is no frame pointer): the signal was delivered after get_signal() had "
                        f"run the task work, and the walk ran on the handler's registers with the same bp",
                        handler=handler, walked_ip=d.got[0])
    # The handler's walk starts with the sampled bp, as ours does: the same callers.
    tail = Trace(stack.trace.frames[1:], stack.trace.stop)
    if chain_agrees(ps.sample, tail, ps.chain[1:]) is None:
        return None
    return evidence(f"the kernel's deferred walk starts at {handler} ({d.got[0]:#x}, a function's first byte) and "
                    f"goes on with the sample's callers: the signal was delivered after get_signal() had run the "
                    f"task work, and the walk ran on the handler's registers (its frame holds the sampled ones)",
                    handler=handler, walked_ip=d.got[0])


def _perf_sigreturn(stack: Stack, d: Divergence) -> dict | None:
    ps = _perf(stack)
    if ps is None or not ps.deferred or not ps.chain:
        return None
    found = sigreturn_regs(ps.sample)
    if found is None:
        return None
    restored, at = found
    if restored.ip != d.got[0]:
        return None
    walk = unwind_user(stack_memory(ps.sample), restored, UnwindConfig(max_entries=stack.max_entries))
    how = chain_agrees(ps.sample, walk, ps.chain)
    if how is None:
        return None
    sp = ps.sample.regs.sp
    call = "sigreturn" if ps.sample.regs.compat and at == 0 else "rt_sigreturn"
    return evidence(f"the sample is in {call}: the signal frame's sigcontext at sp {sp:#x} + {at} holds ip "
                    f"{restored.ip:#x} sp {restored.sp:#x} bp {restored.bp:#x}, and the walk from those registers "
                    f"gives the kernel's record ({how})", frame_sp=sp, restored_ip=restored.ip,
                    restored_sp=restored.sp, restored_bp=restored.bp)


def _perf_execve(stack: Stack, d: Divergence) -> dict | None:
    ps = _perf(stack)
    if ps is None or not ps.deferred:
        return None
    r = stack.regs
    if len(d.got) == 3 and d.got == (r.ip, r.sp, r.bp) and r.fresh_exec:
        first = ps.entry_first.offset if ps.entry_first is not None else None
        at = f" (byte {first:#x})" if first is not None else ""
        return evidence(f"this sample's registers are those a successful execve installs (only ip, sp, flags "
                        f"set), its entry's first sample's{at} the old image's: execve "
                        f"replaces pt_regs within the entry", how="same entry", first_sample=first)
    entry = at_elf_entry(stack.space, d.got[0])
    if entry is None and at_function_start(ps, d.got[0], "_start") is None:
        return None
    where = f"the entry point of {entry}" if entry else "_start"
    return evidence(f"the kernel's deferred walk starts at {d.got[0]:#x}, {where}: the task was in execve and "
                    f"the walk ran on the new image's registers (unwind_deferred has no exec hook)",
                    how="new image", walked_ip=d.got[0], elf=entry or "")


# -- differences harness/perf/debian.py names and proves ---------------------------------------
PERF_SCRIPT_AFTER_RECORD = named(
    "perf-script-sample-after-record", "perf script prints a sample after its entry's CALLCHAIN_DEFERRED unmerged "
    "(it merges only samples waiting when the record arrives)", oracles={"perf"}, needs=("defer",))
STACK_WRITTEN = named(
    "stack-written-during-entry", "a syscall wrote into the user stack between perfcc's dump (a kernel-mode "
    "sample) and the deferred walk at the return to user space", oracles={"perf"},
    needs=("defer", {"stack-buffers", "execs"}))
