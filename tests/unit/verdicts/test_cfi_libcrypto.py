"""Debian's libcrypto.so.3 (OpenSSL's perlasm): the CFI oracle reads a CFA the code saved on the
stack, ``*(rsp + N) + M``, and walks on.

Before: ``DW_CFA_def_cfa_expression (DW_OP_breg7 (rsp): N; DW_OP_deref; DW_OP_plus_uconst: M)``
was "unwind info not supported by this model (CFA expression: op DW_OP_deref)" (only a final
DW_OP_deref was evaluated), the CFI walk of an NMI sample in sha256_block_data_order_avx2 ended
at its first frame, and the FP walk's frame past it (rbp is a data pointer there) was a failure
no cause proved (``openssl dgst -sha256`` on QEMU 7.2, whose CPU model has AVX2 but not the SHA
extensions: tests/qemu/test_users_binaries.py).  cfi-no-fde did not apply, an FDE covers the IP.

tests/data/sha_spin.c hashes with Debian's libcrypto (the SHA extensions hidden, as QEMU 7.2's
CPU has none) under a profiling timer; its handler makes a getppid, where gdb stops it, when the
timer interrupted libcrypto in a row whose CFA is such an expression.  The signal frame holds the
registers the timer interrupted, as an NMI sample would have them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import replace

import pytest

from harness.images.errors import ImageError
from harness.oracles.cfi import CFIOracle, signal_frame_regs
from harness.regs import UserRegs
from harness.rule import ValueRule
from harness.tools.capture_gdb import CaptureError, StopPoint, capture
from harness.unwind.cfi import X86_64, UnsupportedCFI, cfi_table, cfi_tables_for, unwind_cfi
from harness.unwind.maps import AddressSpace, load_image
from harness.unwind.snapshot import Snapshot
from harness.unwind.symbolize import Symbolizer
from harness.unwind.user import StopReason
from harness.verdicts.align import judge
from harness.verdicts.causes import CAUSES, explain
from harness.verdicts.types import DIFFERS, ENDS, EXPLAINED, PAST_END, Divergence
from tests.support.cause_stacks import cfi_of, stack_of
from tests.support.gating import require
from tests.support.paths import TEST_DATA

LIBCRYPTO = "/usr/lib/x86_64-linux-gnu/libcrypto.so.3"  # Debian's libssl3 (./dev installs openssl)
H1_FRAME = 0xE9B6F8B9BA8FD5CF  # the FP walk's frame past the IP in the flake (camp-h1)
READ_PLUS = re.compile(r"DW_OP_breg(\d+) \(\w+\): (-?\d+); DW_OP_deref; DW_OP_plus_uconst: (\d+)")


def read_plus_rows(path: str) -> list[tuple[int, int]]:
    """[start, end) of every row of ``path`` whose CFA is ``*(reg + N) + M``, link-time."""
    table = cfi_table(load_image(path))
    out = []
    for fde in table.fdes():
        end = fde["initial_location"] + fde["address_range"]
        rows = fde.get_decoded().table
        for k, row in enumerate(rows):
            try:
                rule = table.rule_for_link(row["pc"])
            except UnsupportedCFI:
                continue
            if rule.cfa.deref and rule.cfa.add:
                out.append((row["pc"], rows[k + 1]["pc"] if k + 1 < len(rows) else end))
    return out


@pytest.fixture(scope="module")
def sha_tick(tmp_path_factory):
    """(binary, snapshot) of sha_spin at the getppid its SIGPROF handler makes."""
    from harness.images.toolchain import get_toolchain

    require(os.path.exists(LIBCRYPTO), f"{LIBCRYPTO} is not installed (./dev installs openssl)")
    require(shutil.which("gdb") is not None, "gdb is not installed")
    d = tmp_path_factory.mktemp("sha")
    shutil.copy(TEST_DATA / "sha_spin.c", d / "sha_spin.c")
    binary = str(d / "sha_spin")
    rows = read_plus_rows(LIBCRYPTO)
    assert rows, f"{LIBCRYPTO}: no CFA *(reg + N) + M"
    try:
        get_toolchain("host").run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-o", binary, "sha_spin.c",
                                   LIBCRYPTO], cwd=str(d))
        args = [f"{a:x}" for row in rows for a in row]
        paths = capture([binary, *args], [StopPoint("tick", "syscall", syscall="getppid")], d / "snaps",
                        loaded_syscall="sched_yield")
    except (ImageError, CaptureError) as exc:
        require(False, f"sha_spin.c with the host gcc: {exc}")
        raise
    return binary, Snapshot.load(paths["tick"])


def interrupted(snap: Snapshot) -> UserRegs:
    """The registers the timer interrupted, from the handler's signal frame ('S' CIE)."""
    t = unwind_cfi(snap.memory(), snap.regs, cfi_tables_for(snap.address_space()))
    assert t.stop.reason is StopReason.UNSUPPORTED_RULE and "signal frame" in t.stop.detail, t.stop
    regs = signal_frame_regs(snap.address_space(), snap.memory(), t.frames[-1].ip, t.frames[-1].sp)
    assert regs is not None
    return replace(regs, cs=snap.regs.cs, ss=snap.regs.ss)


