"""The CFI oracle (harness/oracles/cfi.py) at the stop: what it reads while the guest is stopped.

The stop's capture holds the stack sp is in, from sp's page to the end of its mapping.  Where
that is the main thread's ``[stack]`` the CFI walk needs nothing else; elsewhere (a thread's
stack, an alternate signal stack: an anonymous mapping) the walk may cross a signal frame onto
another stack, so ``CFIOracle.complete`` walks once through the open snapshot and what it reads
is kept.  Real data: the recorded delivery ``signal-1`` (in the alarm handler, over the kernel's
rt_sigframe, the interrupted frames above it).  Its stack is the main thread's; the tests make it
another by its name in the maps (the same mapping, unnamed, as a thread's stack is) and capture
only sp's page, as the engine would capture a small stack: hand-made inputs over the real frames.
"""

from __future__ import annotations

import pytest

from harness.memory import CapturedMemory
from harness.oracles.base import OracleFrames, Stack
from harness.oracles.cfi import PAGE, CFIOracle
from harness.unwind.maps import AddressSpace
from harness.unwind.user import Trace
from tests.support.deliveries import Delivery
from tests.support.recording import RecordingMemory as Guest


@pytest.fixture(scope="module")
def signal() -> Delivery:
    return Delivery("signal-1")


def _space(d: Delivery, stack_name: str) -> AddressSpace:
    maps = d.maps.replace("[stack]", stack_name) if stack_name != "[stack]" else d.maps
    return AddressSpace.from_maps(maps, {d.prog["guest_path"]: d.path}.get, d.snap.memory)


def _stop(d: Delivery, space: AddressSpace) -> tuple[CFIOracle, CapturedMemory, Guest]:
    """The capture of sp's page alone, completed by the CFI oracle through the open snapshot, sealed."""
    live = Guest(d.guest())
    sp = d.snap.regs.sp
    page = sp - sp % PAGE
    mem = CapturedMemory({page: d.guest().read(page, PAGE)}, live=live)
    oracle = CFIOracle(space)
    oracle.complete(mem, d.snap.regs, d.snap.fs_base)
    return oracle, mem.seal(), live


def _frames(d: Delivery, oracle: CFIOracle, mem) -> OracleFrames:
    return oracle.frames(Stack(d.snap.regs, Trace(), "fp", 127, mem, oracle.space, None))


def test_off_the_main_stack_the_walk_at_the_stop_keeps_what_it_reads(signal):
    """Through the signal frame and up the interrupted frames: every word the walk reads beyond
    sp's page is read at the stop, and the walk on the sealed snapshot is the recorded one."""
    oracle, mem, live = _stop(signal, _space(signal, ""))
    assert live.reads
    got = _frames(signal, oracle, mem)
    assert not mem.misses
    assert list(got.ips) == [f[0] for f in signal.record["frames"]["cfi"]]
    assert len(got.marks) == 2  # the IP, and the interrupted IP after the signal frame


def test_on_the_main_stack_nothing_more_is_read(signal):
    """[stack] is captured to its end at the stop (here: its first page alone, to see that the
    oracle reads nothing more): no walk at the stop."""
    _, _, live = _stop(signal, _space(signal, "[stack]"))
    assert live.reads == []


def test_a_stack_no_mapping_holds_is_walked_at_the_stop(signal):
    """sp in no mapping the maps name (a stack the maps were read before): walked too."""
    maps = "\n".join(line for line in signal.maps.splitlines() if "[stack]" not in line)
    space = AddressSpace.from_maps(maps, {signal.prog["guest_path"]: signal.path}.get, signal.snap.memory)
    assert space.mapping_at(signal.snap.regs.sp) is None
    _, mem, live = _stop(signal, space)
    assert live.reads and not mem.misses


def test_a_walk_that_faults_at_the_stop_leaves_the_fault_to_the_checks(signal):
    """The stack beyond sp's page unreadable at the stop: complete() ends quietly; the oracle's
    walk on the snapshot meets the same fault, a known one (not a miss)."""
    d = signal
    sp = d.snap.regs.sp
    page = sp - sp % PAGE
    from harness.memory import BufferMemory

    mem = CapturedMemory({page: d.guest().read(page, PAGE)}, live=BufferMemory())
    oracle = CFIOracle(_space(d, ""))
    oracle.complete(mem, d.snap.regs, d.snap.fs_base)
    mem.seal()
    got = _frames(d, oracle, mem)
    assert not mem.misses and len(got.ips) < len(d.record["frames"]["cfi"])


