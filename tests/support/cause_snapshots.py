"""Real binaries and gdb-captured stacks for the tests of divergence causes.

Session fixtures, registered for the whole suite by tests/conftest.py (``pytest_plugins``), so
each is captured once a session whichever test modules use it:

* ``tailcall_snaps``: ``{toolchain: CauseCapture | str}`` for host (SFrame V1), trixie (V2) and
  sid (V3): ``guest_programs/tailcall.c`` built ``Variant(frame_pointers=False, opt="-O2")``
  (SFrame, static, 64-bit), one gdb run each, stops :data:`TAILCALL_STOPS`.  A string says why a
  toolchain's capture is missing; :func:`got` turns it into a skip (a failure in CI).
* ``tailcall_fp_snaps``: the same for ``Variant(opt="-O2")`` (frame pointers on), where the FP
  fallback at middle's end recovers the right caller.  Built only when a test asks for it.
* ``fp_snaps``: ``CauseCapture`` of ``guest_programs/callchain.c`` built by the host toolchain
  with ``Variant()`` (-O1, frame pointers, SFrame, static), args ``1000000 raw``, stopped at
  the getppid syscall entry inside ``c``: FP, SFrame and CFI all give c <- b <- a <- main <-
  __libc_start_call_main there.  Tests corrupt copies of its stack with :func:`corrupt`.
* ``recurse_snaps``: ``guest_programs/recurse.c`` built by the host toolchain with ``Variant()``,
  args ``600``, stopped at rec(0)'s ``call bottom``: 606 frames, deeper than UNWIND_MAX_ENTRIES
  (the walk stops at 510: the cause ``truncated``, the walk record's ``truncated`` flag).

The tailcall layout (guest_programs/tailcall.c): main -> outer -> middle -> die -> spin -> leaf,
``middle`` ends with ``call die`` and ``die`` with ``call spin`` (both callees noreturn).

* Stops ``die-entry`` (die's first instruction) and ``die-call`` (at die's ``call spin``): the
  caller's frame has IP = middle's end, which no SFrame FDE covers (padding up to outer).
* Stop ``spin-call`` (at spin's ``call leaf``): the caller's frame has IP = die's end, which is
  middle's first byte: the SFrame lookup finds middle's FDE (the wrong function's).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.images.errors import ImageError
from harness.images.programs import Variant
from harness.memory import Memory, MemoryFault
from harness.sframe.elf import SFrameTable
from harness.tools.capture_gdb import CaptureError, StopPoint, capture_program
from harness.unwind.snapshot import Snapshot
from tests.support.gating import require

TOOLCHAINS = ("host", "trixie", "sid")
ITER = "1000000"

TAILCALL_NOFP = Variant(frame_pointers=False, opt="-O2")
TAILCALL_FP = Variant(opt="-O2")
TAILCALL_FUNCS = ("leaf", "spin", "die", "middle", "outer", "main")
TAILCALL_STOPS = [
    StopPoint("die-entry", "break", "die"),
    StopPoint("die-call", "insn", "die", "<spin>"),  # a few instructions in: at `call spin`
    StopPoint("spin-call", "insn", "spin", "<leaf>"),  # one frame deeper: at spin's `call leaf`
]

FP_VARIANT = Variant()
FP_STOPS = [StopPoint("c-raw", "syscall", syscall="getppid")]


@dataclass
class CauseCapture:
    """One build of a guest program and its snapshots, by stop name."""

    program: str
    toolchain: str
    variant: Variant
    binary: str
    snaps: dict[str, Snapshot]
    symbols: dict[str, tuple[int, int]]  # function -> (start, end), link-time (= run-time: static)

    @property
    def id(self) -> str:
        return f"{self.program}-{self.toolchain}-{self.variant.tag}"

    def start(self, func: str) -> int:
        return self.symbols[func][0]

    def end(self, func: str) -> int:
        return self.symbols[func][1]

    def sframe(self) -> SFrameTable:
        """The binary's SFrame table (static, non-PIE: link-time addresses are run-time ones)."""
        return SFrameTable.from_elf(self.binary)


def got(captures: dict, key) -> CauseCapture:
    """``captures[key]``; a string there says why it is missing (skipped locally, a failure in CI)."""
    c = captures[key]
    require(not isinstance(c, str), c if isinstance(c, str) else "")
    return c


def function_symbols(binary: str | Path, names) -> dict[str, tuple[int, int]]:
    """name -> [start, end) of the ``STT_FUNC`` symbols of ``binary``'s .symtab named in ``names``
    (the last of a name).  Read with harness.unwind.elfsyms, which tests/unit/unwind/test_elfsyms.py
    holds equal to pyelftools symbol by symbol: pyelftools' own reading took about 0.25 s a static
    binary (25,000 symbols through construct), 21 times a session."""
    from harness.unwind.elfsyms import STT_FUNC, symbols
    from harness.unwind.maps import ElfImage

    names = set(names)
    if not names:
        return {}
    table = symbols(ElfImage.from_path(binary), ".symtab")
    assert table is not None, f"{binary}: no .symtab"
    return {s.name: (s.value, s.value + s.size) for s in table if s.name in names and s.type == STT_FUNC}


