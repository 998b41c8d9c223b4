"""A Python model of the kernel's user-stack walk: ``kernel/unwind/user.c`` and its x86 parts.

The model follows the kernel function by function so a divergence between the guest kernel
and this model names a line of C:

* :meth:`UserUnwinder.start` is ``unwind_user_start()``: refuses a non-user-mode context and a
  VM86 task (``unwind_user_word_size()`` returns 0), sets ip/sp/fp from ``pt_regs`` and the word
  size (8, or 4 for a task whose CS is not ``__USER_CS``);
* :meth:`UserUnwinder.next` is ``unwind_user_next()``: tries each available unwinder type in
  priority order (SFrame first, as the out-of-tree SFrame series adds it, then frame pointers);
  SFrame without an FRE for the IP (``-ENOENT``) falls through to FP, any other SFrame failure
  ends the walk;
* :meth:`UserUnwinder._step` is ``unwind_user_next_common()``, with its checks in its order:
  ``fp < sp`` (only for an FP-based CFA), ``cfa <= sp``, ``cfa & (ws - 1)``, then the RA read and
  the FP read (only when the rule restores FP);
* :meth:`UserUnwinder.unwind` is ``unwind_user()``: the trace's first entry is the interrupted
  IP, and the loop stops storing at ``max_entries`` (510 for the deferred cache on x86-64) --
  a truncated trace, not an error.

Two profiles model the two kernels the harness knows (REFERENCE.md section 1):

* ``seed-v10``: the v10 series.  A compat (32-bit) task gets its own COMPAT_FP type with 4-byte
  words and ``arch_unwind_user_init()``/``arch_unwind_user_next()`` add the segment bases of
  CS (to IP) and SS (to SP and FP) from the task's descriptors (``segment_base_address()``).
  No function-entry frame.
* ``mainline`` (6.19): one FP type whose word size comes from ``unwind_user_word_size()``; no
  segment base; the function-entry frame (``ARCH_INIT_USER_FP_ENTRY_FRAME``) for the topmost
  frame when ``unwind_user_at_function_start()`` holds, i.e. a uprobe sits at function entry.

The harness adds one switch the kernel lacks, ``EntryFrame.ANY_IP``: apply the entry frame at
any topmost IP whose instruction is ``push %rbp``/``endbr64``, read through memory.

The walk never raises for anything the stack contains: every end is a :class:`Stop` with a
:class:`StopReason` and, for reads, the address.  Only a bad configuration raises
:class:`UnwindConfigError`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import EXIT_USAGE, HarnessError
from ..memory import Memory
from ..regs import USER_CS_64, UserRegs
from ..rule import FrameRule, RuleError, apply_rule, dwarf_regs, entry_rule, fp_rule
from .access import MASK64, TASK_SIZE_MAX_4LEVEL, AccessError, NotUserAddress, UserAccess

# include/linux/unwind_deferred.h: the cache is one page, the header takes 16 bytes.
UNWIND_MAX_ENTRIES = 510
UNWIND_MAX_ENTRIES_EARLY = 512  # revisions that allocated the entries apart from the header

X86_VM_MASK = 0x00020000  # EFLAGS.VM (arch/x86/include/uapi/asm/processor-flags.h)

PUSH_RBP = b"\x55"
ENDBR64 = b"\xf3\x0f\x1e\xfa"
ENDBR32 = b"\xf3\x0f\x1e\xfb"


class UnwindError(HarnessError):
    """Base of this layer's errors."""


class UnwindConfigError(UnwindError):
    """The walk cannot start with these parameters (the kernel's ``-EINVAL`` for max_entries 0)."""

    exit_code = EXIT_USAGE  # bad input


class UnknownUnwinder(UnwindError, ValueError):
    """A deferred unwinder name that is not one of :class:`Unwinder`'s (bad input: names the value
    and the known ones)."""

    exit_code = 2  # bad input (harness.errors)


class Unwinder(enum.StrEnum):
    """The deferred walk a kernel makes, i.e. a scenario's ``unwinder``: ``FP`` frame pointers only
    (mainline), ``SFRAME`` SFrame where an FRE covers the IP, else frame pointers (the SFrame
    series: ``-ENOENT`` falls through to FP).  A ``str``: records and logs hold its value."""

    FP = "fp"
    SFRAME = "sframe"

    @classmethod
    def _missing_(cls, value):
        raise UnknownUnwinder(f"unknown unwinder {value!r}; known: {', '.join(u.value for u in cls)}")


