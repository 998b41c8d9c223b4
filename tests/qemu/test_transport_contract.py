"""The transport contract: RSP (our client) and GDB/MI (the reference) agree byte for byte.

One booted guest (2 vCPUs) runs two ``callchain`` processes, so both vCPUs make syscalls.  QEMU's
stub takes one connection at a time: a transport attaches, does its part, and goes.  For the
same-stop comparisons each transport leaves without detaching (``D`` would resume the guest), so
the next finds the guest exactly where the previous one left it.
"""

from __future__ import annotations

import contextlib
import time

import pytest
from elftools.elf.elffile import ELFFile
from pygdbmi import gdbmiparser

from harness.images.initramfs import build_initramfs
from harness.images.kernel import get_kernel
from harness.images.programs import Variant, build_program
from harness.images.toolchain import get_toolchain
from harness.session import kernel_symbols
from harness.transport.errors import GuestPanic, TargetTimeout
from harness.transport.mi import MiTarget, parse_record
from harness.transport.qemu import Machine, MachineConfig
from harness.transport.rsp import RspTarget

pytestmark = pytest.mark.qemu

KINDS = ("rsp", "mi")
PT_REGS_IP = 16 * 8  # struct pt_regs: r15 .. orig_ax, then ip
MIB2 = 2 << 20


def boot(config: MachineConfig, attempts: int = 3) -> Machine:
    """Start a guest; retry a boot that died of the early ``Oops: int3`` (QEMU 7.2 TCG with 2
    vCPUs sometimes runs a stale int3 of the kernel's boot-time text patching: not ours)."""
    for attempt in range(attempts):
        m = Machine(config)
        try:
            return m.start()
        except GuestPanic as exc:
            m.close()
            if "int3" not in str(exc) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


class Guest:
    def __init__(self, machine: Machine, program, symbols: dict[str, int]):
        self.m = machine
        self.program = program
        self.sym = symbols
        with open(program.path, "rb") as f:
            elf = ELFFile(f)
            tab = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}
            self.sink = tab["sink"]["st_value"]
            self.c_range = (tab["c"]["st_value"], tab["c"]["st_value"] + tab["c"]["st_size"])

    def attach(self, kind: str):
        return RspTarget(self.m.gdb_socket) if kind == "rsp" else MiTarget(self.m.gdb_socket)


def kallsyms(m: Machine, kernel, names: set[str]) -> dict[str, int]:
    """The guest's /proc/kallsyms addresses of ``names``: dumped once per kernel build and cached
    (:func:`harness.session.kernel_symbols`); a whole dump through the guest's serial port every
    run cost this module 8.4 s of a core (measured)."""
    unique = kernel_symbols(m, kernel).unique()
    return {name: unique[name] for name in names}


@pytest.fixture(scope="module")
def guest():
    kernel = get_kernel("default")
    program = build_program("callchain", get_toolchain("host"), Variant())
    m = boot(MachineConfig(kernel.vmlinux, build_initramfs([program]), smp=2))
    try:
        sym = kallsyms(m, kernel, {"do_syscall_64", "_text", "_end", "jiffies"})
        for _ in range(2):  # one per vCPU: both take syscalls, neither idles in hlt
            m.run([program.guest_path, "100000000", "raw"])
        yield Guest(m, program, sym)
    finally:
        m.close()


@contextlib.contextmanager
def attached(g: Guest, kind: str, detach: bool = True):
    t = g.attach(kind)
    try:
        yield t
    finally:
        if detach:
            t.close()
        else:
            leave_stopped(t)


def leave_stopped(t) -> None:
    """Drop the connection without ``D``: QEMU keeps the guest stopped where it is."""
    if isinstance(t, MiTarget):
        t.close(detach=False)
    else:
        t.sock.close()  # RspTarget.close() always detaches


def first_unmapped_after_kernel(t, g: Guest, cr3: int) -> int:
    """The first unmapped page above the kernel image (mapped page right below it)."""
    addr = (g.sym["_end"] + MIB2 - 1) & ~(MIB2 - 1)
    for _ in range(64):
        if t.translate(addr, cr3, False) is None:
            break
        addr += MIB2
    else:
        pytest.fail("no unmapped 2 MiB region above the kernel image")
    while t.translate(addr - 4096, cr3, False) is None:
        addr -= 4096
        assert addr > g.sym["_text"]
    return addr


