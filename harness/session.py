"""A booted guest with a debugger attached and its kernel understood: the platform in one call.

This is the orchestration layer: it owns the images, the QEMU machine and the debugger target,
and hands the domain code (kernel introspection, unwinder, deferred model) plain values and a
``read(addr, size)`` callable.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import HarnessError
from .images.cache import cache_root
from .images.initramfs import build_initramfs
from .images.kernel import Kernel, KernelInputError, check_kernel_choice, get_kernel
from .images.lock import cache_lock, write_atomic
from .images.programs import Program, Variant, build_program, user_program
from .images.qemu import NO_FLUSH_VERSION, Qemu, resolve_qemu
from .images.toolchain import get_toolchain
from .kernel import MASK64, KernelInfo, TaskInfo, current_task, user_regs
from .kernel.btf import Btf
from .kernel.kallsyms import Kallsyms
from .kernel.stops import StopPoint, StopPoints, find_stop_points
from .memory import MemoryFault
from .progress import note, step
from .regs import PT_REGS_SIZE, UserRegs
from .transport import make_target
from .transport.affinity import claim_cpus, pin_apart, stub_first
from .transport.errors import (
    GuestDied,
    GuestError,
    GuestPanic,
    GuestTimeout,
    PinError,
    QemuStartError,
    StopLeft,
    TargetDied,
    TargetError,
    TargetTimeout,
)
from .transport.qemu import Machine, MachineConfig, kvm_usable
from .transport.target import ReadResult, Target

#: bytes of :attr:`Session.expected_reads` read with the registers at one stop, at most (a few
#: pages of hex on the socket cost less than the round trip they save; a run with many tasks
#: pending would otherwise read all their stacks at every stop)
EXPECTED_READS_MAX = 16 * 1024
#: how many recent values of a pt_regs-pointing register a vCPU's stop guesses keep
POINTERS_KEPT = 3
#: page_offset_base where the kernel has no such variable (no KASLR of its memory layout)
DIRECT_MAP = 0xFFFF_8880_0000_0000


#: the most vCPUs a guest gets: TCG runs them all on this machine's cores, and a request point
#: (an NMI, a timer interrupt, a syscall) only helps on a vCPU the program runs on
MAX_SMP = 16
#: the machine's pin lock under the cache (transport/affinity.py: claim_cpus)
PIN_LOCK = "pin.lock"
#: the least guest RAM that boots the kernels the harness uses with its initramfs
MEMORY_FLOOR_MB = 128


class GuestSpecError(HarnessError):
    """A guest that cannot work as asked (more vCPUs than :data:`MAX_SMP`, too little RAM): bad
    usage, found before anything is built or booted (exit 2, one line)."""

    exit_code = 2


@dataclass
class GuestSpec:
    kernel: str = "default"
    kernel_path: str | None = None
    smp: int = 1
    accel: str = "auto"  # auto | tcg | kvm
    pti: bool = False
    transport: str = "rsp"  # rsp | mi
    programs: list[tuple[str, str, Variant]] = field(default_factory=list)  # (source, toolchain, variant)
    user_programs: list[str] = field(default_factory=list)  # paths of users' own binaries
    #: "host" (Debian 12's), "backports" (11.x), "auto", a command prefix, or None for
    #: $HARNESS_QEMU / the default (harness/images/qemu.py)
    qemu: str | list[str] | None = None
    #: guest RAM in MiB; None: :func:`guest_memory_mb` of the initramfs (``--mem``)
    memory_mb: int | None = None
    #: libraries the user programs dlopen (``--lib``): copied in with theirs, at their own path
    libs: list[str] = field(default_factory=list)
    #: more files for the initramfs, guest path -> host path (Debian's perf: harness/images/debperf.py)
    extra_files: dict[str, Path] = field(default_factory=dict)
    #: QEMU's vCPU threads on CPUs of their own, the harness and QEMU's main loop on the last
    #: one (harness/transport/affinity.py); None: only if no other harness on this machine is
    #: (the commands' default, Session._pin)
    pin: bool | None = False
    #: QEMU's main loop at SCHED_FIFO (harness/transport/affinity.py: stub_first)
    rt: bool = False

    def check(self) -> None:
        """:class:`GuestSpecError` when this guest cannot work as asked, and the kernel's
        :class:`KernelInputError` when it cannot be had (before any boot or download)."""
        check_kernel_choice(self.kernel, self.kernel_path)
        if not 1 <= self.smp <= MAX_SMP:
            raise GuestSpecError(f"--smp {self.smp}: between 1 and {MAX_SMP} vCPUs")
        if self.memory_mb is not None and self.memory_mb < MEMORY_FLOOR_MB:
            raise GuestSpecError(f"--mem {self.memory_mb}: at least {MEMORY_FLOOR_MB} MiB")
        # A user's binary is /user/NAME in the guest: two files of one name would be one program
        # there (the second silently in place of the first, which no scenario could then find).
        seen: dict[str, Path] = {}
        for p in self.user_programs:
            path = Path(p).resolve()
            first = seen.setdefault(path.name, path)
            if first != path:
                raise GuestSpecError(f"user programs {first} and {path} would both be /user/{path.name} in the "
                                     f"guest: give them different file names")


#: the smallest default guest: the 7.x cloud kernel with the harness's programs and Debian's perf
MEMORY_MIN_MB = 512
#: above the initramfs's share: the kernel's own (~100 MiB on the cloud kernel) and the program's
#: heap, page cache and stack
MEMORY_MARGIN_MB = 256


def guest_memory_mb(initrd_bytes: int) -> int:
    """The default guest RAM for an initramfs of ``initrd_bytes``: the kernel unpacks the archive
    into its rootfs (page cache that is never written back: RAM) while the archive itself is still
    in memory, so the initramfs costs twice its size until the archive is freed; plus a margin
    for the kernel and the program.  At least :data:`MEMORY_MIN_MB`, rounded up to 64 MiB.  A
    fixed default does not fit both a guest of the catalog's small programs and one of a user's
    program with its libraries (a C++ or Rust program with libstdc++, a Go binary of tens of MB:
    Debian's own tools' closures run to 5-30 MiB, twice that in the guest)."""
    need = 2 * -(-initrd_bytes // (1 << 20)) + MEMORY_MARGIN_MB
    return max(MEMORY_MIN_MB, -(-need // 64) * 64)


def resolve_accel(spec: GuestSpec, kernel: Kernel, qemu: Qemu | None = None) -> tuple[str, str]:
    """(accelerator, why).  The KVM probe's verdict is cached per host kernel, QEMU and guest."""
    if spec.accel in ("tcg", "kvm"):
        return spec.accel, f"--accel {spec.accel} was asked for"
    qemu = qemu or resolve_qemu(spec.qemu)
    key = f"{platform.release()}|{qemu.banner}|{kernel.sha256}"
    memo_path = cache_root() / "kvm-probe.json"
    memo = json.loads(memo_path.read_text()) if memo_path.exists() else {}
    if key not in memo:
        # Read, probe and write under the memo's lock: two harnesses add their keys in turn.
        with cache_lock(cache_root() / ".kvm-probe.lock", "another harness's KVM probe", topic="guest"):
            memo = json.loads(memo_path.read_text()) if memo_path.exists() else {}
            if key not in memo:
                with step("guest", f"probing whether KVM boots {kernel.release or kernel.package}") as st:
                    ok, why = kvm_usable(list(qemu.prefix), kernel.vmlinux)
                    st.end(f"KVM probe: {'usable' if ok else 'not usable'} ({st.elapsed:.1f}s)")
                memo[key] = [ok, why]
                write_atomic(memo_path, json.dumps(memo, indent=1))
    ok, why = memo[key]
    if not ok:
        note("guest", f"using TCG: {why}")
    return ("kvm" if ok else "tcg"), why