def _capture(root: Path, name: str, tc, variant: Variant, args: list[str], stops, funcs, **kw) -> CauseCapture:
    from harness.images.programs import build_program

    prog = build_program(name, tc, variant)
    d = root / f"{name}-{tc.name}-{variant.tag}"
    paths = capture_program(prog, args, stops, d, **kw)
    return CauseCapture(name, tc.name, variant, str(prog.path),
                        {n: Snapshot.load(p) for n, p in paths.items()},
                        function_symbols(prog.path, funcs))


def _tailcall(tmp_path_factory, variant: Variant) -> dict[str, CauseCapture | str]:
    from harness.images.toolchain import get_toolchain

    if shutil.which("gdb") is None:
        return {t: "gdb is not installed" for t in TOOLCHAINS}
    root = tmp_path_factory.mktemp(f"tailcall-{variant.tag}")
    out: dict[str, CauseCapture | str] = {}
    for tc_name in TOOLCHAINS:
        try:
            tc = get_toolchain(tc_name)
            out[tc_name] = _capture(root, "tailcall", tc, variant, [ITER, "raw"], TAILCALL_STOPS,
                                    TAILCALL_FUNCS)
        except (ImageError, CaptureError) as exc:
            out[tc_name] = f"tailcall [{variant.tag}] with {tc_name}: {exc}"
    return out


@pytest.fixture(scope="session")
def tailcall_snaps(tmp_path_factory) -> dict[str, CauseCapture | str]:
    """``{toolchain: CauseCapture}`` of tailcall.c, -O2 without frame pointers, SFrame, static."""
    return _tailcall(tmp_path_factory, TAILCALL_NOFP)


@pytest.fixture(scope="session")
def tailcall_fp_snaps(tmp_path_factory) -> dict[str, CauseCapture | str]:
    """``{toolchain: CauseCapture}`` of tailcall.c, -O2 with frame pointers, SFrame, static."""
    return _tailcall(tmp_path_factory, TAILCALL_FP)


@pytest.fixture(scope="session")
def fp_snaps(tmp_path_factory) -> CauseCapture:
    """callchain.c (host, -O1, frame pointers, SFrame, static) stopped at getppid inside c:
    ``snaps["c-raw"]``."""
    from harness.images.toolchain import get_toolchain

    require(shutil.which("gdb") is not None, "gdb is not installed")
    try:
        return _capture(tmp_path_factory.mktemp("fp-callchain"), "callchain", get_toolchain("host"),
                        FP_VARIANT, [ITER, "raw"], FP_STOPS, ("c", "b", "a", "main"))
    except (ImageError, CaptureError) as exc:
        require(False, f"callchain [{FP_VARIANT.tag}] with host: {exc}")
        raise  # not reached: require skips or fails


@pytest.fixture(scope="session")
def recurse_snaps(tmp_path_factory) -> CauseCapture:
    """recurse.c 600 (host, fp, static) at rec(0)'s call of bottom: 600 rec frames deep, 606
    frames in all, deeper than UNWIND_MAX_ENTRIES.  It makes no getppid: the stops are set at
    static glibc's first brk, before main."""
    from harness.images.toolchain import get_toolchain

    require(shutil.which("gdb") is not None, "gdb is not installed")
    try:
        return _capture(tmp_path_factory.mktemp("recurse"), "recurse", get_toolchain("host"), Variant(),
                        ["600"], [StopPoint("rec-bottom", "insn", "rec", "<bottom>")], (), loaded_syscall="brk")
    except (ImageError, CaptureError) as exc:
        require(False, f"recurse [{Variant().tag}] with host: {exc}")
        raise  # not reached: require skips or fails


class PatchedMemory:
    """``base`` with ``data`` at ``addr`` instead of what is there (``harness.memory.Memory``)."""

    def __init__(self, base: Memory, addr: int, data: bytes):
        self.base = base
        self.addr = addr
        self.data = bytes(data)

    def read(self, addr: int, size: int) -> bytes:
        lo, hi = self.addr, self.addr + len(self.data)
        if lo <= addr and addr + size <= hi:  # entirely inside the patch
            return self.data[addr - lo:addr - lo + size]
        out = bytearray(self.base.read(addr, size))  # faults where the base faults
        a, b = max(addr, lo), min(addr + size, hi)
        if a < b:
            out[a - addr:b - addr] = self.data[a - lo:b - lo]
        return bytes(out)


def corrupt(snapshot: Snapshot | Memory, addr: int, data: bytes) -> Memory:
    """A memory view of ``snapshot`` (or of another memory, so patches stack) with ``data``
    written at ``addr``.  The snapshot itself is not touched.  Raises :class:`MemoryFault` if
    ``addr`` is not readable there: a patch of unmapped memory would invent a mapping."""
    base = snapshot.memory() if isinstance(snapshot, Snapshot) else snapshot
    base.read(addr, len(data))  # MemoryFault for a patch outside readable memory
    return PatchedMemory(base, addr, data)


__all__ = ["CauseCapture", "MemoryFault", "PatchedMemory", "TAILCALL_STOPS", "TOOLCHAINS", "corrupt",
           "fp_snaps", "function_symbols", "got", "tailcall_fp_snaps", "tailcall_snaps"]
