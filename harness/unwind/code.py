"""Facts about the machine code at run-time addresses of one task: which function an address is
in, whether that function sets up a frame pointer, whether an IP sits in a prologue or at an
epilogue ``ret``, which calls a range of code makes.

These are the facts divergence causes (:mod:`harness.verdicts.causes`) prove their case with, so
each one can also be *shown*: :meth:`CodeFacts.disassemble` decodes instructions with Capstone
(a maintained x86 decoder: the evidence of "this function sets up no frame pointer" is its
decoded prologue, and a hand-written decoder for the few byte patterns we test for would show
nothing a person can check against ``objdump -d``).  The tests themselves stay on raw bytes
(``push %rbp`` is 0x55, ``mov %rsp,%rbp`` 48 89 e5) because those are what the kernel and the
compiler agree on; Capstone only renders them.

Pure: code is read through ``memory.read(addr, size)`` (guest memory, or a snapshot), functions
are found through an :class:`~harness.unwind.maps.AddressSpace`.  Text does not change while a
program runs, so every fact is memoized per address.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import capstone

from ..memory import Memory, MemoryFault
from .cfi import cfi_table
from .maps import AddressSpace
from .symbolize import slot_symbol, symbol_index

__all__ = ["ENDBR", "MOV_SP_FP", "CodeFacts", "FrameSetup", "Function", "Insn", "SpPath"]

PUSH_BP = b"\x55"
# `mov %rsp,%rbp` by word size: with a `push %rbp` before it near a function's start, the frame
# setup whose absence makes a function "frameless".  The two need not be adjacent (the vDSO's
# __vdso_clock_gettime schedules `mov %edi,%r11d` between them).
MOV_SP_FP = {8: b"\x48\x89\xe5", 4: b"\x89\xe5"}
ENDBR = (b"\xf3\x0f\x1e\xfa", b"\xf3\x0f\x1e\xfb")
# gcc's DRAP realignment, as Capstone prints it: lea r10, [rsp + 8]; and rsp, 0xffffffffffffffe0
_DRAP_LEA = re.compile(r"lea [er](?:\w+), \[[er]sp \+ (?:8|4)\]")
_REALIGN = re.compile(r"and [er]sp, 0xf+[0-9a-f]0")
PUSH_TEXT = {8: "push rbp", 4: "push ebp"}  # as Capstone prints them (Intel syntax)
MOV_TEXT = {8: "mov rbp, rsp", 4: "mov ebp, esp"}
SETUP_WINDOW = 24  # bytes from a function's start in which its frame setup must begin
RET = 0xC3
POP_BP, LEAVE = 0x5D, 0xC9
CALL_REL32 = 0xE8
_DIRECT_CALL = re.compile(r"^call (0x[0-9a-f]+)$")
# A PLT entry's jump through its GOT slot (64-bit: RIP-relative; `bnd` in MPX-era .plt.sec)
_PLT_JMP = re.compile(r"^(?:bnd )?jmp qword ptr \[rip \+ (0x[0-9a-f]+)\]$")


@dataclass(frozen=True)
class Function:
    """A function of the task's address space at run-time addresses."""

    name: str
    start: int
    size: int
    module: str  # the mapped file's path ("[vdso]" for the vDSO)
    source: str = "symbol"  # "symbol" (.symtab/.dynsym) or "fde" (bounds of its .eh_frame FDE)

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True)
class Insn:
    addr: int
    size: int
    text: str  # "push rbp", Intel syntax as Capstone prints it

    def __str__(self) -> str:
        return f"{self.addr:#x}: {self.text}"


@dataclass(frozen=True)
class FrameSetup:
    """Where a function's frame pointer is set up: ``push %rbp`` at ``push``, and the address
    right after ``mov %rsp,%rbp`` (``done``): from there on rbp is this function's frame pointer."""

    push: int
    done: int


