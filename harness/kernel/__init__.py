"""Kernel introspection without debug info: symbols from kallsyms, layouts from BTF.

Domain code: it reads guest memory only through a ``read(addr, size)`` callable and never
imports the transport.  What it knows of a kernel build is collected once in :class:`KernelInfo`
(cached per vmlinux hash by the session layer); what it reads at a stop is a :class:`TaskInfo`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..errors import HarnessError
from ..regs import PT_REGS_FIELDS, PT_REGS_SIZE, UserRegs

PF_EXITING = 0x00000004
PF_KTHREAD = 0x00200000
THREAD_SIZE = 16384  # x86-64 without KASAN (arch/x86/include/asm/page_64_types.h)
# TOP_OF_KERNEL_STACK_PADDING with CONFIG_X86_FRED (6.9+; 0 without): arch/x86/include/asm/thread_info.h
FRED_STACK_PADDING = 16

Read = Callable[[int, int], bytes]
MASK64 = (1 << 64) - 1


class KernelIntrospectionError(HarnessError):
    """A symbol, type or member the harness needs is missing from this kernel build."""


@dataclass(frozen=True)
class KernelInfo:
    """What the harness needs to know about one kernel build."""

    release: str
    symbols: Mapping[str, int]  # unique text/data symbols by name
    task_offsets: Mapping[str, int]  # task_struct member -> byte offset
    comm_len: int
    pt_regs_offsets: Mapping[str, int]
    current_task_sym: int  # address to add to gs_base to find `current_task`
    top_of_stack_sym: int | None
    thread_size: int = THREAD_SIZE
    stack_padding: int = 0  # TOP_OF_KERNEL_STACK_PADDING: FRED_STACK_PADDING or 0; see user_pt_regs_addr
    missing: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def build(cls, release: str, symbols: Mapping[str, int], btf) -> KernelInfo:
        """Collect offsets from ``btf`` (a :class:`harness.kernel.btf.Btf`) and per-CPU symbols."""

        def off(struct_name: str, member: str) -> int:
            try:
                return btf.member_offset(struct_name, member)
            except Exception as exc:
                raise KernelIntrospectionError(f"BTF has no {struct_name}.{member}: {exc}") from exc

        task = {m: off("task_struct", m) for m in ("pid", "tgid", "comm", "flags", "stack", "mm")}
        comm_len = btf.sizeof(btf.member("task_struct", "comm").type_id)
        if btf.sizeof("pt_regs") != PT_REGS_SIZE:
            raise KernelIntrospectionError(f"struct pt_regs is {btf.sizeof('pt_regs')} bytes, expected {PT_REGS_SIZE}")
        regs = {n: off("pt_regs", n) for n in PT_REGS_FIELDS}
        # current_task moved into struct pcpu_hot in 6.2 and back out again in 6.15.
        if "current_task" in symbols:
            cur = symbols["current_task"]
        elif "pcpu_hot" in symbols:
            cur = symbols["pcpu_hot"] + off("pcpu_hot", "current_task")
        else:
            raise KernelIntrospectionError("neither current_task nor pcpu_hot is in kallsyms")
        if "cpu_current_top_of_stack" in symbols:
            tos = symbols["cpu_current_top_of_stack"]
        elif "pcpu_hot" in symbols:
            tos = symbols["pcpu_hot"] + off("pcpu_hot", "top_of_stack")
        else:
            tos = None
        padding = FRED_STACK_PADDING if "asm_fred_entrypoint_user" in symbols else 0
        return cls(release, dict(symbols), task, comm_len, regs, cur, tos, stack_padding=padding)

    def sym(self, name: str) -> int:
        try:
            return self.symbols[name]
        except KeyError:
            raise KernelIntrospectionError(f"kernel {self.release} has no symbol {name}") from None


@dataclass(frozen=True)
class TaskInfo:
    addr: int
    pid: int
    tgid: int
    comm: str
    flags: int
    stack: int
    mm: int

    @property
    def kthread(self) -> bool:
        return bool(self.flags & PF_KTHREAD)

    @property
    def exiting(self) -> bool:
        return bool(self.flags & PF_EXITING)


def _u64(read: Read, addr: int) -> int:
    return struct.unpack("<Q", read(addr, 8))[0]


def current_task(info: KernelInfo, read: Read, gs_base: int) -> TaskInfo:
    """The task running on the stopped vCPU: ``*(gs_base + &current_task)`` (per-CPU variable).

    Since 6.15 per-CPU symbols are not zero-based: gs_base is then the CPU's offset from the
    per-CPU template, and the sum wraps around 2**64."""
    return read_task(info, read, _u64(read, (gs_base + info.current_task_sym) & MASK64))


def read_task(info: KernelInfo, read: Read, addr: int) -> TaskInfo:
    o = info.task_offsets
    lo = min(o.values())
    hi = max(o["comm"] + info.comm_len, *(v + 8 for v in o.values()))
    raw = read(addr + lo, hi - lo)

    def u(member: str, size: int = 8) -> int:
        return int.from_bytes(raw[o[member] - lo : o[member] - lo + size], "little")

    comm = raw[o["comm"] - lo : o["comm"] - lo + info.comm_len].split(b"\0", 1)[0].decode(errors="replace")
    return TaskInfo(addr, u("pid", 4), u("tgid", 4), comm, u("flags", 4), u("stack"), u("mm"))


def user_pt_regs_addr(info: KernelInfo, read: Read, task: TaskInfo, gs_base: int | None = None) -> int:
    """``task_pt_regs(task)``: the user registers saved at the top of the task's kernel stack,
    ``task->stack + THREAD_SIZE - TOP_OF_KERNEL_STACK_PADDING - sizeof(pt_regs)``.

    For the task current on the stopped vCPU (``gs_base`` given) the per-CPU top of stack says
    where that top is, padding included, and it is used when it agrees with the task's stack
    (it confirms the padding guessed from the symbols).  It does not agree inside
    ``__switch_to()``, between the writes of ``current_task`` and ``cpu_current_top_of_stack``:
    there it is still the previous task's, and an NMI landing in that window asks for the new
    task's registers, which the kernel takes from ``current->stack``, as done here."""
    own = task.stack + info.thread_size - info.stack_padding - PT_REGS_SIZE
    if gs_base is not None and info.top_of_stack_sym is not None:
        top = _u64(read, (gs_base + info.top_of_stack_sym) & MASK64)
        if top - task.stack in (info.thread_size, info.thread_size - FRED_STACK_PADDING):
            return top - PT_REGS_SIZE
    return own


