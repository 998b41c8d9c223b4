"""The shadow-stack oracle (harness/oracles/shadow.py): where the program's ``harness_shadow`` is,
what the stop reads of it, and the frame list it gives or why it gives none.

Real data: the recorded deliveries (tests/data/deliveries), every one of a program built with the
shadow stack: ``fp-spin-0`` (a static 64-bit build: the symbol's address), ``compat-fp-0`` (32-bit:
its IP and call sites as 32-bit words in the same layout), ``threads-0`` (``HARNESS_SHADOW_TLS``: a
``__thread`` variable found from the thread pointer).  The snapshot holds exactly what the stop
read of the shadow stack (the header and SHADOW_PREFETCH entries).  Stacks deeper than any
recorded one (more than SHADOW_PREFETCH entries, the 2048 the program keeps, an overflow) and
the broken cases (a wrong magic, an unreadable page) are made from fp-spin-0's own shadow stack:
its header rewritten, its entries repeated, which the tests say where they do so.
"""

from __future__ import annotations

import dataclasses
import struct

import pytest

from harness.images.programs import Variant, build_program
from harness.images.toolchain import get_toolchain
from harness.memory import BufferMemory, CapturedMemory, Overlay
from harness.oracles.base import NotChecked, OracleFrames, Setup, Stack
from harness.oracles.shadow import (
    SHADOW_MAGIC,
    SHADOW_MAX_DEPTH,
    SHADOW_PREFETCH,
    ShadowOracle,
    ShadowSymbol,
    shadow_symbol,
)
from harness.unwind.user import Trace
from tests.support.deliveries import Delivery
from tests.support.recording import RecordingMemory as Guest

HEADER = 16
ENTRY = 16



@pytest.fixture(scope="module")
def deliveries() -> dict[str, Delivery]:
    return {n: Delivery(n) for n in ("fp-spin-0", "compat-fp-0", "threads-0")}


def _oracle(d: Delivery) -> ShadowOracle:
    o = ShadowOracle.create(Setup(d.space, d.snap.memory, d.path, shadow=True))
    assert isinstance(o, ShadowOracle)
    return o


def _stack(d: Delivery, memory, thread_pointer=None) -> Stack:
    tp = thread_pointer if thread_pointer is not None else (lambda: d.snap.fs_base)
    return Stack(d.snap.regs, Trace(), "fp", 127, memory, d.space, None, thread_pointer=tp)


def _stop(d: Delivery, oracle: ShadowOracle, guest) -> tuple[CapturedMemory, Guest]:
    """The engine's capture at the stop: the stack and the oracle's ranges in one batch, then
    complete() through the open snapshot; sealed."""
    live = Guest(guest)
    stack = {b: data for b, data in d.snap.memory.regions.items() if b <= d.snap.regs.sp < b + len(data)}
    mem = CapturedMemory(stack, live=live)
    for addr, size in oracle.captures(d.snap.regs, d.snap.fs_base):
        mem.add(addr, guest.read(addr, size))
    oracle.complete(mem, d.snap.regs, d.snap.fs_base)
    return mem.seal(), live


def _recorded(d: Delivery) -> list[int]:
    return [f[0] for f in d.record["frames"]["shadow"]]


# -- the real deliveries -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["fp-spin-0", "compat-fp-0", "threads-0"])
def test_the_stops_capture_holds_the_shadow_stack_the_frames_read(deliveries, name):
    """What captures() and complete() take at the stop is all that frames() reads: the recorded
    frames again, no miss, no second read for a stack within the prefetch."""
    d = deliveries[name]
    o = _oracle(d)
    mem, live = _stop(d, o, d.guest())
    assert live.reads == []
    got = o.frames(_stack(d, mem))
    assert isinstance(got, OracleFrames) and not mem.misses
    assert list(got.ips) == _recorded(d)
    depth = len(got.ips) - 1
    assert got.stop == f"{depth} instrumented frames" and got.marks == {0}
    assert got.outermost is False  # the shadow knows instrumented functions only: not the stack's end


def test_the_prefetch_is_the_header_and_its_entries(deliveries):
    d = deliveries["fp-spin-0"]
    o = _oracle(d)
    assert o.captures(d.snap.regs, d.snap.fs_base) == [(o.symbol.value, HEADER + ENTRY * SHADOW_PREFETCH)]
    # the recorded stop read exactly that
    assert d.snap.memory.regions[o.symbol.value] == d.guest().read(o.symbol.value, HEADER + ENTRY * SHADOW_PREFETCH)


