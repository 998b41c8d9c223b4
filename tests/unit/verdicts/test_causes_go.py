"""A Go program's stack (Debian's golang-go: static, frame pointers, .debug_frame CFI): the CFI
oracle ends where its rules say the stack ends (runtime.goexit's return-address slot holds 0),
and no cause proves a divergence at a frame it did not look at.

Before: the oracle went on to a frame at address 0 after runtime.goexit, and the verdict proved
that extra frame with ``fp-frameless-function`` (goexit sets up no frame pointer, so "the FP step
from it ended the walk"), a divergence the cause never saw: the FP walk had ended at fp = 0, the
stack's real end.  The program (tests/data/gospin.go) is built here with ``go build`` and
stopped under gdb on this machine (harness.tools.capture_gdb); CI installs golang-go (./dev)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from harness.oracles.base import OracleFrames
from harness.tools.capture_gdb import CaptureError, StopPoint, capture
from harness.unwind.snapshot import Snapshot
from harness.unwind.user import StopReason
from harness.verdicts.align import judge
from harness.verdicts.causes import CAUSES, _from, explain
from harness.verdicts.types import AGREE, ENDS, EXPLAINED, FAILURE, LOST, Divergence
from tests.support.cause_snapshots import function_symbols
from tests.support.cause_stacks import cfi_of, stack_of
from tests.support.gating import require
from tests.support.paths import TEST_DATA

SOURCE = TEST_DATA / "gospin.go"
GO = shutil.which("go") or ("/usr/bin/go" if os.path.exists("/usr/bin/go") else None)


@pytest.fixture(scope="module")
def go_stop(tmp_path_factory):
    """(binary, snapshot) of gospin stopped in main.mid, called from main.top."""
    require(GO is not None, "golang-go is not installed (./dev installs it)")
    require(shutil.which("gdb") is not None, "gdb is not installed")
    d = tmp_path_factory.mktemp("go")
    env = {**os.environ, "GOCACHE": str(d / "cache"), "GOPATH": str(d / "gopath"), "GO111MODULE": "off",
           "CGO_ENABLED": "0"}
    shutil.copy(SOURCE, d / "main.go")
    subprocess.run([GO, "build", "-o", str(d / "gospin"), "main.go"], cwd=d, env=env, check=True,
                   capture_output=True, timeout=300)
    binary = str(d / "gospin")
    # Stopped at main.leaf's call-free body: the Go runtime makes sched_getaffinity once
    # its program is mapped (osinit), and main.leaf runs again and again after that.
    stops = [StopPoint("leaf", "offset", "main.leaf", offset=6)]
    try:
        paths = capture([binary, "3"], stops, d / "snaps", loaded_syscall="sched_getaffinity")
    except CaptureError as exc:
        require(False, f"gdb could not stop gospin: {exc}")
    return binary, Snapshot.load(paths["leaf"])


def test_cfi_ends_at_goexit_not_at_a_frame_at_0(go_stop):
    binary, snap = go_stop
    syms = function_symbols(binary, ("runtime.goexit.abi0", "runtime.main", "main.main"))
    st = stack_of(snap, "fp")
    _oracle, frames = cfi_of(st)
    assert 0 not in frames.ips, frames
    goexit = syms["runtime.goexit.abi0"]
    assert goexit[0] < frames.ips[-1] < goexit[1], [hex(ip) for ip in frames.ips]
    assert frames.outermost and "return address 0" in frames.stop
    # The FP walk ends at fp = 0 at the same frame: the two agree there.
    assert st.trace.stop.reason is StopReason.END_OF_CHAIN and st.trace.ips[-1] == frames.ips[-1]
    v = judge(st, _oracle, frames)
    assert v.verdict in (AGREE, EXPLAINED), v
    assert not [d for d in v.divergences if d.kind == ENDS]


def test_no_cause_proves_the_old_extra_frame_at_0(go_stop):
    """The oracle's old answer, a frame at 0 past goexit: a failure (the oracle's to show), not
    a divergence fp-frameless-function proves."""
    _binary, snap = go_stop
    st = stack_of(snap, "fp")
    oracle, frames = cfi_of(st)
    old = OracleFrames(frames.ips + (0,), frames.marks, "no unwind info for IP at 0x0", False)
    v = judge(st, oracle, old)
    assert v.verdict == FAILURE
    bad = v.first_unexplained()
    assert bad.kind == ENDS and bad.want[bad.want_index] == 0 and bad.cause is None
    # fp-frameless-function's own look (goexit has no frame setup) would have accepted it.
    assert CAUSES["fp-frameless-function"].predicate(st, bad) is not None
    assert not explain(st, bad).explained


def test_a_cause_looks_at_the_step_that_diverged(go_stop):
    """A frame lost right after another lost one: the oracle's frame before it is not where the
    unwinder's step started, so no step cause examines it (``_from`` says so)."""
    _binary, snap = go_stop
    st = stack_of(snap, "fp")
    _oracle, frames = cfi_of(st)
    got, want = st.trace.ips, frames.ips
    assert got[0] == want[0] and got[1] != want[1]  # main.leaf sets up no frame: main.mid lost
    d = Divergence("fp", "cfi", LOST, 1, 1, got, want, frames.marks, frames.outermost)
    assert _from(d) == (want[0], True)
    later = Divergence("fp", "cfi", LOST, 1, 2, got, want, frames.marks, frames.outermost)
    assert _from(later) is None
    assert all(c.predicate(st, later) is None for c in CAUSES.values()
               if c.applies(later) and c.name.startswith(("fp-", "sframe-")))