def user_regs(info: KernelInfo, read: Read, task: TaskInfo, gs_base: int | None = None) -> UserRegs:
    addr = user_pt_regs_addr(info, read, task, gs_base)
    return UserRegs.from_pt_regs(read(addr, PT_REGS_SIZE), info.pt_regs_offsets)


# -- the task list (interactive sessions: harness shell, the gdb extension) --------------------------


@dataclass(frozen=True)
class TaskListInfo:
    """Offsets for walking every task: ``init_task.tasks`` links the thread-group leaders,
    ``signal->thread_head`` / ``task->thread_node`` each group's threads (both exist from 3.14)."""

    init_task: int
    tasks: int  # task_struct.tasks (struct list_head)
    signal: int  # task_struct.signal
    thread_node: int  # task_struct.thread_node
    thread_head: int  # signal_struct.thread_head
    cpu: int  # task_struct.thread_info.cpu (THREAD_INFO_IN_TASK, 5.16+) or task_struct.cpu
    on_cpu: int  # task_struct.on_cpu (int)
    state: int  # task_struct.__state (5.14+) or .state (unsigned int)
    pgd: int  # mm_struct.pgd
    fsbase: int  # task_struct.thread.fsbase: the thread pointer of a task that is not running

    @classmethod
    def build(cls, symbols: Mapping[str, int], btf) -> TaskListInfo:
        def off(t: str, *paths: str) -> int:
            for p in paths:
                try:
                    return btf.member_offset(t, p)
                except Exception:
                    continue
            raise KernelIntrospectionError(f"BTF has none of {t}.{'/'.join(paths)}")

        if "init_task" not in symbols:
            raise KernelIntrospectionError("init_task is not in kallsyms")
        return cls(symbols["init_task"], off("task_struct", "tasks"), off("task_struct", "signal"),
                   off("task_struct", "thread_node"), off("signal_struct", "thread_head"),
                   off("task_struct", "thread_info.cpu", "cpu"), off("task_struct", "on_cpu"),
                   off("task_struct", "__state", "state"), off("mm_struct", "pgd"),
                   off("task_struct", "thread.fsbase"))


def _list(read: Read, head: int, member: int, limit: int = 100000) -> list[int]:
    """The entries of a ``list_head`` at ``head``, as addresses of their containing structs."""
    out = []
    node = _u64(read, head)
    while node != head and node and len(out) < limit:
        out.append(node - member)
        node = _u64(read, node)
    return out


def task_addresses(info: KernelInfo, tl: TaskListInfo, read: Read) -> list[int]:
    """Every task (threads included), init_task (the idle task of CPU 0) first: ``for_each_process_thread``."""
    out = []
    for leader in [tl.init_task, *_list(read, tl.init_task + tl.tasks, tl.tasks)]:
        signal = _u64(read, leader + tl.signal)
        threads = _list(read, signal + tl.thread_head, tl.thread_node) if signal else []
        out.extend(threads if leader in threads else [leader, *threads])
    return out


def task_cpu(tl: TaskListInfo, read: Read, task: int) -> tuple[int, bool, int]:
    """(the CPU the task last ran on, whether it is on a CPU now, its ``__state``)."""
    def raw(off: int, n: int = 4) -> int:
        return int.from_bytes(read(task + off, n), "little")

    return raw(tl.cpu), bool(raw(tl.on_cpu)), raw(tl.state)


def mm_pgd(tl: TaskListInfo, read: Read, mm: int) -> int:
    """``mm->pgd``: the kernel virtual address of the task's top-level page table."""
    return _u64(read, mm + tl.pgd)