class CodeFacts:
    """Memoized facts about the code of one address space, read through ``memory``."""

    def __init__(self, space: AddressSpace, memory: Memory, ws: int = 8):
        self.space = space
        self.memory = memory
        self.ws = ws
        self._cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64 if ws == 8 else capstone.CS_MODE_32)
        self._memo: dict[tuple, object] = {}

    def memo(self, key: tuple, compute):
        """``compute()`` once per key (a fact about code, which does not change); None where it
        faulted."""
        if key not in self._memo:
            try:
                self._memo[key] = compute()
            except MemoryFault:
                self._memo[key] = None
        return self._memo[key]

    # -- functions ---------------------------------------------------------------------------
    def function_at(self, addr: int, return_address: bool = False) -> Function | None:
        """The function containing ``addr``; a return address is looked up at ``addr - 1`` (the
        call), so a call in tail position still names its caller."""
        return self.memo(("function", addr, return_address),
                          lambda: self._function(addr - 1 if return_address else addr))

    def _function(self, probe: int) -> Function | None:
        e = self.space.elf_at(probe)
        if e is None:
            return None
        link = e.link_address(probe)
        sym = symbol_index(e.image).lookup(link)
        if sym is not None:
            return Function(sym.name, sym.addr + e.bias, sym.size, e.path)
        # No symbol (the vDSO exports only its entry points): the bounds of the FDE.
        fde = cfi_table(e.image).fde_for(link)
        if fde is None:
            return None
        start = fde["initial_location"]
        return Function(f"{e.path.rsplit('/', 1)[-1]}+{start:#x}", start + e.bias, fde["address_range"],
                        e.path, "fde")

    # -- frame pointer -----------------------------------------------------------------------
    def frame_setup(self, f: Function) -> FrameSetup | None:
        """``push %rbp`` + ``mov %rsp,%rbp`` near the start of ``f``: adjacent within the first
        bytes (also after i386 main's stack realignment), or apart when ``push %rbp`` is the first
        instruction (after ``endbr64``); else the first adjacent pair anywhere in ``f``, decoded
        (a shrink-wrapped set-up after an early exit's test: the i386 shadow hook's, at byte 24,
        was called "no frame pointer" until objdump -d contradicted it).  None: ``f`` keeps no
        frame pointer, and rbp inside it is not one."""
        def compute():
            head = self.memory.read(f.start, min(f.size or 32, 32))
            mov = MOV_SP_FP[self.ws]
            k = head.find(PUSH_BP + mov, 0, SETUP_WINDOW)
            if k >= 0:
                return FrameSetup(f.start + k, f.start + k + 1 + len(mov))
            push = 4 if head.startswith(ENDBR) else 0
            if head[push : push + 1] == PUSH_BP:
                k = head.find(mov, push + 1, SETUP_WINDOW)
                if k >= 0:
                    return FrameSetup(f.start + push, f.start + k + len(mov))
            return self._late_setup(f)
        return self.memo(("setup", f.start), compute)

    def drap_realign(self, f: Function) -> tuple[Insn, Insn] | None:
        """``lea 0x8(%rsp),%rX`` (the CFA, kept in a DRAP register) then ``and $-N,%rsp`` among the
        first instructions of ``f``: gcc's realignment of the stack through a dynamic realign
        argument pointer.  Its ``push %rbp; mov %rsp,%rbp`` come after the realignment, so rbp + 16
        is the realigned copy of the return address, not the CFA.  (lea, and), or None."""
        def compute():
            insns = self.disassemble(f.start, f.start + min(f.size or 32, 32), 4)
            lea = next((i for i in insns if _DRAP_LEA.fullmatch(i.text)), None)
            realign = next((i for i in insns if _REALIGN.fullmatch(i.text)), None)
            return (lea, realign) if lea is not None and realign is not None and lea.addr < realign.addr else None
        return self.memo(("drap", f.start), compute)

    def _late_setup(self, f: Function) -> FrameSetup | None:
        """The first ``push %rbp`` decoded right before ``mov %rsp,%rbp`` in ``f`` (whole, at
        instruction boundaries), or None."""
        insns = self._decode_function(f)
        want = (PUSH_TEXT[self.ws], MOV_TEXT[self.ws])
        for a, b in zip(insns or (), (insns or ())[1:], strict=False):
            if (a.text, b.text) == want:
                return FrameSetup(a.addr, b.addr + b.size)
        return None

    def at_epilogue(self, ip: int) -> bool:
        """``ip`` is a ``ret`` right after ``pop %rbp`` or ``leave``: rbp is the caller's already."""
        def compute():
            code = self.memory.read(ip - 1, 2)
            return code[1] == RET and code[0] in (POP_BP, LEAVE)
        return bool(self.memo(("epilogue", ip), compute))

    # -- calls -------------------------------------------------------------------------------
    def calls(self, start: int, end: int) -> set[int]:
        """Targets of the ``call rel32`` instructions in [start, end) (a byte scan: every e8 whose
        target is one we look for is a call in compiled code; a stray e8 inside another
        instruction only adds a target nobody asks about)."""
        code = self.memory.read(start, end - start) if end > start else b""
        out = set()
        for k in range(len(code) - 4):
            if code[k] == CALL_REL32:
                out.add((start + k + 5 + struct.unpack_from("<i", code, k + 1)[0]) & ((1 << 64) - 1))
        return out

    def call_before(self, ra: int) -> Insn | None:
        """The call instruction that ends exactly at return address ``ra`` (decoded), or None."""
        def compute():
            code = self.memory.read(ra - 8, 8)
            for size in (5, 2, 3, 6, 7, 4):  # call rel32 first, then indirect forms
                insn = self._decode_one(code[8 - size :], ra - size)
                if insn is not None and insn.size == size and insn.text.startswith("call"):
                    return insn
            return None
        return self.memo(("call_before", ra), compute)

    def callee(self, insn: Insn) -> str | None:
        """The function the direct call ``insn`` calls, by name: the function at its target, or,
        where the target is a PLT entry (``jmp *SLOT(%rip)``, after an ``endbr64`` in .plt.sec),
        the symbol its GOT slot's relocation names (read from the file: the bound slot is data,
        which a stop's snapshot need not hold).  None for an indirect call (the register or slot
        it used is gone) or a target nothing names."""
        m = _DIRECT_CALL.match(insn.text)
        if m is None:
            return None
        target = int(m.group(1), 16)

        def compute():
            for i in self.disassemble(target, target + 16, 2):
                if i.text == "endbr64":
                    continue
                jmp = _PLT_JMP.match(i.text)
                if jmp is None:
                    break
                e = self.space.elf_at(target)
                slot = i.addr + i.size + int(jmp.group(1), 16)
                return slot_symbol(e.image, e.link_address(slot)) if e is not None else None
            f = self.function_at(target)
            return f.name if f is not None else None
        return self.memo(("callee", target), compute)

    # -- rendering ---------------------------------------------------------------------------
    def _decode_one(self, code: bytes, addr: int) -> Insn | None:
        for i in self._cs.disasm(code, addr, 1):
            return Insn(i.address, i.size, f"{i.mnemonic} {i.op_str}".strip())
        return None

    def disassemble(self, start: int, end: int, limit: int = 16) -> list[Insn]:
        """Instructions from ``start`` up to ``end`` (at most ``limit``); empty where unreadable."""
        def compute():
            code = self.memory.read(start, max(0, end - start))
            return tuple(Insn(i.address, i.size, f"{i.mnemonic} {i.op_str}".strip())
                         for i in self._cs.disasm(code, start, limit))
        return list(self.memo(("disasm", start, end, limit), compute) or ())

    def prologue(self, f: Function, n: int = 6) -> list[Insn]:
        """The first ``n`` instructions of ``f``: the evidence of how (or whether) it sets up rbp."""
        return self.disassemble(f.start, f.start + min(f.size or 48, 48), n)

    # -- the stack pointer -------------------------------------------------------------------
    def sp_paths(self, f: Function, start: int, end: int) -> list[SpPath] | None:
        """What the code of ``f`` does to rsp on each path from ``start`` to ``end`` (both in
        ``f``), following its direct branches: one :class:`SpPath` per distinct outcome.

        A path may leave [start, end) and come back (Go's nanotime1: ``je`` to its syscall
        fallback after the function's ret, whose ``jmp`` rejoins it at the vDSO call's return).
        None where that cannot be told: ``f`` does not decode whole, it has an indirect ``jmp``
        (which may enter anywhere), a branch from code that ``start`` does not reach enters
        (start, end] (a path this walk does not see), or the paths do not settle (a loop that
        moves rsp)."""
        def compute():
            insns = self._decode_function(f)
            if insns is None or not f.start <= start <= end < f.end:
                return None
            at = {i.addr: k for k, i in enumerate(insns)}
            if start not in at or end not in at:
                return None
            succ: list[tuple[int, ...]] = []
            for k, i in enumerate(insns):
                nxt = insns[k + 1].addr if k + 1 < len(insns) else None
                m = _BRANCH.match(i.text)
                if m is None:
                    stops = i.text.split(" ")[0] in _NO_FALLTHROUGH
                    succ.append(() if stops or nxt is None else (nxt,))
                    continue
                if m.group(2) is None:
                    return None  # an indirect jmp: its targets are unknown
                target = int(m.group(2), 16)
                if m.group(1) == "jmp":
                    succ.append((target,))
                else:
                    succ.append((target, nxt) if nxt is not None else (target,))
            # What start reaches before it comes to end; a branch into (start, end] from any other
            # code is a way into the window that does not come from its start.
            reached, todo_r = set(), [start]
            while todo_r:
                addr = todo_r.pop()
                if addr in reached or addr == end or addr not in at:
                    continue
                reached.add(addr)
                todo_r += succ[at[addr]]
            for k, i in enumerate(insns):
                if i.addr not in reached and _BRANCH.match(i.text) and any(start < t <= end for t in succ[k]):
                    return None
            out: dict[tuple, SpPath] = {}
            todo = [(start, 0, 0, (), False)]
            seen = set()
            while todo:
                if len(seen) > SP_PATH_STATES:
                    return None
                addr, lo, hi, writes, loaded = todo.pop()
                if addr == end:
                    out.setdefault((loaded, lo, hi), SpPath(writes, None if loaded else (lo, hi)))
                    continue
                # not mutated (equivalent: "not in at" for "not in reached", as a path from start
                # meets only reached addresses before end, and leaves the function where not in at)
                if (addr, lo, hi, loaded) in seen or addr not in reached:  # pragma: no mutate
                    continue  # past the function's end
                seen.add((addr, lo, hi, loaded))
                k = at.get(addr)
                if k is None:
                    return None  # a branch into the middle of an instruction
                i = insns[k]
                move = _sp_move(i.text)
                if move is not None:
                    writes = (*writes, i)
                    if move == "load":
                        loaded, lo, hi = True, 0, 0  # whatever moves it after, it is another value
                    elif not loaded:
                        lo, hi = lo + move[0], hi + move[1]
                todo += [(a, lo, hi, writes, loaded) for a in succ[k]]
            return sorted(out.values(), key=lambda p: (p.delta is None, p.delta or (0, 0)))
        return self.memo(("sp_paths", f.start, start, end), compute)

    def insn_ending_at(self, f: Function, addr: int) -> Insn | None:
        """The instruction of ``f`` (decoded from its start) that ends at ``addr``: the call
        before a return address, prefixes and all (``addr32 call``), where :meth:`call_before`
        guesses from the bytes before it."""
        insns = self._decode_function(f)
        return next((i for i in insns or () if i.addr + i.size == addr), None)

    def _decode_function(self, f: Function) -> tuple[Insn, ...] | None:
        """Every instruction of ``f`` in order, or None where its bytes do not decode whole."""
        if not 0 < f.size <= MAX_DECODE:
            return None
        insns = tuple(self.disassemble(f.start, f.end, f.size))
        pos = f.start
        for i in insns:
            if i.addr != pos:
                return None
            pos += i.size
        return insns if pos == f.end else None