def snapshot(t, g: Guest, boundary: int) -> dict:
    """Everything the contract compares, read at one stop."""
    snap: dict = {"cpus": t.cpus(), "regs": {}, "at_rip": {}}
    for cpu in t.cpus():
        t.select_cpu(cpu)
        regs = t.read_registers()
        snap["regs"][cpu] = regs
        snap["at_rip"][cpu] = t.read_partial(regs["rip"], 64)
    t.select_cpu(0)
    cr3 = snap["regs"][0]["cr3"] & ~0xFFF
    text = g.sym["do_syscall_64"]
    snap["text"] = t.read_memory(text, 64)
    snap["text4k"] = t.read_memory(g.sym["_text"], 4096)
    snap["crossing"] = t.read_partial(boundary - 16, 32)
    snap["null"] = t.read_partial(0, 16)
    phys = t.translate(text, cr3, False)
    snap["phys_addr"] = phys
    snap["phys"] = t.read_memory(phys, 64, physical=True) if phys is not None else None
    snap["virt_after_phys"] = t.read_memory(text, 16)  # back in virtual mode
    return snap


@pytest.fixture(scope="module")
def snapshots(guest):
    """The same stop seen by RSP, then by MI, then by RSP again (the stop did not move)."""
    rsp = guest.attach("rsp")
    try:
        cr3 = rsp.read_registers()["cr3"] & ~0xFFF
        boundary = first_unmapped_after_kernel(rsp, guest, cr3)
        first = snapshot(rsp, guest, boundary)
    finally:
        leave_stopped(rsp)
    with attached(guest, "mi", detach=False) as mi:
        second = snapshot(mi, guest, boundary)
    with attached(guest, "rsp") as rsp:  # detaches: the guest runs on for the next tests
        third = snapshot(rsp, guest, boundary)
    return {"rsp": first, "mi": second, "rsp_again": third, "boundary": boundary}


# -- the same stop, both transports ------------------------------------------------------------
def test_same_stop_is_really_the_same(snapshots):
    for cpu in snapshots["rsp"]["cpus"]:
        assert snapshots["rsp"]["regs"][cpu] == snapshots["rsp_again"]["regs"][cpu]


def test_cpus_agree(snapshots):
    assert snapshots["rsp"]["cpus"] == snapshots["mi"]["cpus"] == [0, 1]


@pytest.mark.parametrize("cpu", [0, 1])
def test_registers_agree(snapshots, cpu):
    rsp, mi = snapshots["rsp"]["regs"][cpu], snapshots["mi"]["regs"][cpu]
    for name in RspTarget.CORE_REGS:
        assert name in rsp and name in mi, name
    common = sorted(set(rsp) & set(mi))
    assert {n: hex(rsp[n]) for n in common} == {n: hex(mi[n]) for n in common}
    assert kernel_gs(rsp) != 0 and rsp["cr3"] != 0


def kernel_gs(regs: dict[str, int]) -> int:
    """The per-CPU base: GS_BASE or KERNEL_GS_BASE, whichever holds it (the two swap at entry and
    exit, which need not match the CS of the stop); the kernel's is the upper-half one."""
    return max(regs["gs_base"], regs["k_gs_base"])


def test_registers_differ_between_cpus(snapshots):
    regs = snapshots["mi"]["regs"]
    assert kernel_gs(regs[0]) != kernel_gs(regs[1])  # per-CPU areas: really two vCPUs


@pytest.mark.parametrize("cpu", [0, 1])
def test_memory_at_rip_agrees(snapshots, cpu):
    rsp, mi = snapshots["rsp"]["at_rip"][cpu], snapshots["mi"]["at_rip"][cpu]
    assert rsp == mi
    assert rsp.fault is None and len(rsp.data) == 64


def test_kernel_text_agrees(snapshots):
    assert snapshots["rsp"]["text"] == snapshots["mi"]["text"]
    assert snapshots["rsp"]["text4k"] == snapshots["mi"]["text4k"]
    assert len(snapshots["mi"]["text4k"]) == 4096 and any(snapshots["mi"]["text4k"])