def kallsyms_path(kernel: Kernel) -> Path:
    """Where a kernel build's /proc/kallsyms is cached (:func:`kernel_symbols`)."""
    return cache_root() / "kallsyms" / f"{kernel.sha256}.txt"


def dump_kallsyms(machine: Machine, path: str = "/proc/kallsyms") -> str:
    """The guest kernel's symbol table as text (``path`` only differs in tests), or a one-line
    :class:`KernelInputError` where the kernel has none to give: a user's kernel built without
    CONFIG_KALLSYMS, whose missing file would otherwise be a failed gzip in the guest."""
    if machine.shell(f"test -r {path}") != 0:
        raise KernelInputError(f"the guest kernel has no {path} (built without CONFIG_KALLSYMS?): the harness "
                               "finds the kernel's stop points and symbols through it")
    text = machine.dump(path, packed=True).decode()
    if not text.strip():
        raise KernelInputError(f"the guest kernel's {path} is empty: the harness finds the kernel's stop points "
                               "and symbols through it")
    return text


def kernel_symbols(machine: Machine, kernel: Kernel) -> Kallsyms:
    """The guest's /proc/kallsyms, dumped once per kernel build (about 20 s on TCG) and cached."""
    path = kallsyms_path(kernel)
    if not path.exists():
        # One harness dumps, another booted on the same kernel waits and reads its dump.
        with cache_lock(path.parent / f".{kernel.sha256}.lock",
                        f"another harness dumping /proc/kallsyms of {kernel.release or kernel.package}", topic="guest"):
            if not path.exists():
                with step("guest", f"dumping /proc/kallsyms of {kernel.release or kernel.package} "
                                   f"(once per kernel build)") as st:
                    text = dump_kallsyms(machine)
                    st.end(f"dumped /proc/kallsyms ({len(text) / 1e6:.1f} MB) in {st.elapsed:.1f}s")
                write_atomic(path, text)
    return Kallsyms.parse(path.read_text())


