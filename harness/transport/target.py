"""The narrow debugger-target interface, and what every implementation shares.

Two implementations sit behind it: :mod:`harness.transport.rsp` (a direct GDB Remote Serial
Protocol client: cheap, for automated runs) and :mod:`harness.transport.mi` (GDB/MI through
pygdbmi: the reference, and what interactive sessions use).  Both pass the same contract tests.

Shared here: stepping over a breakpoint before continuing (QEMU makes no progress on a plain
continue from a breakpoint address), partial reads that say where they stopped, and reads of
kernel memory through a software page walk of CR3 when the stop sits on user page tables (PTI).
"""

from __future__ import annotations

import struct
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..memory import MemoryFault
from .errors import TargetError, TargetTimeout

PAGE = 4096

# x86-64 page-table entry bits (Intel SDM vol. 3A, 4.5).
_PTE_PRESENT = 1 << 0
_PTE_PS = 1 << 7
_PTE_ADDR = 0x000F_FFFF_FFFF_F000
_CR4_LA57 = 1 << 12
ENDBR64 = b"\xf3\x0f\x1e\xfa"
NOP4 = b"\x0f\x1f\x40"  # nopl disp8(%rax): what the kernel seals an unused endbr64 into (0f 1f 40 d6)


SIGTRAP = 5  # a breakpoint's or a step's stop (an interrupt's is SIGINT, 2)


@dataclass(frozen=True)
class Stop:
    """Why and where the guest stopped: the vCPU (0-based) and its program counter."""

    cpu: int
    pc: int
    signal: int = SIGTRAP
    #: the guest already runs on from this stop (:meth:`Target.plan_continue`): what was read
    #: with its registers is all there is of it
    continued: bool = False


@dataclass(frozen=True)
class ReadResult:
    """A read that may have stopped early: ``data`` is what was readable from the start address,
    ``fault`` the first address that was not (None when the whole range was read)."""

    data: bytes
    fault: int | None = None