def test_read_across_into_unmapped_page_agrees(snapshots):
    b = snapshots["boundary"]
    for kind in KINDS:
        r = snapshots[kind]["crossing"]
        assert r.fault == b, (kind, hex(r.fault or 0), hex(b))
        assert len(r.data) == 16
    assert snapshots["rsp"]["crossing"].data == snapshots["mi"]["crossing"].data
    assert snapshots["rsp"]["null"] == snapshots["mi"]["null"]
    assert snapshots["mi"]["null"].fault == 0 and snapshots["mi"]["null"].data == b""


def test_physical_read_agrees_with_virtual(snapshots):
    for kind in KINDS:
        s = snapshots[kind]
        assert s["phys_addr"] is not None
        assert s["phys"] == s["text"], kind
        assert s["virt_after_phys"] == s["text"][:16], kind
    assert snapshots["rsp"]["phys_addr"] == snapshots["mi"]["phys_addr"]


# -- running -------------------------------------------------------------------------------------
def user_ip(t) -> int:
    """The user IP of the syscall being entered (rdi = pt_regs at do_syscall_64)."""
    return t.read_u64(t.read_registers()["rdi"] + PT_REGS_IP)


def stop_in_callchain(t, g: Guest, bp: int, cr3: int | None = None, limit: int = 100) -> dict:
    """Continue until a stop at ``bp`` is a syscall from callchain's c() (of the process with
    ``cr3`` if given); return its registers."""
    for _ in range(limit):
        regs = t.read_registers()
        in_c = regs["rip"] == bp and g.c_range[0] <= user_ip(t) < g.c_range[1]
        if in_c and (cr3 is None or regs["cr3"] == cr3):
            return regs
        stop = t.cont(10.0)
        assert stop.pc == bp
    pytest.fail(f"no stop in callchain within {limit} stops")


@pytest.mark.parametrize("kind", KINDS)
def test_breakpoint_stop_and_progress(guest, kind):
    bp = guest.sym["do_syscall_64"]
    with attached(guest, kind) as t:
        t.set_breakpoint(bp)
        stop = t.cont(10.0)
        assert stop.pc == bp and stop.signal == 5
        assert stop.cpu == t.cpu and t.read_registers()["rip"] == bp
        regs = stop_in_callchain(t, guest, bp)
        sink0 = t.read_u64(guest.sink)
        for _ in range(20):
            stop = t.cont(10.0)  # steps over the breakpoint first, or it would stop in place
            assert stop.pc == bp
        stop_in_callchain(t, guest, bp, cr3=regs["cr3"])
        sink1 = t.read_u64(guest.sink)
        assert sink1 > sink0, "the guest program made no progress across 20 continues"
        t.remove_breakpoint(bp)


@pytest.mark.parametrize("kind", KINDS)
def test_cont_after_reading_the_other_cpu_makes_progress(guest, kind):
    """Selecting another vCPU after a breakpoint stop must not make cont() resume the stopped
    vCPU in place: every stop is a new syscall (its pt_regs hold the loop counter)."""
    bp = guest.sym["do_syscall_64"]
    seen = set()
    with attached(guest, kind) as t:
        t.set_breakpoint(bp)
        stop = t.cont(10.0)
        for _ in range(12):
            key = (stop.cpu, t.read_memory(t.read_registers()["rdi"], 168))
            assert key not in seen, "the same stop came back: cont() made no progress"
            seen.add(key)
            t.select_cpu(1 - stop.cpu)
            t.read_registers()
            stop = t.cont(10.0)
            assert stop.pc == bp
        t.remove_breakpoint(bp)


def halted(t, rip: int) -> bool:
    r = t.read_partial(rip - 1, 1)
    return r.fault is None and r.data == b"\xf4"