class Session:
    def __init__(self, spec: GuestSpec):
        self.spec = spec
        self.kernel: Kernel | None = None
        self.machine: Machine | None = None
        self.target: Target | None = None
        self.info: KernelInfo | None = None
        self.stops: StopPoints | None = None
        self.symbols: Kallsyms | None = None
        self.btf: Btf | None = None
        self.programs: dict[str, Program] = {}
        self.accel = ""
        self.accel_why = ""
        self.memory_mb = 0  # the guest's RAM in MiB, once started
        self.qemu: Qemu | None = None
        # Kernel bytes read at the current stop (Target.generation): pipelined prefetches and the
        # reads they answer.  Kernel memory does not change while the guest is stopped.
        self._kcache: list[tuple[int, bytes]] = []
        self._kgen = -1
        #: per vCPU, what its last stop read: its per-CPU base, the current task and the top of
        #: its stack, and the pt_regs each kind of stop point's register pointed at
        self._last_stop: dict[int, tuple[int, int | None, int | None, dict[str, tuple[int, ...]]]] = {}
        #: user memory a coming stop will most likely read, by key (the engine's guess at the
        #: snapshot of a task with pending work): read with the registers at every stop until
        #: its key is dropped (:meth:`read_many` takes it from there)
        self.expected_reads: dict[object, list[tuple[int, int]]] = {}
        #: the registers (a StopPoint's ``regs``) of the points the next stop can be at, where
        #: the engine knows them (None: any point): the places only other points' registers
        #: pointed at are not guessed (a return stop reads no NMI stack: :meth:`_stop_guesses`)
        self.stop_regs: frozenset[str] | None = None
        #: what --pin did, in words ("" unpinned), and its undo
        self.pinned = ""
        #: what --rt did, in words ("" without it)
        self.realtime = ""
        self._unpin = None
        self._pin_lock: int | None = None  # the machine's pin lock, held while pinned (claim_cpus)
        #: why the session is not pinned, in words ("" when it is, or when --no-pin said so)
        self.unpinned = ""

    def start(self) -> Session:
        spec = self.spec
        spec.check()
        self.kernel = get_kernel(spec.kernel, spec.kernel_path)
        # Read from the vmlinux, before any probe or boot: a kernel built without BTF (a user's
        # --kernel-path) is refused in a second, with the one line that says so.
        btf = self.btf = Btf.from_elf(self.kernel.vmlinux)
        for source, tc_name, variant in spec.programs:
            p = build_program(source, get_toolchain(tc_name), variant)
            self.programs[p.guest_path] = p
        for path in spec.user_programs:
            p = user_program(path, tuple(spec.libs))
            self.programs[p.guest_path] = p
        initrd = build_initramfs(list(self.programs.values()), spec.extra_files)
        self.qemu = resolve_qemu(spec.qemu)
        self.accel, self.accel_why = resolve_accel(spec, self.kernel, self.qemu)
        self.memory_mb = spec.memory_mb or guest_memory_mb(initrd.stat().st_size)
        cfg = MachineConfig(self.kernel.vmlinux, initrd, smp=spec.smp, accel=self.accel, pti=spec.pti,
                            qemu=list(self.qemu.prefix), memory_mb=self.memory_mb)
        self.machine = Machine(cfg)
        stage = "before the guest was ready"  # where a boot that loses QEMU was (QemuStartError)
        try:
            vcpus = f"{spec.smp} vCPU{'s' if spec.smp > 1 else ''}"
            with step("guest", f"booting {self.kernel.release or self.kernel.name} ({self.accel}, {vcpus})") as st:
                self.machine.start()
                st.end(f"{self.machine.release} ready in {self.machine.boot_seconds:.1f}s "
                       f"({self.accel}, {vcpus})")
            stage = "while the harness read the guest kernel's symbols"
            self.symbols = kernel_symbols(self.machine, self.kernel)
            self.info = KernelInfo.build(self.machine.release, self.symbols.unique(), btf)
            if spec.pin is not False:
                self._pin(spec.pin is None)
            if spec.rt:
                self.realtime = stub_first(self.machine.pid)
                note("guest", self.realtime)
            stage = "while the debugger attached"
            self.target = make_target(spec.transport, self.machine.gdb_socket)
            self.target.stop_reads = self._stop_guesses
            self.target.whole_reads = self._in_direct_map(self._direct_map_base())
            stage = "while the harness found the kernel's stop points"
            self.stops = find_stop_points(self.info, self.target.read_kernel, self.symbols.next_symbol_address)
        except QemuStartError:
            self.close()
            raise
        except (GuestError, TargetError, OSError) as exc:
            # QEMU gone (a signal, its own exit) is named as such, with the step it broke, not as
            # the read or the connection that failed with it; asked before close(), which ends QEMU.
            gone = self.machine.ended_during_boot(exc, stage)
            tail = self.machine.console.tail() if self.machine.console is not None else []
            self.close()
            if gone is not None:
                raise QemuStartError(gone, tail) from exc
            raise
        except BaseException:
            self.close()
            raise
        return self

    def _pin(self, auto: bool) -> None:
        """``--pin`` (``auto``: the default of the commands): QEMU's vCPU threads apart from the
        harness (transport/affinity.py).  The machine's pin lock says whether another harness is
        pinned already: then auto leaves this one where the scheduler puts it, and ``--pin`` pins
        anyway, saying so; auto that cannot pin (a QEMU that does not name its vCPU threads)
        runs unpinned with the reason, where ``--pin`` raises the PinError.  Auto pins on a QEMU
        that keeps its translated code over a stop (NO_FLUSH_VERSION) only: on 7.2, which
        retranslates after every stop, bench deferred (quiet, 2026-12-07) gave 100-128 traces/s
        pinned against 128-209 unpinned; on 11.1, 524-583 pinned against 368-541.  Why it is not
        pinned goes into :attr:`unpinned`."""
        version = self.qemu.version if self.qemu is not None else None
        if auto and (version is None or version < NO_FLUSH_VERSION):
            self._not_pinned(f"QEMU {'.'.join(map(str, version or ())) or '(version unknown)'} flushes its "
                             "translated code at every stop, where pinning is slower (--pin pins)")
            return
        self._pin_lock = claim_cpus(cache_root() / PIN_LOCK)
        if self._pin_lock is None and auto:
            self._not_pinned("another harness on this machine is (--pin pins this one too)")
            return
        try:
            self.pinned, self._unpin = pin_apart(self.machine.pid)
        except PinError as exc:
            if self._pin_lock is not None:  # not pinned after all: the next harness may pin
                os.close(self._pin_lock)
                self._pin_lock = None
            if not auto:
                raise
            self._not_pinned(str(exc))
            return
        if self._pin_lock is None:
            self.pinned += " (another harness on this machine is pinned as well: they share its CPU)"
        note("guest", self.pinned)

    def _not_pinned(self, why: str) -> None:
        self.unpinned = f"not pinned: {why}"
        note("guest", self.unpinned)

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._unpin is not None:
            self._unpin()
            self._unpin = None
        if self._pin_lock is not None:
            os.close(self._pin_lock)
            self._pin_lock = None
        if self.target is not None:
            try:
                self.target.close()
            except Exception:
                pass
            self.target = None
        if self.machine is not None:
            self.machine.close()

    def machine_lost(self, exc: BaseException, settle: float = 2.0) -> str | None:
        """After ``exc`` (a guest or debugger error), one line naming why this guest cannot go on,
        or None where it can (a refused or malformed reply: the guest itself is fine).  Whatever
        the error's own words (a broken pipe, a reset connection), the cause named is the
        machine's: QEMU killed by a signal or exited, the guest kernel panicked, QEMU stopped
        (SIGSTOP), or the guest or its gdb stub silent past the bound.  ``settle``: how long a
        connection that died may wait for QEMU's exit to show (the sockets close a moment
        before the process is gone)."""
        m = self.machine
        if m is None:
            return None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        died = isinstance(exc, (GuestDied, GuestPanic, TargetDied))
        deadline = time.monotonic() + (settle if died else 0.0)
        while m.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        gone = m.exit_cause()
        panic = m.console.panic if m.console is not None else None
        if panic:
            return f"the guest kernel failed: {panic}" + (f" (QEMU {gone})" if gone else "")
        if gone:
            return f"QEMU {gone}"
        state = m.process_state()
        if state in ("T", "t"):
            by = "SIGSTOP or a job-control signal" if state == "T" else "a tracer"
            return f"QEMU (pid {m.pid}) is stopped ({by}) and answers nothing: {first}"
        if isinstance(exc, (TargetTimeout, GuestTimeout)):
            return f"the guest stopped answering: {first}"
        if died:
            return f"the guest's connection is gone: {first}"
        return None

    def describe(self) -> dict:
        """What this run ran on: recorded with every run's results."""
        return {
            "kernel": self.kernel.describe() if self.kernel else None,
            "release": self.machine.release if self.machine else None,
            "qemu": self.qemu.banner if self.qemu else None,
            "qemu_image": self.qemu.describe() if self.qemu else None,
            "accel": self.accel,
            "accel_why": self.accel_why,
            "pinned": self.pinned,
            "realtime": self.realtime,
            "smp": self.spec.smp,
            "memory_mb": self.memory_mb,
            "pti": self.spec.pti,
            "transport": self.spec.transport,
            "python": sys.version.split()[0],
            "programs": {g: {"toolchain": p.toolchain, "variant": p.variant.tag} for g, p in self.programs.items()},
            "missing_stop_points": dict(self.stops.missing) if self.stops else {},
        }

    def program(self, source: str, toolchain: str = "host", variant: Variant = Variant()) -> Program:
        for p in self.programs.values():
            if p.name == source and p.toolchain == toolchain and p.variant == variant:
                return p
        raise KeyError(f"{source} [{variant.tag}] with {toolchain} is not in this guest's initramfs")

    def run_program(self, argv: list[str], output=None):
        """Start a guest program; the guest runs while /init answers, then stops again.  Its
        stdout and stderr go to the host file ``output`` (by default one in the machine's
        private directory: :meth:`harness.transport.qemu.Machine.run`)."""
        stopped = self.target is not None and not self.target.running
        if stopped:
            self.target.resume()
        try:
            return self.machine.run(argv, output=output)
        finally:
            if stopped:
                self.target.interrupt()

    # -- reading the stopped guest -------------------------------------------------------------
    def read(self, addr: int, size: int) -> bytes:
        """Kernel or user memory of the stopped vCPU (kernel reads survive PTI's user CR3).  At
        a stop the guest has left already (Target.plan_continue) only what the transport read
        with its registers is there: anything else is StopLeft."""
        found = self._from_cache(addr, size)
        if found is not None:
            return found
        if self.target.running:
            raise StopLeft(f"{size} bytes at {addr:#x} were not read with the stop's registers, "
                           f"and the guest runs on from that stop")
        return self.target.read_kernel(addr, size)

    def _from_cache(self, addr: int, size: int) -> bytes | None:
        """``size`` bytes at ``addr`` from what this stop has read already, or None."""
        self._adopt_stop_reads()
        for base, data in self._kcache:
            if base <= addr and addr + size <= base + len(data):
                return data[addr - base:addr - base + size]
        return None

    def _prefetch(self, ranges: list[tuple[int, int]]) -> None:
        ranges = [r for r in ranges if self._from_cache(*r) is None]
        if ranges and not self.target.running:  # running: the reads that need them say so
            self._keep(zip(ranges, self.target.read_many(ranges), strict=True))

    def _keep(self, results) -> None:
        for (addr, _), r in results:
            if r.fault is None:
                self._kcache.append((addr, r.data))

    def _adopt_stop_reads(self) -> None:
        """Start this stop's cache (a new generation) with what the transport read with the
        registers (:meth:`_stop_guesses`)."""
        if self._kgen == self.target.generation:
            return
        self._kcache = []
        self._kgen = self.target.generation
        self._keep(self._stop_results())

    def _stop_results(self) -> list:
        """``[((addr, size), ReadResult), ...]`` the transport read with this stop's registers."""
        got = self.target.stop_prefetch
        return got[1] if got is not None and got[0] == self.target.generation else []

    def _layout(self) -> tuple[int, int]:
        """The span of ``struct task_struct`` that :func:`current_task` reads."""
        o = self.info.task_offsets
        lo = min(o.values())
        return lo, max(o["comm"] + self.info.comm_len, *(v + 8 for v in o.values()))

    def _direct_map_base(self) -> int:
        """Where the kernel maps all of RAM (page_offset_base, or its default without KASLR)."""
        sym = self.info.symbols.get("page_offset_base")
        if sym is None:
            return DIRECT_MAP
        return int.from_bytes(self.target.read_kernel(sym, 8), "little")

    def _in_direct_map(self, base: int):
        """``whole_reads`` for the target: a range within the kernel's direct map of the guest's
        RAM (``memory_mb``: one hole-free span below 3 GiB) reads whole across pages, so a
        task_struct that crosses a page is one packet at each stop, not two."""
        end = base + (min(self.memory_mb, 3072) << 20)  # (above 3 GiB: PCI's hole, then RAM again)
        return lambda addr, size: base <= addr and addr + size <= end

    def _stop_guesses(self, cpu: int) -> list[tuple[int, int]]:
        """What :meth:`prefetch_stop` will most likely read at a stop of ``cpu``: what it read
        at that vCPU's last stop.  The transport reads it with the registers (one round trip);
        :meth:`prefetch_stop` checks each guess against the registers and reads what missed."""
        out = []
        last = self._last_stop.get(cpu)
        if last is not None and self.info is not None:
            gs, task, top, pointers = last
            out.append(((gs + self.info.current_task_sym) & MASK64, 8))
            if self.info.top_of_stack_sym is not None:
                out.append(((gs + self.info.top_of_stack_sym) & MASK64, 8))
            if task is not None:
                lo, hi = self._layout()
                out.append((task + lo, hi - lo))
            mine = None
            if top is not None:
                mine = top - PT_REGS_SIZE
                out.append((mine, PT_REGS_SIZE))
            size = self.info.thread_size
            # Not a place a register pointed at that lies where the user pt_regs of another
            # task's stack lie (an NMI that once hit that task in user mode): it is needed only
            # where the stop caught that task again, and then the task_struct guess misses too
            # (a stop left at once is passed over, another reads both in its next batch).  One
            # packet a stop fewer in bench deferred: the vCPU's other task, kept at every stop.
            regs = self.stop_regs
            out += [(a, PT_REGS_SIZE) for reg, seen in pointers.items() if regs is None or reg in regs
                    for a in seen if mine is None or a == mine or (a - mine) % size]
        budget = EXPECTED_READS_MAX
        for ranges in self.expected_reads.values():
            budget -= sum(n for _, n in ranges)
            if budget < 0:
                break
            out += ranges
        # Once each: a task's pt_regs at its stack top is also where the stop point's register
        # pointed when the NMI hit user mode (the same 168 bytes three times, 4 packets a trace).
        return list(dict.fromkeys(out))

    def read_many(self, ranges: list[tuple[int, int]]) -> list[ReadResult]:
        """``target.read_many(ranges)`` at this stop, each range the transport already read
        with the stop's registers (:attr:`expected_reads`) taken from there."""
        have = dict(self._stop_results())
        missing = [r for r in dict.fromkeys(ranges) if r not in have]
        if missing:
            have.update(zip(missing, self.target.read_many(missing), strict=True))
        return [have[r] for r in ranges]

    def prefetch_stop(self, point: StopPoint | None = None) -> None:
        """Read what :meth:`current`, :meth:`regs_at` and :meth:`task_user_regs` will read at
        this stop (the per-CPU current task and top of stack, the pt_regs a register points at;
        then the task and its user pt_regs) in pipelined batches, not a round trip each.  The
        transport has read the last stop's addresses with the registers already: a batch is
        only needed for what changed.  Reads that fault here are left to those calls (PTI's
        page walk)."""
        info = self.info
        regs = self.target.read_registers()
        gs = regs["gs_base"]
        cur = (gs + info.current_task_sym) & MASK64
        first = [(cur, 8)]
        tos = None
        if info.top_of_stack_sym is not None:
            tos = (gs + info.top_of_stack_sym) & MASK64
            first.append((tos, 8))
        cpu = self.target.cpu
        pointers = dict(self._last_stop.get(cpu, (0, None, None, {}))[3])
        if point is not None and point.regs in ("rdi", "rsp"):
            addr = regs[point.regs]
            first.append((addr, PT_REGS_SIZE))
            # The last few places a register pointed at: an NMI's pt_regs lie on the NMI stack
            # when it hit the kernel and at the task's stack top when it hit user mode.
            seen = pointers.get(point.regs, ())
            pointers[point.regs] = (addr, *(a for a in seen if a != addr))[:POINTERS_KEPT]
        self._prefetch(first)
        task = top = None
        try:
            task = int.from_bytes(self.read(cur, 8), "little")
            lo, hi = self._layout()
            second = [(task + lo, hi - lo)]
            if tos is not None:
                top = int.from_bytes(self.read(tos, 8), "little")
                second.append((top - PT_REGS_SIZE, PT_REGS_SIZE))
        except (MemoryFault, TargetError):  # a prefetch only saves round trips; the reads say what failed
            return
        finally:
            self._last_stop[cpu] = (gs, task, top, pointers)
        self._prefetch(second)

    def current(self) -> TaskInfo:
        regs = self.target.read_registers()
        return current_task(self.info, self.read, regs["gs_base"])

    def task_user_regs(self, task: TaskInfo) -> UserRegs:
        """The user registers of ``task``, which must be current on the stopped vCPU."""
        return user_regs(self.info, self.read, task, self.target.read_registers()["gs_base"])

    def regs_at(self, point: StopPoint) -> UserRegs:
        """The ``struct pt_regs`` the stop point designates (interrupted or returning context)."""
        regs = self.target.read_registers()
        if point.regs == "rdi":
            addr = regs["rdi"]
        elif point.regs == "rsp":
            addr = regs["rsp"]
        else:
            return self.task_user_regs(self.current())
        return UserRegs.from_pt_regs(self.read(addr, PT_REGS_SIZE), self.info.pt_regs_offsets)
