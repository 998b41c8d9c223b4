"""Delivery snapshots: the captured memory's rules, and real deliveries replayed without a guest.

``tests/data/deliveries/*/delivery.json`` were recorded from real runs
(``python -m harness.tools.record_deliveries``, host toolchain: fp-spin, signal, threads,
compat-fp, sframe-v1-nofp; forkexec-syscall-exit with ``--point exit --name forkexec-syscall-exit``): the snapshot the engine took at the stop and the ``stack`` record it
wrote.  Replayed here on the same program (rebuilt by the host toolchain, checked by a
sha256 of what it maps), the walk and every oracle give the same frames, stops and verdicts.
"""

from __future__ import annotations

import json

import pytest

from harness.images.programs import Variant
from harness.memory import BufferMemory, CapturedMemory, MemoryFault, SnapshotMiss
from harness.scenarios.snapshot import DeliveryFileError, load, loaded_digest, replay
from tests.support.deliveries import DATA, program

DELIVERIES = sorted(p.name for p in DATA.iterdir() if (p / "delivery.json").exists())


# -- CapturedMemory ------------------------------------------------------------------------------

def test_captured_memory_serves_regions_then_backing_piecewise():
    backing = BufferMemory({0x2000: bytes(range(256)) * 16})  # 0x2000-0x3000
    mem = CapturedMemory({0x1000: b"\xaa" * 0x1000}, backing=backing).seal()
    assert mem.read(0x1ffe, 4) == b"\xaa\xaa\x00\x01"  # straddles the region and the backing
    assert mem.read(0x2010, 2) == b"\x10\x11"
    assert not mem.misses


def test_captured_memory_known_fault_is_a_fault_not_a_miss():
    mem = CapturedMemory({0x1000: b"\x01" * 0x1000}, faults={0x2000}).seal()
    with pytest.raises(MemoryFault) as exc:
        mem.read(0x1ff8, 16)
    assert not isinstance(exc.value, SnapshotMiss) and exc.value.addr == 0x2000
    assert not mem.misses


def test_sealed_memory_lists_a_miss():
    mem = CapturedMemory({0x1000: b"\x01" * 16}).seal()
    with pytest.raises(SnapshotMiss) as exc:
        mem.read(0x5000, 8)
    assert exc.value.addr == 0x5000 and mem.misses == [(0x5000, 8)]


def test_open_memory_reads_live_and_keeps_the_answer():
    live = BufferMemory({0x7000: b"live" * 4})
    mem = CapturedMemory({0x1000: b"\x01" * 16}, live=live)
    assert mem.read(0x7004, 4) == b"live"
    with pytest.raises(MemoryFault):
        mem.read(0x9000, 8)  # the live guest's fault, kept as a known fault
    mem.seal()
    assert mem.read(0x7004, 4) == b"live"  # kept from the live read
    with pytest.raises(MemoryFault) as exc:
        mem.read(0x9000, 8)
    assert not isinstance(exc.value, SnapshotMiss)
    assert not mem.misses


# -- recorded deliveries ---------------------------------------------------------------------------

def _replay(name: str, mutate=None):
    snap, record, maps, prog = load(DATA / name / "delivery.json")
    path = program(prog)
    if mutate is not None:
        mutate(snap)
    resolve = {prog["guest_path"]: path}.get
    want, got = replay(snap, record, maps, resolve, path, Variant(**prog["variant"]).shadow, prog["max_entries"])
    return snap, want, got


def test_recorded_deliveries_are_there():
    assert len(DELIVERIES) >= 6
    assert {n.rsplit("-", 1)[0] for n in DELIVERIES} >= {"fp-spin", "signal", "threads", "compat-fp"}


@pytest.mark.parametrize("name", DELIVERIES)
def test_recorded_delivery_replays_to_the_same_record(name):
    snap, want, got = _replay(name)
    # The verdicts come in the oracle registry's order, which is the order the oracle modules
    # were first imported in (another test module may import one first): compare by oracle.
    for d in (want, got):
        d["verdicts"] = sorted(d["verdicts"], key=lambda v: (v["oracle"], json.dumps(v, sort_keys=True)))
    for key in want:  # one key at a time: the first difference readable in the failure
        assert json.dumps(got[key], indent=0, sort_keys=True) == json.dumps(want[key], indent=0, sort_keys=True), key
    assert not snap.memory.misses
    # the record judged something real: the unwinder's frames and at least two oracles' frames
    assert len(want["frames"]) >= 3 and all(want["frames"].values())


