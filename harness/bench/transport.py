"""Transport benchmark: what a stop and a read cost through each debugger transport.

For each transport, in one run on the same guest: stops per second at a breakpoint the guest
hits continuously (``do_syscall_64`` while ``callchain N raw`` makes syscalls in a loop; every
stop after the first includes the step over the breakpoint), and the latency of an 8-byte and a
4 KiB read of kernel memory while stopped (median and 90th percentile); the table is
:func:`harness.report.bench.transport_table`.  The transports attach
one after the other (QEMU's stub takes one connection at a time); each detaches when done.
"""

from __future__ import annotations

import statistics
import time

from ..images.programs import Variant, build_program
from ..images.toolchain import get_toolchain
from ..transport import make_target
from ..transport.errors import GuestError
from ..transport.qemu import Machine
from . import timed

WARMUP_STOPS = 5


def _stats(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000.0 for s in samples_s)
    p90 = statistics.quantiles(ms, n=10)[8] if len(ms) >= 2 else ms[0]
    return {"p50": statistics.median(ms), "p90": p90, "n": len(ms)}


def _symbol(machine: Machine, name: str) -> int:
    for line in machine.dump("/proc/kallsyms").decode().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == name:
            return int(parts[0], 16)
    raise LookupError(f"{name} is not in the guest's /proc/kallsyms")


def _default_program() -> str:
    return build_program("callchain", get_toolchain("host"), Variant()).guest_path


def bench_one(kind: str, machine: Machine, bp: int, n_stops: int, n_reads: int) -> dict:
    t0 = time.perf_counter()
    target = make_target(kind, machine.gdb_socket)
    attach = time.perf_counter() - t0
    try:
        target.set_breakpoint(bp)
        for _ in range(WARMUP_STOPS):
            target.cont(10.0)
        stops = []
        start = time.perf_counter()
        for _ in range(n_stops):
            t1 = time.perf_counter()
            stop = target.cont(10.0)
            stops.append(time.perf_counter() - t1)
            if stop.pc != bp:
                raise RuntimeError(f"{kind}: stopped at {stop.pc:#x}, not at the breakpoint {bp:#x}")
        total = time.perf_counter() - start
        regs = target.read_registers()
        stack = regs["rsp"]  # the kernel stack of the stopped syscall: mapped, and not code
        page = stack & ~0xFFF
        read8 = timed(lambda: target.read_memory(stack, 8), n_reads)
        read4k = timed(lambda: target.read_memory(page, 4096), n_reads)
        target.remove_breakpoint(bp)
    finally:
        target.close()
    return {
        "attach_ms": attach * 1000.0,
        "stops_per_s": n_stops / total,
        "stop_ms": _stats(stops),
        "read8_ms": _stats(read8),
        "read4k_ms": _stats(read4k),
    }


def bench_transport(machine: Machine, transports=("rsp", "mi"), n_stops: int = 200, n_reads: int = 200,
                    program: str | None = None, breakpoint: int | None = None) -> dict:
    """Measure each transport on ``machine`` (a started guest with no debugger attached, its
    initramfs holding the ``callchain`` program at guest path ``program``)."""
    bp = breakpoint if breakpoint is not None else _symbol(machine, "do_syscall_64")
    proc = machine.run([program or _default_program(), "100000000", "raw"])
    try:
        results = {kind: bench_one(kind, machine, bp, n_stops, n_reads) for kind in transports}
    finally:
        try:
            machine.shell(f"kill {proc.pid}", timeout=30)
        except GuestError:
            pass  # a guest that cannot kill its program is going away anyway; the figures stand
    return {"n_stops": n_stops, "n_reads": n_reads, "breakpoint": bp, "cpus": machine.cpus,
            "transports": results}