def test_a_thread_local_shadow_stack_lies_below_the_thread_pointer(deliveries):
    """threads-0: ``__thread harness_shadow`` at fs_base - roundup(PT_TLS p_memsz, p_align) +
    st_value (TLS variant II), where the recorded stop read it."""
    d = deliveries["threads-0"]
    o = _oracle(d)
    assert o.symbol.tls_offset is not None
    addr = d.snap.fs_base - o.symbol.tls_offset + o.symbol.value
    assert o.symbol.address(d.snap.fs_base) == addr
    assert o.captures(d.snap.regs, d.snap.fs_base)[0][0] == addr
    assert struct.unpack_from("<Q", d.snap.memory.read(addr, 8))[0] == SHADOW_MAGIC


def test_a_thread_local_shadow_stack_without_a_thread_pointer_is_not_checked(deliveries):
    d = deliveries["threads-0"]
    stack = dataclasses.replace(_stack(d, d.snap.memory), thread_pointer=None)
    assert _oracle(d).frames(stack) == NotChecked("the thread pointer (fs_base) is not known here")


def test_an_absolute_shadow_stack_ignores_the_thread_pointer(deliveries):
    d = deliveries["fp-spin-0"]
    o = _oracle(d)
    assert o.symbol.tls_offset is None and o.symbol.address(0x7F0000001000) == o.symbol.value
    got = o.frames(_stack(d, d.snap.memory, thread_pointer=lambda: 0x7F0000001000))
    assert list(got.ips) == _recorded(d)


def test_a_compat_tasks_ip_is_its_32_bits(deliveries):
    """A 32-bit task's registers as pt_regs holds them; an IP with bits above 32 (as the 64-bit
    view of a compat register may show) is its low 32 bits, as the call sites are."""
    d = deliveries["compat-fp-0"]
    o = _oracle(d)
    assert d.snap.regs.compat
    high = dataclasses.replace(_stack(d, d.snap.memory), regs=dataclasses.replace(d.snap.regs, ip=d.snap.regs.ip | 1 << 32))
    assert list(o.frames(high).ips) == _recorded(d)
    native = deliveries["fp-spin-0"]
    big = dataclasses.replace(native.snap.regs, ip=native.snap.regs.ip | 1 << 40)  # not compat: the IP as it is
    assert _oracle(native).frames(dataclasses.replace(_stack(native, native.snap.memory), regs=big)).ips[0] == big.ip


# -- stacks no recording has: fp-spin-0's shadow stack rewritten -------------------------------------