def test_a_delivery_across_a_signal_frame_is_among_them():
    causes = set()
    for name in DELIVERIES:
        _, record, _, _ = load(DATA / name / "delivery.json")
        causes |= {d["cause"] for v in record["verdicts"] for d in v.get("divergences", []) if d.get("cause")}
    assert "signal-frame" in causes or "fp-frameless-function" in causes, causes


def test_a_stack_missing_from_the_snapshot_is_a_miss_not_a_silent_fault():
    name = next(n for n in DELIVERIES if n.startswith("fp-spin"))

    def drop_stack(snap):
        sp = snap.regs.sp
        for base in [b for b, d in snap.memory.regions.items() if b <= sp < b + len(d)]:
            del snap.memory.regions[base]
        snap.memory._bases = sorted(snap.memory.regions)

    snap, want, got = _replay(name, drop_stack)
    assert snap.memory.misses
    assert got["frames"] != want["frames"]


def test_a_foreign_file_is_refused(tmp_path):
    bad = tmp_path / "delivery.json"
    bad.write_text('{"format": "something else", "version": 1}')
    with pytest.raises(DeliveryFileError, match="format"):
        load(bad)
    doc = json.loads((DATA / DELIVERIES[0] / "delivery.json").read_text())
    doc["regs"]["rip"] = doc["regs"].pop("ip")  # a field UserRegs does not have
    bad.write_text(json.dumps(doc))
    with pytest.raises(DeliveryFileError, match="malformed"):
        load(bad)


def test_a_sample_at_the_trampolines_first_instruction_is_walked_through_it():
    """The handler has returned into __restore_rt and not yet run its syscall: the topmost frame
    is the trampoline itself.  Made from a recorded sample inside the handler: the
    registers after on_alarm's ret are those the CFI walk gives its trampoline frame (sp past the
    return address, the interrupted rbp).  CFI walks through the signal frame to the interrupted
    IP, and FP's missing frame is the signal-frame cause's, as deeper in the handler."""
    import dataclasses

    from harness.oracles.cfi import CFIOracle
    from harness.unwind.cfi import unwind_cfi
    from harness.unwind.maps import AddressSpace

    for name in (n for n in DELIVERIES if n.startswith("signal")):
        snap, record, maps, prog = load(DATA / name / "delivery.json")
        names = [f[2] for f in record["frames"]["cfi"]]
        if any(n.startswith("on_alarm+") for n in names):
            break  # a sample in the handler
    else:
        raise AssertionError("no recorded sample in the signal handler: re-record signal")
    path = program(prog)
    resolve = {prog["guest_path"]: path}.get
    space = AddressSpace.from_maps(maps, resolve, snap.memory)
    vdso = snap.memory.backing
    snap.memory.backing = None
    oracle = CFIOracle(space)
    inside = unwind_cfi(snap.memory, snap.regs, oracle.tables)
    at = next(i for i, n in enumerate(names) if n.startswith("on_alarm+")) + 1  # the trampoline's frame
    tramp = inside.frames[at]
    regs = dataclasses.replace(snap.regs, ip=tramp.ip, sp=tramp.sp, bp=tramp.fp)
    snap.memory.backing = vdso
    top = dataclasses.replace(snap, regs=regs, memory=snap.memory)
    want = dict(record)
    _, got = replay(top, want, maps, resolve, path, Variant(**prog["variant"]).shadow, prog["max_entries"])
    cfi = [f[0] for f in got["frames"]["cfi"]]
    assert cfi == [f[0] for f in record["frames"]["cfi"][at:]], got["frames"]["cfi"]  # through the signal frame
    fp = next(v for v in got["verdicts"] if v["oracle"] == "cfi")
    assert not fp.get("failed"), fp
    causes = {d.get("cause") for d in fp["divergences"]}
    assert "signal-frame" in causes and None not in causes, fp["divergences"]