def test_a_compat_tasks_stack_is_found_by_its_32_bit_sp():
    """compat-fp-0 (a 32-bit task on its [stack]): its sp's 32 bits name the mapping, whatever a
    64-bit view of the register holds above them (set here): no walk at the stop."""
    import dataclasses

    d = Delivery("compat-fp-0")
    regs = dataclasses.replace(d.snap.regs, sp=d.snap.regs.sp | 0xFFFF_FFFF_0000_0000)
    assert regs.compat
    live = Guest(d.guest())
    mem = CapturedMemory(live=live)  # nothing captured: a walk would read the stack here
    CFIOracle(d.space).complete(mem, regs, d.snap.fs_base)
    assert live.reads == []


# -- the signal frame: its trampoline and the registers it saved ------------------------------------
#
# signal-1's rt_sigframe, under on_alarm's frame: glibc's __restore_rt (static), whose FDE (CIE
# augmentation "zRS") gives every register as DW_CFA_expression DW_OP_breg7 N over the ucontext.

class SignalFrame:
    def __init__(self, d: Delivery):
        from harness.oracles.cfi import _trampoline
        from harness.unwind.cfi import unwind_cfi

        self.d = d
        self.memory = d.guest()
        walk = unwind_cfi(self.memory, d.snap.regs, CFIOracle(d.space).tables)
        self.restorer, self.sp = walk.frames[-1].ip, walk.frames[-1].sp  # the return into __restore_rt
        table, _ = _trampoline(d.space, self.restorer, False)
        fde = table.fde_for(self.restorer - 1)
        self.fde_start = fde.header["initial_location"]
        self.fde_end = self.fde_start + fde.header["address_range"]


@pytest.fixture(scope="module")
def frame(signal) -> SignalFrame:
    return SignalFrame(signal)


def test_a_return_address_is_looked_up_before_itself_an_interrupted_ip_at_itself(frame):
    """The restorer's FDE covers [start, end): a return address (into it) names it up to and
    including its end, an interrupted IP (the walk's first frame) from its start, not at its end."""
    from harness.oracles.cfi import is_signal_trampoline, signal_frame_regs

    space, mem = frame.d.space, frame.memory
    assert is_signal_trampoline(space, frame.restorer)  # as the causes ask: a return address
    assert is_signal_trampoline(space, frame.fde_end) and not is_signal_trampoline(space, frame.fde_end, at_ip=True)
    assert is_signal_trampoline(space, frame.fde_start, at_ip=True)
    assert not is_signal_trampoline(space, frame.fde_start)  # the byte before it: not the trampoline's
    assert signal_frame_regs(space, mem, frame.fde_start, frame.sp, at_ip=True) is not None
    assert signal_frame_regs(space, mem, frame.fde_end, frame.sp, at_ip=True) is None


def test_the_restored_registers_are_not_in_a_system_call(frame):
    """restore_sigcontext sets orig_ax -1 ("disable syscall checks"): the interrupted IP is looked
    up at itself, even right after a syscall instruction; both readers of the frame say so."""
    from harness.oracles.cfi import NO_SYSCALL, kernel_sigframe_regs, signal_frame_regs

    by_cfi = signal_frame_regs(frame.d.space, frame.memory, frame.restorer, frame.sp)
    by_layout = kernel_sigframe_regs(frame.memory, frame.restorer, frame.sp)
    assert by_cfi is not None and by_layout is not None
    assert by_cfi.orig_ax == by_layout.orig_ax == NO_SYSCALL and not by_cfi.in_syscall
    assert (by_cfi.ip, by_cfi.sp, by_cfi.bp) == (by_layout.ip, by_layout.sp, by_layout.bp)


def test_a_saved_register_is_the_unsigned_word_in_the_frame(frame):
    """A signal that interrupted a system call leaves -EINTR in the saved rax (its slot rewritten
    here): 2^64 - 4, as the kernel's layout reads it too."""
    from harness.memory import BufferMemory, Overlay
    from harness.oracles.cfi import _SIGCONTEXT_REGS, kernel_sigframe_regs, signal_frame_regs
    from harness.regs import UC_MCONTEXT

    slot = frame.sp + UC_MCONTEXT + 8 * _SIGCONTEXT_REGS.index("ax")
    (base, data), = [(b, x) for b, x in frame.d.snap.memory.regions.items() if b <= slot < b + len(x)]
    patched = bytearray(data)
    patched[slot - base:slot - base + 8] = (2**64 - 4).to_bytes(8, "little")
    mem = Overlay(BufferMemory({base: bytes(patched)}), frame.memory)
    assert signal_frame_regs(frame.d.space, mem, frame.restorer, frame.sp).ax == 2**64 - 4
    assert kernel_sigframe_regs(mem, frame.restorer, frame.sp).ax == 2**64 - 4