class Profile(enum.Enum):
    SEED_V10 = "seed-v10"
    MAINLINE = "mainline"


class EntryFrame(enum.Enum):
    """When the function-entry frame (cfa = sp + ws, fp unchanged) applies to the topmost frame."""

    OFF = "off"  # never: seed v10, and mainline when no uprobe is hit
    UPROBE = "uprobe"  # mainline with a uprobe at function entry: is_uprobe_at_func_entry() true
    ANY_IP = "any-ip"  # harness switch: any topmost IP at push %rbp / endbr64 (bytes read at IP)


class UnwinderType(enum.Enum):
    """How a frame was found: ``REGS`` for the interrupted frame, else the step's unwinder."""

    REGS = "regs"
    FP = "fp"
    COMPAT_FP = "compat-fp"
    FP_ENTRY = "fp-entry"
    SFRAME = "sframe"
    CFI = "cfi"


class StopReason(enum.Enum):
    END_OF_CHAIN = "end of chain"  # fp == 0 failing fp < sp (the ABI's outermost mark), or RA undefined
    FAULT = "user read faulted"
    NOT_USER_ADDRESS = "address is not a user address"
    NON_MONOTONIC = "CFA does not grow (cfa <= sp)"
    FP_BELOW_SP = "fp < sp"
    MISALIGNED_CFA = "CFA not word aligned"
    LIMIT = "max_entries reached"
    NO_UNWIND_INFO = "no unwind info for IP"
    RULE_ERROR = "rule cannot be evaluated"
    UNSUPPORTED_RULE = "unwind info not supported by this model"
    NOT_USER_MODE = "not a user-mode context"
    VM86 = "VM86 task"

    @property
    def is_error(self) -> bool:
        """False for the ends a consumer treats as complete or merely truncated."""
        return self not in (StopReason.END_OF_CHAIN, StopReason.LIMIT)


@dataclass(frozen=True)
class Stop:
    reason: StopReason
    addr: int | None = None  # the faulting / refused address, where there is one
    detail: str = ""

    def __str__(self) -> str:
        s = self.reason.value
        if self.addr is not None:
            s += f" at {self.addr:#x}"
        return s + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class Frame:
    ip: int
    sp: int
    fp: int
    how: UnwinderType  # the step that found this frame (REGS for the first)


@dataclass
class Trace:
    frames: list[Frame] = field(default_factory=list)
    stop: Stop = Stop(StopReason.END_OF_CHAIN)
    # The unwinder type that was tried when the walk stopped (kernel: state->current_type).
    stopped_in: UnwinderType | None = None

    @property
    def ips(self) -> list[int]:
        return [f.ip for f in self.frames]

    @property
    def types(self) -> list[UnwinderType]:
        return [f.how for f in self.frames]

    def __len__(self) -> int:
        return len(self.frames)

    def __iter__(self) -> Iterator[Frame]:
        return iter(self.frames)


class RuleProvider(Protocol):
    """An SFrame table (or anything like it): the rule for a PC, or None without an FRE."""

    def rule_for(self, pc: int) -> FrameRule | None: ...


TablesFor = Callable[[int], "RuleProvider | None"]


def flat_segment_base(selector: int) -> int:
    """``get_segment_base()`` for the flat GDT segments every normal task uses: base 0."""
    return 0


@dataclass(frozen=True)
class UnwindConfig:
    profile: Profile = Profile.MAINLINE
    max_entries: int = UNWIND_MAX_ENTRIES
    task_size_max: int = TASK_SIZE_MAX_4LEVEL
    entry_frame: EntryFrame = EntryFrame.OFF
    # seed-v10 compat: the base of a segment from its selector (LDT/GDT descriptor).
    segment_base: Callable[[int], int] = flat_segment_base
    # Mixed unwinding: the SFrame table of the ELF mapped at an IP (None: not available).
    tables_for: TablesFor | None = None
    fp: bool = True  # CONFIG_HAVE_UNWIND_USER_FP: the FP type is available


@dataclass
class UnwindState:
    """``struct unwind_user_state`` plus the model's record of why it ended."""

    ip: int = 0
    sp: int = 0
    fp: int = 0
    ws: int = 8
    compat: bool = False
    topmost: bool = True
    done: bool = False
    current_type: UnwinderType | None = None
    last_type: UnwinderType = UnwinderType.REGS  # type of the step that produced ip/sp/fp
    stop: Stop | None = None
    cs_base: int = 0
    ss_base: int = 0
    regs: UserRegs | None = None