def test_readelf_and_the_oracle_read_every_saved_cfa_alike():
    """Every ``breg; deref; plus_uconst`` CFA of libcrypto (readelf's decoding) is the oracle's
    ``*(reg + N) + M`` in its FDE; the CFA expressions of another shape are the PLT's and
    bn_mul_mont's (``rsp + 8 + r9 * 8``, read: a register times 8 stays unsupported)."""
    require(os.path.exists(LIBCRYPTO), f"{LIBCRYPTO} is not installed (./dev installs openssl)")
    text = subprocess.run(["readelf", "--debug-dump=frames", LIBCRYPTO], capture_output=True, text=True,
                          check=True).stdout
    want: dict[int, set[ValueRule]] = {}
    other = []
    fde = None
    for line in text.splitlines():
        m = re.search(r"FDE cie=\w+ pc=([0-9a-f]+)\.\.", line)
        if m:
            fde = int(m.group(1), 16)
        m = re.search(r"DW_CFA_def_cfa_expression \((.*)\)$", line)
        if m:
            rp = READ_PLUS.fullmatch(m.group(1))
            if rp is None:
                other.append(m.group(1))
                continue
            rule = ValueRule(X86_64.base(int(rp.group(1))), int(rp.group(2)), True, int(rp.group(3)))
            want.setdefault(fde, set()).add(rule)
    table = cfi_table(load_image(LIBCRYPTO))
    got: dict[int, set[ValueRule]] = {}
    unsupported = []
    for f in table.fdes():
        for row in f.get_decoded().table:
            if row["cfa"].expr is None:
                continue
            try:
                rule = table.rule_for_link(row["pc"])
            except UnsupportedCFI as exc:
                unsupported.append(str(exc))
                continue
            if rule.cfa.deref:
                got.setdefault(f["initial_location"], set()).add(rule.cfa)
    assert want and got == want
    assert all("DW_OP_mul" in o for o in other if "DW_OP_breg16" not in o), other  # the PLT's reads rip
    assert unsupported and all("DW_OP_mul of a register or memory value" in u for u in unsupported)


def test_the_oracle_walks_from_the_handler_through_the_saved_cfa(sha_tick):
    """From the handler: __restore_rt's signal frame, the interrupted IP in a row ``*(reg + N) + M``,
    then libcrypto's callers, the program's main and _start: the outermost frame."""
    _binary, snap = sha_tick
    st = stack_of(snap, "fp")
    _oracle, frames = cfi_of(st)
    regs = interrupted(snap)
    assert regs.ip in frames.ips
    k = frames.ips.index(regs.ip)
    assert k in frames.marks  # looked up at itself: an interrupted IP
    e = st.space.elf_at(regs.ip)
    assert e.path == LIBCRYPTO
    rule = cfi_table(e.image).rule_for_link(e.link_address(regs.ip))
    assert rule.cfa.deref and rule.cfa.add, rule
    names = [Symbolizer(st.space).name(ip) for ip in frames.ips[k + 1:]]
    assert any(n.startswith("SHA256+") for n in names) and any(n.startswith("main+") for n in names), names
    assert names[-1].startswith("_start+") and frames.outermost and "undefined" in frames.stop, names


def test_fp_from_the_interrupted_registers_is_explained(sha_tick):
    """The sample's own walk: FP takes rbp (a data pointer of the hash) for a frame pointer, CFI
    reads the caller's rsp where the function saved it; fp-frameless-function proves the step."""
    _binary, snap = sha_tick
    st = stack_of(snap, "fp", regs=interrupted(snap))
    oracle, frames = cfi_of(st)
    assert frames.outermost and len(frames.ips) > 4
    v = judge(st, oracle, frames)
    assert v.verdict == EXPLAINED, v
    (d,) = v.divergences
    assert (d.got_index, d.want_index) == (1, 1) and d.kind in (DIFFERS, ENDS), d
    assert d.cause == "fp-frameless-function" and d.evidence["function"].startswith("libcrypto.so.3+"), d


def test_the_old_answer_was_a_failure_no_cause_proves(sha_tick):
    """The oracle's old answer at that IP: its first frame only, not the outermost; the FP walk
    went on to the word at rbp + 8 (h1's: 0xe9b6f8b9ba8fd5cf, built here by hand: where the timer
    interrupts decides whether rbp points at the stack).  No cause proves that frame: cfi-no-fde
    refuses, an FDE covers the IP, so the flake failed."""
    _binary, snap = sha_tick
    st = stack_of(snap, "fp", regs=interrupted(snap))
    ip = st.regs.ip
    d = Divergence("fp", "cfi", PAST_END, 1, 1, (ip, H1_FRAME), (ip,), frozenset({0}), False)
    assert CAUSES["cfi-no-fde"].predicate(st, d) is None
    assert not explain(st, d).explained


@pytest.mark.parametrize("sp,want", [
    (0x7FFFFFFFE000, [(0x7FFFFFFFD000, 0x1000)]),  # page-aligned: *(rsp - 8) is on the page below
    (0x7FFFFFFFE078, [(0x7FFFFFFFD000, 0x1000)]),  # the red zone reaches below sp's page
    (0x7FFFFFFFE080, []),
    (0x7FFFFFFFE400, []),
])
def test_the_oracle_captures_the_red_zone_below_sps_page(sp, want):
    """The stop's capture starts at sp's page; the oracle asks for the page below where the red
    zone reaches into it (sha_spin's timer has interrupted the AVX2 code at a page-aligned sp)."""
    oracle = CFIOracle(AddressSpace([]))
    assert oracle.captures(UserRegs(sp=sp), 0) == want
    assert oracle.captures(UserRegs(sp=sp & 0xFFFFFFFF, cs=0x23), 0) == []  # i386: no red zone