@pytest.fixture(scope="module")
def go_sigreturn(go_stop, tmp_path_factory):
    """gospin at the entry of an rt_sigreturn: Go's SIGURG (asynchronous preemption, sent by
    sysmon to a goroutine running over 10 ms) was handled on the goroutine's signal stack, and
    its restorer (runtime.sigreturn: no 'S' CIE, Go has only .debug_frame) returns through it."""
    binary, _snap = go_stop
    d = tmp_path_factory.mktemp("go-sigreturn")
    stops = [StopPoint("sigreturn", "syscall", syscall="rt_sigreturn")]
    try:
        paths = capture([binary, "100000"], stops, d, loaded_syscall="sched_getaffinity")
    except CaptureError as exc:
        require(False, f"gdb saw no rt_sigreturn of gospin: {exc}")
    return binary, Snapshot.load(paths["sigreturn"])


def test_go_signal_frames_are_proven_by_the_restorers_code(go_sigreturn):
    """The walk from the registers rt_sigreturn restored, the request made at its entry: the
    restorer has no CFI with 'S', so the frame is read by the kernel's layout, proven by the
    restorer's code (mov $15,%rax; syscall) before the requested IP."""
    from dataclasses import replace

    from harness.oracles.base import Request
    from harness.oracles.cfi import kernel_sigframe_regs, signal_frame_regs
    from harness.oracles.regs import RegsOracle
    from harness.verdicts.types import REGS

    binary, snap = go_sigreturn
    want = snap.regs
    syms = function_symbols(binary, ("runtime.sigreturn.abi0",))
    start, _end = syms["runtime.sigreturn.abi0"]
    assert want.ip == start + 9  # after `mov $15,%rax; syscall`
    mem = snap.memory()
    assert signal_frame_regs(snap.address_space(), mem, want.ip, want.sp) is None  # no 'S' CIE
    restored = kernel_sigframe_regs(mem, start, want.sp)
    assert restored is not None and restored.sp != want.sp
    st = stack_of(snap, "fp", regs=replace(restored, cs=want.cs, ss=want.ss))
    st = replace(st, request=Request(want, syscall=15, own="main"))
    oracle = RegsOracle()
    v = judge(st, oracle, oracle.frames(st))
    assert v.verdict == EXPLAINED, v
    (d,) = v.divergences
    assert d.kind == REGS and d.cause == "sigreturn-restored" and d.evidence["frame_sp"] == want.sp