def test_the_loaded_digest_ignores_what_only_debug_info_changes(tmp_path):
    """Two builds of one program differ in the build directory (a fresh mkdtemp, DW_AT_comp_dir),
    and so in the build-id note and the ELF header's e_shoff, both in the first PT_LOAD: the
    digest a recorded delivery names its binary by ignores those bytes, and no others."""
    import shutil

    from elftools.elf.elffile import ELFFile

    from harness.images.programs import build_program
    from harness.images.toolchain import get_toolchain

    built = build_program("callchain", get_toolchain("host"), Variant())
    with open(built.path, "rb") as f:
        elf = ELFFile(f)
        note = elf.get_section_by_name(".note.gnu.build-id")
        text = elf.get_section_by_name(".text")
        note_off, text_off = note["sh_offset"] + note["sh_size"] - 4, text["sh_offset"] + 16
    base = loaded_digest(built.path)

    def flipped(at: int, name: str) -> str:
        copy = tmp_path / name
        shutil.copy(built.path, copy)
        data = bytearray(copy.read_bytes())
        data[at] ^= 0xFF
        copy.write_bytes(bytes(data))
        return loaded_digest(copy)

    assert flipped(note_off, "build-id") == base  # (e_shoff moves with the section headers: not flipped here)
    assert flipped(text_off, "text") != base  # the code is what the digest is about


def test_a_child_exiting_in_a_noreturn_syscall_is_walked_from_the_syscall_not_the_next_function():
    """forkexec's child exits with exit_group from exit_from_here(), whose `syscall` is its last
    instruction (__builtin_unreachable after it): pt_regs' IP, the address after the syscall, is
    the first byte of the next function, the shadow hook __cyg_profile_func_exit.  The task is in
    exit_from_here's frame (CFA = rbp + 16), not at the hook's entry (CFA = rsp + 8, whose slot
    holds exit_from_here's stale padding: 0 or 0x2000 were read).  Recorded at the exit stop
    (``record_deliveries --point exit``); CFI must give the frame-pointer walk's callers."""
    import dataclasses

    from harness.memory import Overlay
    from harness.oracles.cfi import CFIOracle
    from harness.unwind.cfi import unwind_cfi
    from harness.unwind.maps import AddressSpace, FileBackedMemory
    from harness.unwind.user import unwind_user

    name = "forkexec-syscall-exit-0"
    snap, record, maps, prog = load(DATA / name / "delivery.json")
    assert snap.point.name == "exit" and snap.own == "child" and snap.regs.orig_ax == 231  # exit_group
    path = program(prog)
    space = AddressSpace.from_maps(maps, {prog["guest_path"]: path}.get, snap.memory)
    snap.memory.backing = Overlay(snap.memory.backing, FileBackedMemory(space))  # the code, as replay() reads it
    oracle = CFIOracle(space)
    ip = snap.regs.ip
    assert snap.memory.read(ip - 2, 2) == b"\x0f\x05"  # syscall, the function's last instruction
    assert oracle.tables(ip).rule_for(ip - 1) != oracle.tables(ip).rule_for(ip)  # two FDEs meet at ip
    fp = unwind_user(snap.memory, snap.regs)
    cfi = unwind_cfi(snap.memory, snap.regs, oracle.tables)
    assert len(fp.ips) >= 4 and cfi.ips[:len(fp.ips)] == fp.ips, (cfi.ips, cfi.stop, fp.ips)
    # The same registers outside a syscall (an NMI right at the hook's entry, which the hook is:
    # it is called at every instrumented function's exit) are looked up at the IP itself.
    at_entry = unwind_cfi(snap.memory, dataclasses.replace(snap.regs, orig_ax=(1 << 64) - 1), oracle.tables)
    assert at_entry.ips[1] == int.from_bytes(snap.memory.read(snap.regs.sp, 8), "little")
    # ... and so are those whose IP follows a syscall instruction the task did not return from
    # (a signal's handler, a new image's entry: rcx is no longer the IP `syscall` saved there).
    assert snap.regs.cx == ip
    assert unwind_cfi(snap.memory, dataclasses.replace(snap.regs, cx=0), oracle.tables).ips[1] == at_entry.ips[1]
    # ... and the whole check, as the engine makes it: CFI walks on to _start, and differs from
    # the FP walk only where that one ends, in glibc's frameless __libc_start_call_main.
    _, want, got = _replay(name)
    assert got["frames"]["cfi"][-1][2].startswith("_start+"), got["frames"]["cfi"]
    (v,) = [v for v in got["verdicts"] if v["oracle"] == "cfi"]
    assert [(d["kind"], d["want_index"], d["cause"]) for d in v["divergences"]] == [
        ("ends", len(fp.ips), "fp-frameless-function")], v