class _StopStep(Exception):
    def __init__(self, stop: Stop):
        self.stop = stop


class UserUnwinder:
    """Walks one task's user stack through ``memory`` as ``kernel/unwind/user.c`` does."""

    def __init__(self, memory: Memory, config: UnwindConfig = UnwindConfig()):
        if config.max_entries <= 0:
            raise UnwindConfigError("max_entries must be positive (unwind_user() returns -EINVAL for 0)")
        self.memory = memory
        self.config = config
        # the walk's own state, each set by start() or _step() before it is read
        self._access: UserAccess | None = None  # pragma: no mutate (equivalent: set by start())
        self._sp = 0  # pragma: no mutate (equivalent: set by _step())
        self._mask = 7  # pragma: no mutate (equivalent: set by _step())
        self._fp_rules = {8: fp_rule(8), 4: fp_rule(4)}
        self._entry_rules = {8: entry_rule(8), 4: entry_rule(4)}

    # --- unwind_user_start() -------------------------------------------------------------
    def start(self, regs: UserRegs) -> UnwindState:
        cfg = self.config
        st = UnwindState(regs=regs)
        if not regs.user_mode:
            return self._finish(st, Stop(StopReason.NOT_USER_MODE, detail=f"cs={regs.cs:#x}"))
        # unwind_user_word_size(): VM86 stacks are never unwound; !user_64bit_mode() -> 4.
        if regs.flags & X86_VM_MASK:
            return self._finish(st, Stop(StopReason.VM86))
        st.compat = regs.cs != USER_CS_64
        st.ws = 4 if st.compat else 8
        st.ip, st.sp, st.fp = regs.ip & MASK64, regs.sp & MASK64, regs.bp & MASK64
        if st.compat:
            st.ip &= 0xFFFFFFFF  # a 32-bit task's registers as pt_regs holds them (zero-extended)
            st.sp &= 0xFFFFFFFF
            st.fp &= 0xFFFFFFFF
            if cfg.profile is Profile.SEED_V10:
                # arch_unwind_user_init(): ip += cs_base; sp, fp += ss_base
                st.cs_base = cfg.segment_base(regs.cs) & MASK64
                st.ss_base = cfg.segment_base(regs.ss) & MASK64
                st.ip = (st.ip + st.cs_base) & MASK64
                st.sp = (st.sp + st.ss_base) & MASK64
                st.fp = (st.fp + st.ss_base) & MASK64
        self._access = UserAccess(self.memory, st.ws, cfg.task_size_max)
        return st

    # --- unwind_user_next() ---------------------------------------------------------------
    def next(self, st: UnwindState) -> bool:
        """One step; True when ``st`` now holds the caller's frame, False when the walk ended."""
        if st.done:
            return False
        cfg = self.config
        if cfg.tables_for is not None and not st.compat:
            st.current_type = UnwinderType.SFRAME
            provider = cfg.tables_for(st.ip)
            rule = provider.rule_for(st.ip) if provider is not None else None
            if rule is not None:  # sframe_find() found an FRE: success or the end, never FP
                stop = self._step(st, rule, UnwinderType.SFRAME)
                return True if stop is None else self._end(st, stop)
        if not cfg.fp:
            return self._end(st, Stop(StopReason.NO_UNWIND_INFO, st.ip))
        ws = st.ws
        kind = UnwinderType.COMPAT_FP if st.compat else UnwinderType.FP
        rule = self._fp_rules[ws]
        if st.topmost and self._at_function_start(st):
            kind, rule = UnwinderType.FP_ENTRY, self._entry_rules[ws]
        st.current_type = kind
        stop = self._step(st, rule, kind)
        if stop is not None:
            return self._end(st, stop)
        if st.compat and cfg.profile is Profile.SEED_V10:  # pragma: no mutate (equivalent: 64-bit bases are 0)
            # arch_unwind_user_next(): ip += cs_base; fp += ss_base (sp is the CFA, already based)
            st.ip = (st.ip + st.cs_base) & MASK64
            st.fp = (st.fp + st.ss_base) & MASK64
        return True

    def _at_function_start(self, st: UnwindState) -> bool:
        mode = self.config.entry_frame
        if mode is EntryFrame.OFF or self.config.profile is Profile.SEED_V10 and mode is EntryFrame.UPROBE:
            return False
        if mode is EntryFrame.UPROBE:
            return True  # the caller says a uprobe at function entry was hit (is_uprobe_at_func_entry)
        assert self._access is not None
        try:
            insn = self._access.read_bytes(st.ip, 4)
        except AccessError:
            try:
                insn = self._access.read_bytes(st.ip, 1)
            except AccessError:
                return False
        return insn[:1] == PUSH_RBP or insn == (ENDBR32 if st.compat else ENDBR64)

    # --- unwind_user_next_common() ------------------------------------------------------
    def _check_cfa(self, cfa: int) -> int:
        cfa &= MASK64
        if cfa <= self._sp:  # "Make sure that stack is not going in wrong direction"
            raise _StopStep(Stop(StopReason.NON_MONOTONIC, cfa, f"sp={self._sp:#x}"))
        if cfa & self._mask:  # "Make sure that the address is word aligned"
            raise _StopStep(Stop(StopReason.MISALIGNED_CFA, cfa))
        return cfa

    def _step(self, st: UnwindState, rule: FrameRule, kind: UnwinderType) -> Stop | None:
        if rule.cfa.base == "fp" and st.fp < st.sp:  # frame->use_fp && state->fp < state->sp
            reason = StopReason.END_OF_CHAIN if st.fp == 0 else StopReason.FP_BELOW_SP
            return Stop(reason, None, f"fp={st.fp:#x} sp={st.sp:#x}")
        access = self._access
        assert access is not None
        self._sp = st.sp
        self._mask = st.ws - 1
        regs = dwarf_regs(st.regs) if st.topmost and st.regs is not None and not rule_is_plain(rule) else None
        try:
            cfa, ra, fp = apply_rule(rule, st.sp, st.fp, access.read_word, regs, self._check_cfa)
        except _StopStep as exc:
            return exc.stop
        except NotUserAddress as exc:
            return Stop(StopReason.NOT_USER_ADDRESS, exc.addr)
        except AccessError as exc:
            return Stop(StopReason.FAULT, exc.addr)
        except RuleError as exc:
            return Stop(StopReason.RULE_ERROR, None, str(exc))
        if ra is None:
            return Stop(StopReason.END_OF_CHAIN, None, "return address undefined (outermost frame)")
        st.ip = ra & MASK64
        st.sp = cfa
        st.fp = fp & MASK64
        st.topmost = False  # pragma: no mutate (equivalent: None is as false)
        st.last_type = kind
        return None

    def _end(self, st: UnwindState, stop: Stop) -> bool:
        self._finish(st, stop)
        return False

    @staticmethod
    def _finish(st: UnwindState, stop: Stop) -> UnwindState:
        st.done = True
        st.stop = stop
        return st

    # --- unwind_user() ------------------------------------------------------------------
    def unwind(self, regs: UserRegs) -> Trace:
        st = self.start(regs)
        trace = Trace()
        frames = trace.frames
        limit = self.config.max_entries
        while not st.done:
            frames.append(Frame(st.ip, st.sp, st.fp, st.last_type))
            if len(frames) >= limit:
                st.stop = Stop(StopReason.LIMIT, None, f"{limit} entries")
                break
            self.next(st)
        # a finished state always has its stop: the fallback is for a state made by hand
        trace.stop = st.stop or Stop(StopReason.END_OF_CHAIN)  # pragma: no mutate (equivalent)
        trace.stopped_in = st.current_type
        return trace


def rule_is_plain(rule: FrameRule) -> bool:
    """True when the rule needs no register beyond sp/fp/cfa (no topmost register map needed)."""
    # Not mutated (equivalent): an optimisation only; a plain rule taken for not plain builds a
    # register map it does not need, and a register rule taken for plain fails
    # test_rule_error_below_topmost_and_registers_at_topmost.
    plain = ("sp", "fp", "cfa", "same", "undefined")  # pragma: no mutate
    return all(r.base in plain for r in (rule.cfa, rule.ra, rule.fp))  # pragma: no mutate


def unwind_user(memory: Memory, regs: UserRegs, config: UnwindConfig = UnwindConfig(), **kw) -> Trace:
    """One walk: ``unwind_user(memory, regs, profile=Profile.SEED_V10, max_entries=512)``."""
    if kw:
        config = dataclasses.replace(config, **kw)
    return UserUnwinder(memory, config).unwind(regs)