@pytest.mark.parametrize("kind", KINDS)
def test_step_moves_only_the_selected_cpu(guest, kind):
    bp = guest.sym["do_syscall_64"]
    with attached(guest, kind) as t:
        t.set_breakpoint(bp)
        for _ in range(50):  # a stop where the other vCPU is not idling in hlt (it would not step)
            stop = t.cont(10.0)
            other = 1 - stop.cpu
            t.select_cpu(other)
            before_other = t.read_registers()
            if not halted(t, before_other["rip"]):
                break
        else:
            # Stays a skip in CI: no install step provides it; the guest's scheduler put the other
            # vCPU in hlt at each of 50 stops, a state of the run, not a missing piece.
            pytest.skip("the other vCPU idled in hlt at every stop")
        # The vCPU that did not stop: one instruction, and the stopped one stays on the breakpoint.
        step = t.step(5.0)
        assert step.cpu == other
        assert t.read_registers() != before_other
        t.select_cpu(stop.cpu)
        assert t.read_registers()["rip"] == bp
        # The vCPU on the breakpoint: stepped off it (the breakpoint is lifted for the step).
        step = t.step(5.0)
        assert step.cpu == stop.cpu and 0 < step.pc - bp < 16
        assert bp in t.breakpoints
        t.remove_breakpoint(bp)


@pytest.mark.parametrize("kind", KINDS)
def test_cont_timeout_leaves_target_stopped_and_usable(guest, kind):
    bp = guest.sym["do_syscall_64"]
    with attached(guest, kind) as t:
        start = time.monotonic()
        with pytest.raises(TargetTimeout):
            t.cont(0.5)
        assert time.monotonic() - start < 0.5 + 6.0
        assert not t.running
        j0 = t.read_u64(guest.sym["jiffies"])
        time.sleep(0.3)
        assert t.read_u64(guest.sym["jiffies"]) == j0, "the guest kept running after the timeout"
        t.set_breakpoint(bp)
        assert t.cont(10.0).pc == bp
        t.remove_breakpoint(bp)


@pytest.mark.parametrize("kind", KINDS)
def test_resume_and_interrupt(guest, kind):
    with attached(guest, kind) as t:
        t.resume()
        time.sleep(0.1)
        stop = t.interrupt()
        assert not t.running and stop.cpu in t.cpus()
        assert t.read_registers()["rip"] == stop.pc


@pytest.mark.parametrize("kind", KINDS)
def test_interrupt_of_a_guest_already_at_a_breakpoint_returns_that_stop(guest, kind):
    """The guest reached a breakpoint before the ^C: the interrupt's stop is that breakpoint's
    (QEMU ignores a ^C to a stopped guest), so a caller must take it as a breakpoint stop: the
    engine's end-of-run flush once continued past a return point this way and delivered the task's
    work at its next exit, with other registers (issue 21's flake campaign, run b2)."""
    bp = guest.sym["do_syscall_64"]
    with attached(guest, kind) as t:
        t.set_breakpoint(bp)
        t.resume()
        time.sleep(0.5)  # callchain's syscalls reach the breakpoint within milliseconds
        stop = t.interrupt()
        assert stop.pc == bp and stop.signal == 5, stop
        assert not t.running and t.read_registers()["rip"] == bp
        t.remove_breakpoint(bp)


def test_mi_register_write_round_trips(guest):
    with attached(guest, "mi") as t:
        regs = t.read_registers()
        t.write_register("r11", regs["r11"] ^ 0x5A5A)
        assert t.read_registers()["r11"] == regs["r11"] ^ 0x5A5A
        t.write_register("r11", regs["r11"])
        assert t.read_registers()["r11"] == regs["r11"]


def test_mi_fast_parser_matches_pygdbmi():
    lines = [
        ('12^done,memory=[{begin="0xffffffff81000000",offset="0x0000000000000000",'
         'end="0xffffffff81000010",contents="66900faee8e901411000cccccccccccc"}]'),
        '7^done,register-values=[{number="0",value="0x0"},{number="16",value="0xffffffff8214ba90"}]',
        '8^done,register-values=[{number="0",value="<unavailable>"}]',
        '9^error,msg="Unable to read memory."',
        ('*stopped,reason="breakpoint-hit",disp="keep",bkptno="1",frame={addr="0x1",func="??",args=[]},'
         'thread-id="2",stopped-threads="all"'),
    ]
    for line in lines:
        assert parse_record(line) == gdbmiparser.parse_response(line)