@dataclass(frozen=True)
class SpPath:
    """One outcome of :meth:`CodeFacts.sp_paths`: the instructions that wrote rsp on the way,
    and rsp at the end relative to the start, as the bounds ``(lo, hi)`` of the change; None
    where rsp was loaded from elsewhere (``mov rsp, ...``: a switch to another stack)."""

    writes: tuple[Insn, ...]
    delta: tuple[int, int] | None

    @property
    def moved(self) -> bool:
        """rsp at the end is not what it was at the start, whatever the values."""
        return self.delta is None or self.delta[1] < 0 or self.delta[0] > 0

    def __str__(self) -> str:
        what = ("rsp loaded from elsewhere" if self.delta is None else
                f"rsp {self.delta[0]:+#x}" if self.delta[0] == self.delta[1] else
                f"rsp {self.delta[0]:+#x}..{self.delta[1]:+#x}")
        return f"{'; '.join(i.text for i in self.writes) or 'no write of rsp'}: {what}"


def _imm(text: str) -> int | None:
    try:
        v = int(text, 16) if text.lstrip("-").startswith("0x") else int(text)
    except ValueError:
        return None
    return v - (1 << 64) if v >= 1 << 63 else v


def _sp_move(text: str) -> tuple[int, int] | str | None:
    """How an instruction changes rsp: ``(lo, hi)`` bounds of the change, "load" where it
    replaces rsp with another value, None where it does not write rsp (a call returns, so its
    push is undone)."""
    op, _, rest = text.partition(" ")
    if op == "push":
        return (-8, -8)
    if op == "pop":
        return "load" if rest == "rsp" else (8, 8)
    if op == "leave":
        return "load"
    if not rest.startswith("rsp, "):
        return None
    src = rest[len("rsp, "):]
    if op in ("cmp", "test"):
        return None
    if op in ("sub", "add") and (n := _imm(src)) is not None:
        n = -n if op == "sub" else n
        return (n, n)
    if op == "lea" and (m := _LEA_RSP.match(src)):
        n = _imm(m.group(2) or "0")
        n = -n if m.group(1) == "-" else n
        return (n, n)
    if op == "and" and (n := _imm(src)) is not None and n < 0 and (-n) & (-n - 1) == 0:
        return (n + 1, 0)  # aligned down: lowered by 0 .. alignment - 1
    return "load"


_BRANCH = re.compile(r"^(?:bnd |notrack )?(jmp|j[a-z]+|loop\w*)(?: (0x[0-9a-f]+)$|\b)")
_NO_FALLTHROUGH = ("ret", "retf", "hlt", "ud2", "int3", "jmp", "bnd", "notrack", "sysret", "iretq")
_LEA_RSP = re.compile(r"^\[rsp(?: ([+-]) (0x[0-9a-f]+|\d+))?\]$")
#: the largest function :meth:`CodeFacts.sp_paths` decodes, and the states its walk may visit
MAX_DECODE = 1 << 16
SP_PATH_STATES = 4096