class _Rows:
    """The restorer's CFI table with its row changed: ``change(row)`` gives the row served."""

    def __init__(self, table, change):
        self.table, self.change = table, change
        self.arch = table.arch

    def row_for(self, link):
        row, ra = self.table.row_for(link)
        return self.change(dict(row)), ra

    def parse_expr(self, expr):
        return self.table.parse_expr(expr)


def _with_row(frame, monkeypatch, change):
    import harness.oracles.cfi as cfi
    from harness.oracles.cfi import signal_frame_regs

    table, link = cfi._trampoline(frame.d.space, frame.restorer, False)
    monkeypatch.setattr(cfi, "_trampoline", lambda space, ra, at_ip: (_Rows(table, change), link))
    return signal_frame_regs(frame.d.space, frame.memory, frame.restorer, frame.sp)


def _rule(kind: str, arg):
    from elftools.dwarf.callframe import RegisterRule

    return RegisterRule(getattr(RegisterRule, kind), arg)


def test_a_register_the_row_leaves_out_or_gives_otherwise_is_skipped(frame, monkeypatch):
    """Rows no glibc restorer has (made here from its own row): rbx (3) without a rule, rbp (6)
    as an offset rule: the other registers are still read, rbx and rbp left at 0."""
    def change(row):
        del row[3]
        row[6] = _rule("OFFSET", -16)
        return row

    got = _with_row(frame, monkeypatch, change)
    want = kernel_sigframe_regs_of(frame)
    assert got is not None and (got.ip, got.sp, got.bx, got.bp) == (want.ip, want.sp, 0, 0)
    assert got.ax == want.ax and got.r15 == want.r15


def kernel_sigframe_regs_of(frame):
    from harness.oracles.cfi import kernel_sigframe_regs

    return kernel_sigframe_regs(frame.memory, frame.restorer, frame.sp)


@pytest.mark.parametrize("reg", [16, 7], ids=["rip", "rsp"])
def test_a_frame_without_the_ip_or_the_sp_gives_no_registers(frame, monkeypatch, reg):
    def change(row):
        del row[reg]
        return row

    assert _with_row(frame, monkeypatch, change) is None


@pytest.mark.parametrize("expr", [bytes([0x76, 0x10]), b""], ids=["rbp-based", "empty"])
def test_a_rule_that_is_not_over_the_frames_sp_gives_no_registers(frame, monkeypatch, expr):
    """DW_OP_breg6 (rbp) 16, or an empty expression, for rip: not a slot of the frame at sp."""
    def change(row):
        row[16] = _rule("EXPRESSION", expr)
        return row

    assert _with_row(frame, monkeypatch, change) is None


@pytest.mark.parametrize("limit", [3, 4, 6])
def test_the_walk_through_a_signal_frame_is_cfi_max_entries_in_all(frame, monkeypatch, limit):
    """CFI_MAX_ENTRIES bounds the whole walk, the frames past each signal frame counted with those
    before it (signal-1: 4 frames to the trampoline, 7 after; the limit lowered here)."""
    import harness.oracles.cfi as cfi

    full = CFIOracle(frame.d.space)._walk(frame.memory, frame.d.snap.regs)
    monkeypatch.setattr(cfi, "CFI_MAX_ENTRIES", limit)
    got = CFIOracle(frame.d.space)._walk(frame.memory, frame.d.snap.regs)
    assert got.ips == full.ips[:limit] and got.outermost is False


def test_a_walk_starting_in_the_trampoline_looks_its_ip_up_at_itself(frame):
    """The handler has returned into the trampoline: the walk's first IP is the trampoline's,
    an interrupted IP, looked up at itself, also at the FDE's first byte (glibc's nop before
    __restore_rt, where a lookup at ip - 1 would miss it; registers made from signal-1's frame
    as the handler's ret leaves them)."""
    import dataclasses

    regs = dataclasses.replace(frame.d.snap.regs, ip=frame.fde_start, sp=frame.sp)
    full = CFIOracle(frame.d.space)._walk(frame.memory, frame.d.snap.regs)
    got = CFIOracle(frame.d.space)._walk(frame.memory, regs)
    assert got.ips == (frame.fde_start, *full.ips[4:]) and got.marks == {0, 1}


def test_a_signal_frame_whose_registers_cannot_be_read_ends_the_walk_there(frame, monkeypatch):
    """signal_frame_regs gives nothing (the restorer's row without rip, changed from the real
    one): the oracle's frames end at the trampoline, not at the outermost frame, and say why."""
    def change(row):
        del row[16]
        return row

    assert _with_row(frame, monkeypatch, change) is None  # (the same patch as above)
    got = CFIOracle(frame.d.space)._walk(frame.memory, frame.d.snap.regs)
    assert isinstance(got, OracleFrames) and len(got.ips) == 4 and got.marks == {0}
    assert got.outermost is False and "signal frame" in got.stop