class Target(ABC):
    """A stopped-or-running guest seen through a debugger."""

    #: registers every implementation must provide by these names
    CORE_REGS = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
                 "r12", "r13", "r14", "r15", "rip", "eflags", "cs", "ss", "fs_base", "gs_base",
                 "k_gs_base", "cr3", "cr4")

    def __init__(self) -> None:
        self.breakpoints: set[int] = set()
        self.cpu = 0
        #: the vCPU that reported the last stop (implementations set it); the one to step over
        #: a breakpoint on resuming, whichever vCPU the caller has selected since
        self.stop_cpu: int | None = None
        #: True between a resume/continue and the stop that ends it
        self.running = False
        #: counts the times the guest was let run: memory read at one stop is valid until it changes
        self.generation = 0
        #: reads to take with the registers at every stop, ``stop_reads(cpu) -> [(addr, size)]``
        #: (the caller's guesses at what it will read there); an implementation that can
        #: pipeline them with its register read puts the answers in :attr:`stop_prefetch`
        self.stop_reads = None
        #: ``(generation, [((addr, size), ReadResult), ...])`` of the last stop's :attr:`stop_reads`
        self.stop_prefetch: tuple[int, list] | None = None
        #: ``whole_reads(addr, size) -> bool``: the range lies in memory mapped without holes (the
        #: kernel's direct map of RAM), so an implementation may read it in one packet across
        #: pages where it would cut other reads at each page (a read faults whole); None: none is
        self.whole_reads = None
        #: pc -> whether it holds endbr64 or the NOP it is sealed into (:meth:`_at_endbr`)
        self._endbr: dict[int, bool] = {}

    # -- primitives each implementation provides ----------------------------------------------
    @abstractmethod
    def _insert(self, addr: int) -> None: ...

    @abstractmethod
    def _remove(self, addr: int) -> None: ...

    @abstractmethod
    def _resume(self, step: bool, timeout: float) -> Stop:
        """Continue (or single-step the selected vCPU) and wait for the next stop."""

    @abstractmethod
    def _continue_nowait(self) -> None:
        """Continue all vCPUs and return at once; :meth:`wait_stop` or :meth:`interrupt` ends it."""

    @abstractmethod
    def _next_stop(self, deadline: float) -> Stop:
        """The stop that ends the current run, by ``deadline`` (time.monotonic()), else
        TargetTimeout with the guest still running."""

    def wait_stop(self, timeout: float) -> Stop:
        """Wait for the stop of a guest left running by :meth:`resume`.  Without one within
        ``timeout`` the guest is interrupted (it never runs on unwatched) and TargetTimeout raised."""
        if not self.running:
            raise TargetError("wait_stop: the guest is not running")
        try:
            return self._next_stop(time.monotonic() + timeout)
        except TargetTimeout:
            stop = self.interrupt()
            if stop.signal == SIGTRAP and stop.pc in self.breakpoints:
                # The stop came between the timeout and the interrupt (which QEMU ignores on a
                # stopped guest): it is the stop waited for, not a timeout.
                return stop
            raise TargetTimeout(f"no stop within {timeout:.1f}s (the guest was interrupted)") from None

    @abstractmethod
    def interrupt(self, timeout: float = 5.0) -> Stop:
        """Stop a running guest."""

    @abstractmethod
    def select_cpu(self, cpu: int) -> None: ...

    @abstractmethod
    def cpus(self) -> list[int]: ...

    @abstractmethod
    def read_registers(self) -> dict[str, int]:
        """Registers of the selected vCPU, by GDB name (``rip``, ``rsp``, ``cr3``, ...)."""

    @abstractmethod
    def write_register(self, name: str, value: int) -> None: ...

    @abstractmethod
    def _read_chunk(self, addr: int, size: int, physical: bool) -> bytes | None:
        """Read ``size`` bytes (at most one page) or return None when any of it is unreadable."""

    @abstractmethod
    def close(self) -> None: ...

    # -- shared behaviour ---------------------------------------------------------------------
    def set_breakpoint(self, addr: int) -> None:
        if addr not in self.breakpoints:
            self._insert(addr)
            self.breakpoints.add(addr)

    def remove_breakpoint(self, addr: int) -> None:
        if addr in self.breakpoints:
            self._remove(addr)
            self.breakpoints.discard(addr)

    def _insert_many(self, addrs: list[int]) -> None:
        for a in addrs:
            self._insert(a)

    def _remove_many(self, addrs: list[int]) -> None:
        for a in addrs:
            self._remove(a)

    def set_breakpoints(self, addrs) -> None:
        """:meth:`set_breakpoint` of each (an implementation may send them in one batch)."""
        new = [a for a in dict.fromkeys(addrs) if a not in self.breakpoints]
        if new:
            self._insert_many(new)
            self.breakpoints.update(new)

    def remove_breakpoints(self, addrs) -> None:
        """:meth:`remove_breakpoint` of each (an implementation may send them in one batch)."""
        old = [a for a in dict.fromkeys(addrs) if a in self.breakpoints]
        if old:
            self._remove_many(old)
            self.breakpoints.difference_update(old)

    def _leave_stop(self, timeout: float) -> tuple[int, Stop | None]:
        """Before the guest runs on: count a new generation, select the vCPU that stopped and,
        when it sits on one of our breakpoints, single-step it over with the breakpoint removed
        (QEMU would report the same stop again).  Returns (its pc, the step's stop or None)."""
        self.generation += 1
        self._select_stopped()
        pc = self.read_registers()["rip"]
        if pc not in self.breakpoints:
            return pc, None
        if self._at_endbr(pc):
            # endbr64 (TCG implements no CET) or the 4-byte NOP the kernel seals it into does
            # nothing: moving RIP past it is what executing it does, in one register write
            # instead of remove, step and insert.
            self.write_register("rip", pc + 4)
            return pc, None
        self._remove(pc)
        try:
            return pc, self._resume(step=True, timeout=timeout)
        finally:
            # The step's stop and the next are two stops: what was read at one (the
            # transport's stop reads, say) is not the other's.
            self.generation += 1
            self._insert(pc)

    def _at_endbr(self, pc: int) -> bool:
        """``pc`` holds ``endbr64`` or a 4-byte NOP (read once per address; QEMU's breakpoints
        do not show in memory)."""
        cache = self._endbr
        if pc not in cache:
            try:
                code = self.read_memory(pc, 4)
                cache[pc] = code == ENDBR64 or code[:3] == NOP4
            except (MemoryFault, TargetError):  # unreadable (PTI's user CR3): step over as usual
                return False
        return cache[pc]

    def cont(self, timeout: float) -> Stop:
        """Continue until the next stop."""
        pc, stepped = self._leave_stop(timeout)
        if stepped is not None and stepped.pc in self.breakpoints and stepped.pc != pc:
            return stepped  # the single step landed on another breakpoint
        return self._resume(step=False, timeout=timeout)

    def plan_continue(self, pc: int, arm: list[int]) -> bool:
        """Ask that the next stop, if it is a breakpoint stop at ``pc``, be left at once: its
        registers and :attr:`stop_reads` read, the breakpoints ``arm`` inserted and the guest
        continued, all in one write, before the caller has seen the stop (whose
        ``continued`` is then True).  Only where the stop cannot be anything else (``pc`` is
        the one breakpoint in) and leaving it needs no step (``pc`` holds endbr64: the
        continue moves RIP past it).  Returns whether the plan is taken; an implementation
        that cannot pipeline declines (the base)."""
        return False

    def stop_arrived(self) -> bool | None:
        """Whether a guest left running has stopped already; None where the transport cannot
        tell without waiting (ask QMP then)."""
        return None

    def cont_start(self, timeout: float) -> Stop | None:
        """:meth:`cont` in two halves: let the guest run and return at once (None), or return the
        stop when the step over the breakpoint already landed on another one; the caller works
        while the guest runs, then takes the stop with :meth:`wait_stop`."""
        pc, stepped = self._leave_stop(timeout)
        if stepped is not None and stepped.pc in self.breakpoints and stepped.pc != pc:
            return stepped
        self._continue_nowait()
        return None

    def resume(self) -> None:
        """Let the guest run (e.g. while the harness talks to /init on the console) without
        waiting for a stop."""
        self._leave_stop(5.0)
        self._continue_nowait()

    def _select_stopped(self) -> None:
        """Resume from the vCPU that stopped: after a stop the caller may have selected another
        vCPU to read it, and checking only the selected one for a breakpoint would continue the
        stopped one in place (the same stop, forever)."""
        if self.stop_cpu is not None and self.stop_cpu != self.cpu:
            self.select_cpu(self.stop_cpu)

    def step(self, timeout: float = 5.0) -> Stop:
        self.generation += 1
        pc = self.read_registers()["rip"]
        if pc in self.breakpoints:
            self._remove(pc)
            try:
                return self._resume(step=True, timeout=timeout)
            finally:
                self._insert(pc)
        return self._resume(step=True, timeout=timeout)

    def read_partial(self, addr: int, size: int, physical: bool = False) -> ReadResult:
        """Read up to ``size`` bytes; stop at the first unreadable page and say where."""
        out = bytearray()
        cur = addr
        end = addr + size
        while cur < end:
            n = min(end - cur, PAGE - (cur % PAGE))
            chunk = self._read_chunk(cur, n, physical)
            if chunk is None:
                return ReadResult(bytes(out), cur)
            out += chunk
            cur += n
        return ReadResult(bytes(out))

    def read_many(self, ranges: list[tuple[int, int]]) -> list[ReadResult]:
        """:meth:`read_partial` of each ``(addr, size)`` (virtual addresses); an implementation
        may send them all before it waits for the first answer (one round trip, not one each)."""
        return [self.read_partial(a, n) for a, n in ranges]

    def read_memory(self, addr: int, size: int, physical: bool = False) -> bytes:
        """Read exactly ``size`` bytes or raise :class:`~harness.memory.MemoryFault`."""
        r = self.read_partial(addr, size, physical)
        if r.fault is not None:
            raise MemoryFault(r.fault)
        return r.data

    def read_u64(self, addr: int) -> int:
        return struct.unpack("<Q", self.read_memory(addr, 8))[0]

    # -- PTI: kernel memory through a page walk ------------------------------------------------
    def translate(self, vaddr: int, cr3: int, la57: bool) -> int | None:
        """Walk the page tables rooted at ``cr3`` (PCID and PTI bits are masked by the caller)
        and return the physical address of ``vaddr``, or None if it is not mapped."""
        levels = (48, 39, 30, 21, 12) if la57 else (39, 30, 21, 12)
        table = cr3 & _PTE_ADDR
        for depth, shift in enumerate(levels):
            index = (vaddr >> shift) & 0x1FF
            raw = self._read_chunk(table + index * 8, 8, True)
            if raw is None:
                return None
            entry = struct.unpack("<Q", raw)[0]
            if not entry & _PTE_PRESENT:
                return None
            last = depth == len(levels) - 1
            if last or (shift in (30, 21) and entry & _PTE_PS):
                base = entry & _PTE_ADDR & ~((1 << shift) - 1)
                return base | (vaddr & ((1 << shift) - 1))
            table = entry & _PTE_ADDR
        return None

    def read_kernel(self, vaddr: int, size: int, regs: dict[str, int] | None = None) -> bytes:
        """Read kernel memory even when the stop sits on PTI's user page tables: try a plain
        virtual read first, then walk the kernel half of CR3 (``cr3 & ~0x1fff``)."""
        r = self.read_partial(vaddr, size)
        if r.fault is None:
            return r.data
        regs = regs or self.read_registers()
        cr3 = regs["cr3"] & ~0x1FFF & _PTE_ADDR
        la57 = bool(regs.get("cr4", 0) & _CR4_LA57)
        out = bytearray()
        cur, end = vaddr, vaddr + size
        while cur < end:
            n = min(end - cur, PAGE - (cur % PAGE))
            phys = self.translate(cur, cr3, la57)
            chunk = self._read_chunk(phys, n, True) if phys is not None else None
            if chunk is None:
                raise MemoryFault(cur, f"kernel address {cur:#x} is not mapped under CR3 {cr3:#x}")
            out += chunk
            cur += n
        return bytes(out)


class TargetMemory:
    """Adapts a target to the domain's ``Memory.read`` interface (harness.memory).

    Pages read at one stop are kept until the guest runs again (``Target.generation``): the
    unwinder, the CFI oracle and the shadow-stack reader all walk the same stack pages at a
    delivery, and each page costs two ``m`` round trips."""

    def __init__(self, target: Target):
        self.target = target
        self._generation = -1
        self._pages: dict[int, ReadResult] = {}

    def _page(self, base: int) -> ReadResult:
        if self._generation != self.target.generation:
            self._pages.clear()
            self._generation = self.target.generation
        r = self._pages.get(base)
        if r is None:
            r = self._pages[base] = self.target.read_partial(base, PAGE)
        return r

    def read(self, addr: int, size: int) -> bytes:
        out = bytearray()
        cur, end = addr, addr + size
        while cur < end:
            base = cur - cur % PAGE
            page = self._page(base)
            lo, hi = cur - base, min(end - base, PAGE)
            if hi > len(page.data):
                raise MemoryFault(base + max(lo, len(page.data)))
            out += page.data[lo:hi]
            cur = base + hi
        return bytes(out)


__all__ = ["Stop", "ReadResult", "Target", "TargetMemory", "TargetError", "PAGE"]