def _shadow(d: Delivery, depth: int, overflow: int = 0, magic: int = SHADOW_MAGIC) -> tuple[int, bytes, list[int]]:
    """fp-spin-0's shadow stack with ``depth`` entries: its own, then again and again (each an
    entry the program wrote), under a header saying ``depth``, in the program's whole array (2048
    entries); and the call sites, outermost first."""
    addr = _oracle(d).symbol.value
    real = struct.unpack_from("<QII", d.snap.memory.read(addr, HEADER))[1]
    entries = d.snap.memory.read(addr + HEADER, ENTRY * real)
    body = (entries * (depth // real + 1))[:ENTRY * depth]
    sites = [struct.unpack_from("<QQ", body, ENTRY * i)[1] for i in range(depth)]
    body += bytes(ENTRY * SHADOW_MAX_DEPTH - len(body))
    return addr, struct.pack("<QII", magic, depth, overflow) + body, sites


def _guest_with(d: Delivery, addr: int, shadow: bytes):
    return Overlay(BufferMemory({addr: shadow}), d.guest())


@pytest.mark.parametrize("depth", [SHADOW_PREFETCH + 1, 200, SHADOW_MAX_DEPTH])
def test_a_stack_deeper_than_the_prefetch_is_read_whole_at_the_stop(deliveries, depth):
    """complete() reads the whole array, once; frames() then has every entry, innermost first."""
    d = deliveries["fp-spin-0"]
    o = _oracle(d)
    addr, shadow, sites = _shadow(d, depth)
    mem, live = _stop(d, o, _guest_with(d, addr, shadow))
    assert live.reads == [(addr + HEADER, ENTRY * depth)]
    got = o.frames(_stack(d, mem))
    assert not mem.misses
    assert got.ips == (d.snap.regs.ip, *reversed(sites)) and got.stop == f"{depth} instrumented frames"


def test_a_stack_as_deep_as_the_prefetch_needs_no_second_read(deliveries):
    d = deliveries["fp-spin-0"]
    o = _oracle(d)
    addr, shadow, sites = _shadow(d, SHADOW_PREFETCH)
    mem, live = _stop(d, o, _guest_with(d, addr, shadow))
    assert live.reads == []
    assert o.frames(_stack(d, mem)).ips == (d.snap.regs.ip, *reversed(sites))


@pytest.mark.parametrize("depth,overflow", [(SHADOW_MAX_DEPTH + 1, 1), (SHADOW_MAX_DEPTH + 1, 0), (5, 1)],
                         ids=["past the array", "past the array, no flag", "back under it after an overflow"])
def test_an_overflowed_shadow_stack_is_not_checked_nor_read_further(deliveries, depth, overflow):
    """The hooks count the entries they could not store (overflow) and depth goes on past the
    array: the shadow stack is no longer the whole truth, and nothing more of it is read."""
    d = deliveries["fp-spin-0"]
    o = _oracle(d)
    addr, shadow, _ = _shadow(d, min(depth, SHADOW_MAX_DEPTH), overflow)
    shadow = struct.pack("<QII", SHADOW_MAGIC, depth, overflow) + shadow[HEADER:]
    mem, live = _stop(d, o, _guest_with(d, addr, shadow))
    assert live.reads == []
    got = o.frames(_stack(d, mem))
    assert got == NotChecked(f"the shadow stack overflowed (depth {depth})")
    assert not got.failure


def test_a_wrong_magic_is_the_harness_failure_and_nothing_more_is_read(deliveries):
    """The magic is not there: the harness computed a wrong address (a failure of the harness,
    not a fact of the stack), and the depth beside it means nothing."""
    d = deliveries["fp-spin-0"]
    o = _oracle(d)
    addr, shadow, _ = _shadow(d, 200, magic=SHADOW_MAGIC ^ 1)
    mem, live = _stop(d, o, _guest_with(d, addr, shadow))
    assert live.reads == []
    assert o.frames(_stack(d, mem)) == NotChecked(
        f"shadow stack magic {SHADOW_MAGIC ^ 1:#x} at {addr:#x} (fs_base {0:#x}), not {SHADOW_MAGIC:#x}: "
        f"the harness computed a wrong address", failure=True)


def test_a_wrong_magic_names_the_thread_pointer_it_was_computed_from(deliveries):
    d = deliveries["threads-0"]
    o = _oracle(d)
    addr = o.symbol.address(d.snap.fs_base)
    shifted = d.snap.fs_base + 0x1000  # another (wrong) thread pointer: no magic there
    mem = Overlay(BufferMemory({o.symbol.address(shifted): bytes(HEADER)}), d.snap.memory)
    got = o.frames(_stack(d, mem, thread_pointer=lambda: shifted))
    assert got == NotChecked(f"shadow stack magic 0x0 at {addr + 0x1000:#x} (fs_base {shifted:#x}), not "
                             f"{SHADOW_MAGIC:#x}: the harness computed a wrong address", failure=True)


def test_an_unreadable_shadow_stack_is_not_checked_and_says_why(deliveries):
    """Right after an exec the image's data pages are not present: the read faults (at the
    header, or at the entries of a deeper stack), and complete() lets frames() say so."""
    d = deliveries["fp-spin-0"]
    o = _oracle(d)
    empty = CapturedMemory()
    o.complete(empty, d.snap.regs, d.snap.fs_base)  # the fault is not complete()'s to raise
    assert o.frames(_stack(d, empty.seal())) == NotChecked("its page is not present yet (fresh exec)")
    addr, shadow, _ = _shadow(d, 200)
    header_only = CapturedMemory({addr: shadow[:HEADER + ENTRY * SHADOW_PREFETCH]}, live=BufferMemory())
    o.complete(header_only, d.snap.regs, d.snap.fs_base)
    assert o.frames(_stack(d, header_only.seal())) == NotChecked("its page is not present yet (fresh exec)")


# -- the symbol --------------------------------------------------------------------------------------

def test_the_oracle_applies_to_a_shadow_build_only(deliveries):
    d = deliveries["fp-spin-0"]
    assert ShadowOracle.create(Setup(d.space, d.snap.memory, d.path, shadow=False)) is None
    assert ShadowOracle.create(Setup(d.space, d.snap.memory, None, shadow=True)) is None
    assert _oracle(d).symbol == ShadowSymbol(0x4A50E0)  # where the recorded stop read it
    assert 0x4A50E0 in d.snap.memory.regions


def test_a_pie_or_a_build_without_the_shadow_has_no_symbol(deliveries):
    """A PIE needs its load bias, which the symbol does not give (shadow checks use non-PIE
    builds); a build without -DHARNESS_SHADOW has no harness_shadow."""
    host = get_toolchain("host")
    pie = build_program("callchain", host, Variant(static=False, shadow=True))
    assert shadow_symbol(pie.path) is None
    plain = build_program("callchain", host, Variant())
    assert shadow_symbol(plain.path) is None
    assert ShadowOracle.create(Setup(deliveries["fp-spin-0"].space, None, str(plain.path), shadow=True)) is None


def _patched(src: str, tmp_path, **fields) -> str:
    """A copy of the ELF ``src`` with its PT_TLS program header's fields rewritten (``p_type``,
    ``p_memsz``, ``p_align``): inputs no linker makes, over a real binary."""
    from elftools.elf.elffile import ELFFile

    with open(src, "rb") as f:
        elf = ELFFile(f)
        phoff, phentsize = elf.header.e_phoff, elf.header.e_phentsize
        index = next(i for i, s in enumerate(elf.iter_segments()) if s["p_type"] == "PT_TLS")
    data = bytearray(open(src, "rb").read())
    at = phoff + index * phentsize  # Elf64_Phdr: p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align
    where = {"p_type": (at, "<I"), "p_memsz": (at + 40, "<Q"), "p_align": (at + 48, "<Q")}
    for name, value in fields.items():
        off, fmt = where[name]
        struct.pack_into(fmt, data, off, value)
    out = tmp_path / f"patched-{'-'.join(f'{k}{v}' for k, v in fields.items())}"
    out.write_bytes(bytes(data))
    return str(out)


@pytest.mark.parametrize("memsz,align,offset", [
    (0x8080, 8, 0x8080),  # threads' own
    (0x8079, 8, 0x8080),  # rounded up to the alignment
    (0x8079, 256, 0x8100),
    (0x8079, 1, 0x8079),  # no alignment: 0 and 1 say the same
    (0x8079, 0, 0x8079),
])
def test_the_tls_block_starts_its_size_rounded_up_to_its_alignment_below_the_thread_pointer(deliveries, tmp_path, memsz, align, offset):
    """``tls_offset = roundup(PT_TLS p_memsz, p_align)``, as glibc places a static executable's TLS
    block under the TCB; threads' own PT_TLS is already aligned, the others are patched copies."""
    d = deliveries["threads-0"]
    path = _patched(d.path, tmp_path, p_memsz=memsz, p_align=align)
    assert shadow_symbol(path) == ShadowSymbol(0, offset)


def test_a_tls_symbol_without_a_tls_segment_has_no_address(deliveries, tmp_path):
    """A malformed file (an STT_TLS symbol, no PT_TLS: the PT_TLS header made PT_NULL here): no
    shadow symbol, so no shadow oracle, rather than an error."""
    assert shadow_symbol(_patched(deliveries["threads-0"].path, tmp_path, p_type=0)) is None


def test_a_thread_local_variable_lies_its_symbol_value_into_the_tls_block():
    """st_value of an STT_TLS symbol is its offset in the TLS block (threads' harness_shadow is at
    0, the block's start: a variable after it is further up)."""
    assert ShadowSymbol(0x40, 0x8080).address(0x7FFFF7D8A740) == 0x7FFFF7D8A740 - 0x8080 + 0x40


# -- the words are unsigned: what the hooks stored, whatever it is --------------------------------------

def test_a_depth_wrapped_below_zero_is_past_the_array(deliveries):
    """An exit hook run once more than its enter (the u32 depth wraps): past the array, as an
    overflow; never a negative read."""
    d = deliveries["fp-spin-0"]
    o = _oracle(d)
    addr, shadow, _ = _shadow(d, 3)
    shadow = struct.pack("<QII", SHADOW_MAGIC, 0xFFFFFFFF, 0) + shadow[HEADER:]
    mem, _ = _stop(d, o, _guest_with(d, addr, shadow))
    assert o.frames(_stack(d, mem)) == NotChecked("the shadow stack overflowed (depth 4294967295)")


def test_a_wrong_magic_is_named_as_the_unsigned_word_read(deliveries):
    d = deliveries["fp-spin-0"]
    o = _oracle(d)
    addr, shadow, _ = _shadow(d, 3, magic=0xFFFF_FFFF_FFFF_FFFF)
    mem, _ = _stop(d, o, _guest_with(d, addr, shadow))
    assert o.frames(_stack(d, mem)).reason.startswith(f"shadow stack magic 0xffffffffffffffff at {addr:#x}")


def test_a_call_site_is_the_word_the_hook_stored(deliveries):
    """A slot holding a kernel-half address (a clobbered entry): given as it is, for the verdict
    to meet, not turned into a negative number."""
    d = deliveries["fp-spin-0"]
    o = _oracle(d)
    addr, shadow, sites = _shadow(d, 3)
    data = bytearray(shadow)
    struct.pack_into("<Q", data, HEADER + 8, 0xFFFFFFFF81000000)  # the outermost entry's call site
    mem, _ = _stop(d, o, _guest_with(d, addr, bytes(data)))
    assert o.frames(_stack(d, mem)).ips[-1] == 0xFFFFFFFF81000000


# -- instrumented(): the functions that call the enter hook ------------------------------------------

def _calling(code_start: int, at: int, target: int, size: int) -> BufferMemory:
    """``size`` bytes of int3 from ``code_start`` with one ``call target`` at offset ``at``."""
    data = bytearray(b"\xcc" * size)
    data[at] = 0xE8
    struct.pack_into("<i", data, at + 1, target - (code_start + at + 5))
    return BufferMemory({code_start: bytes(data)})


def test_instrumented_functions_are_told_apart_one_by_one(deliveries):
    """fp-spin-0's program: c and b (instrumented), the enter hook and glibc's
    __libc_start_call_main (not),
    asked of one CodeFacts: each function's own answer, not the first one asked."""
    from harness.oracles.shadow import HOOK_ENTER, hooks, instrumented
    from harness.unwind.code import CodeFacts

    d = deliveries["fp-spin-0"]
    code = CodeFacts(d.space, d.guest(), 8)
    enter, leave = hooks(code)
    assert enter is not None and leave is not None and enter != leave
    fns = {name: code.function_at(_address(d, name)) for name in ("c", "b", HOOK_ENTER, "__libc_start_call_main")}
    answers = {name: instrumented(code, f) for name, f in fns.items()}
    assert answers == {"c": True, "b": True, HOOK_ENTER: False, "__libc_start_call_main": False}
    assert {name: instrumented(code, f) for name, f in reversed(fns.items())} == answers


def _address(d: Delivery, name: str) -> int:
    from harness.unwind.symbolize import Symbolizer

    addr = Symbolizer(d.space).address_of(name)
    assert addr is not None, name
    return addr


@pytest.mark.parametrize("size,at,seen", [
    (0, 256 - 5, True),  # unknown size: the first 256 bytes
    (0, 256 - 4, False),
    (1 << 20, (1 << 16) - 5, True),  # a huge function: its first 64 KiB
    (1 << 20, (1 << 16) - 4, False),
])
def test_a_function_is_looked_at_for_the_enter_call_within_its_bounds(deliveries, size, at, seen):
    """Bounds of the scan, where a symbol gives no size (hand-written code) and where it gives a
    huge one: code made here, one ``call __cyg_profile_func_enter`` placed at the edge."""
    from harness.oracles.shadow import hooks, instrumented
    from harness.unwind.code import CodeFacts, Function

    d = deliveries["fp-spin-0"]
    enter, _ = hooks(CodeFacts(d.space, d.guest(), 8))
    start = 0x10000000
    code = CodeFacts(d.space, _calling(start, at, enter, 1 << 17), 8)
    assert instrumented(code, Function("made", start, size, "made")) is seen


def test_without_hooks_no_function_is_instrumented():
    """A program built without the shadow stack has no __cyg_profile_func_enter: nothing is."""
    from harness.oracles.shadow import hooks, instrumented
    from harness.unwind.code import CodeFacts, Function
    from harness.unwind.maps import AddressSpace
    from tests.support.layout import loader_maps

    plain = build_program("callchain", get_toolchain("host"), Variant())
    space = AddressSpace.from_maps(loader_maps(plain.path, 0, "/progs/callchain"), {"/progs/callchain": str(plain.path)}.get)
    code = CodeFacts(space, BufferMemory(), 8)
    assert hooks(code) == (None, None)
    assert instrumented(code, Function("main", 0x401000, 64, "/progs/callchain")) is False
