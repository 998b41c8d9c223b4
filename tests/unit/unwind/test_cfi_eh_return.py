"""A C++ program that throws (tests/qemu/data/throw.cpp, built -O2 as a user builds it), stopped
in libgcc's _Unwind_RaiseException: the CFI oracle's eh_return window.

Flake campaign run b6: an NMI landed in _Unwind_RaiseException after uw_install_context_1 had
copied the landing frame's registers into its frame (the return-address slot holds main's call
site of outer, the saved rbp main's rbp, a loop sum at -O2).  FP and CFI both read those slots,
agreed on main+0x28 and parted after it in garbage, which no cause could prove; where main's rbp
is 0 (the first round, as under gdb here) they end together and "agree" on a stack that is not
the truth.  The CFI oracle now says the stack is not checked, and why.  The stop is
taken at the function's first ``rdsspq`` (the shadow-stack fix-up libgcc makes between the
install and the eh_return epilogue: inside the window), and, for the refusal, at its first call
(uw_init_context: its frame is its own, the return address follows __cxa_throw's call of it).

Built with the host's g++ and stopped under gdb on this machine (harness.tools.capture_gdb)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.oracles.base import NotChecked, OracleFrames
from harness.oracles.cfi import CFIOracle, eh_return_window
from harness.tools.capture_gdb import CaptureError, StopPoint, capture
from harness.unwind.snapshot import Snapshot
from harness.verdicts.align import judge
from harness.verdicts.types import NOT_CHECKED
from tests.support.cause_stacks import stack_of
from tests.support.gating import require
from tests.support.paths import REPO

SOURCE = REPO / "tests" / "qemu" / "data" / "throw.cpp"


def _libgcc(binary: str) -> str:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "libgcc_s.so" in line and "=>" in line:
            return line.split("=>")[1].split()[0]
    raise AssertionError(f"no libgcc_s in ldd {binary}: {out}")


def _stops(binary: str, stops: list[StopPoint], out) -> dict[str, Snapshot]:
    try:
        # set_robust_list: glibc's start-up makes it once every library is mapped
        paths = capture([binary, "100000"], stops, out, loaded_syscall="set_robust_list")
    except CaptureError as exc:
        require(False, f"gdb could not stop {binary}: {exc}")
    return {name: Snapshot.load(p) for name, p in paths.items()}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """{"dynamic": (binary, snapshots), "static-libgcc": (binary, snapshots)}: a window stop and an
    entry stop each, in libgcc_s.so.1 for the dynamic build, in the program's own copy of the
    unwinder for the build with -static-libgcc -static-libstdc++ (direct calls, no PLT)."""
    require(shutil.which("g++") is not None, "g++ is not installed")
    require(shutil.which("gdb") is not None, "gdb is not installed")
    d = tmp_path_factory.mktemp("eh")
    out = {}
    for name, flags in (("dynamic", []), ("static-libgcc", ["-static-libgcc", "-static-libstdc++"])):
        binary = str(d / name)
        subprocess.run(["g++", "-O2", "-g", *flags, "-o", binary, str(SOURCE)], check=True, capture_output=True,
                       timeout=300)
        if name == "dynamic":
            lib = _libgcc(binary)
            stops = [StopPoint("window", "insn", "_Unwind_RaiseException", "rdssp", lib=lib),
                     StopPoint("entry", "insn", "_Unwind_RaiseException", "call", lib=lib)]
        else:
            stops = [StopPoint("window", "insn", "_Unwind_RaiseException", "rdssp"),
                     StopPoint("entry", "insn", "_Unwind_RaiseException", "call")]
        out[name] = (binary, _stops(binary, stops, d / f"snaps-{name}"))
    return out


@pytest.mark.parametrize("build", ["dynamic", "static-libgcc"])
def test_in_the_window_cfi_is_not_checked(builds, build):
    _binary, snaps = builds[build]
    st = stack_of(snaps["window"], "fp")
    oracle = CFIOracle(st.space)
    walked = oracle._walk(st.memory, st.regs)
    # The CFI walk and the FP walk both read the landing frame's call site from the unwinder's
    # frame: main's call of outer, where the truth is __cxa_throw, deep, middle, outer, main.
    assert tuple(st.trace.ips[:2]) == walked.ips[:2], ([hex(a) for a in st.trace.ips], [hex(a) for a in walked.ips])
    assert st.code.function_at(walked.ips[1], True).name == "main"
    assert st.code.function_at(walked.ips[0]).name == "_Unwind_RaiseException"
    frames = oracle.frames(st)
    assert isinstance(frames, NotChecked) and not frames.failure, frames
    assert "_Unwind_RaiseException" in frames.reason and "_Z5outerl" in frames.reason, frames.reason
    v = judge(st, oracle, frames)
    assert v.verdict == NOT_CHECKED and v.reason == frames.reason, v


@pytest.mark.parametrize("build", ["dynamic", "static-libgcc"])
def test_before_the_window_cfi_is_checked(builds, build):
    """At uw_init_context's call the frame is _Unwind_RaiseException's own: its return address
    follows __cxa_throw's call of it, and the CFI walk is the truth, checked (deep's throw is in
    its .cold part, where -O2 puts the unlikely path).  Dynamic: the call goes through
    libstdc++'s PLT entry, whose GOT slot's relocation names the function."""
    _binary, snaps = builds[build]
    st = stack_of(snaps["entry"], "fp")
    frames = CFIOracle(st.space).frames(st)
    assert isinstance(frames, OracleFrames), frames
    names = [st.code.function_at(a, k > 0).name for k, a in enumerate(frames.ips[:6])]
    assert names == ["_Unwind_RaiseException", "__cxa_throw", "_Z4deepl.cold", "_Z6middlel", "_Z5outerl", "main"], names
    call = st.code.call_before(frames.ips[1])
    assert st.code.callee(call) == "_Unwind_RaiseException", call
    assert eh_return_window(st.space, st.code, frames.ips) is None


def test_a_function_without_eh_return_is_never_in_the_window(builds):
    """main's frame at the same stop: no EH data registers in its FDE."""
    _binary, snaps = builds["static-libgcc"]
    st = stack_of(snaps["entry"], "fp")
    frames = CFIOracle(st.space).frames(st)
    assert eh_return_window(st.space, st.code, frames.ips[5:]) is None


@pytest.mark.parametrize("build", ["dynamic", "static-libgcc"])
def test_a_return_address_after_no_direct_call_says_nothing(builds, build):
    """In the window's function, a return address that follows no call (here: main's first byte)
    or an indirect one (here: _Unwind_RaiseException's own call of the personality routine, through
    a register) names no callee: nothing tells the landing frame's call site from the function's
    own frame, and the walk stands.  The pairs are made from the stop's real code."""
    _binary, snaps = builds[build]
    st = stack_of(snaps["window"], "fp")
    ip = st.regs.ip
    f = st.code.function_at(ip)
    assert f.name == "_Unwind_RaiseException"
    main = st.code.function_at(CFIOracle(st.space)._walk(st.memory, st.regs).ips[1], True)
    assert st.code.call_before(main.start) is None
    assert eh_return_window(st.space, st.code, (ip, main.start)) is None
    indirect = next(a for a in range(f.start + 2, f.start + f.size)
                    if (c := st.code.call_before(a)) is not None and st.code.callee(c) is None)
    assert eh_return_window(st.space, st.code, (ip, indirect)) is None
