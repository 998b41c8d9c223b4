"""Throughput of the unwind model on synthetic deep stacks in :class:`BufferMemory`.

``bench_fp()`` walks a frame-pointer chain, ``bench_mixed()`` a chain where frameless and
frame-pointer functions alternate, unwound through a table (the SFrame path) with FP fallback.
Each returns a dict (name, frames, walks, depth, seconds, frames_per_s); its line is
:func:`harness.report.bench.unwind_line`.
Walks use ``max_entries`` above the depth so every frame of the chain is counted.
"""

from __future__ import annotations

import time

from ..sframe.elf import SFrameTable
from ..sframe.encode import FDEData, FREData, encode_section
from ..unwind.synth import fp_chain, mixed_chain
from ..unwind.user import UnwindConfig, UserUnwinder


def _run(name: str, memory, regs, config: UnwindConfig, expect: int, min_seconds: float) -> dict:
    unwinder = UserUnwinder(memory, config)
    first = unwinder.unwind(regs)
    if len(first) != expect:
        raise AssertionError(f"{name}: synthetic chain unwound to {len(first)} frames, expected {expect}")
    frames = walks = 0
    t0 = time.perf_counter()
    elapsed = 0.0
    while elapsed < min_seconds:
        frames += len(unwinder.unwind(regs))
        walks += 1
        elapsed = time.perf_counter() - t0
    out = {"name": name, "frames": frames, "walks": walks, "depth": expect, "seconds": elapsed,
           "frames_per_s": frames / elapsed}
    return out


def bench_fp(depth: int = 500, min_seconds: float = 1.0) -> dict:
    s = fp_chain(depth)
    return _run("unwind-fp", s.memory, s.regs, UnwindConfig(max_entries=depth + 1), depth,
                min_seconds)


def bench_mixed(depth: int = 500, min_seconds: float = 1.0, real_sframe: bool = True) -> dict:
    """Frameless and FP functions alternate; 3 in 4 functions have SFrame, the rest fall back to FP.

    With ``real_sframe`` the rules come from a V3 section written by ``harness.sframe.encode``
    and decoded by ``SFrameTable.from_bytes_at`` (lookup cost included), else from RangeRules.
    """
    spec = [("nofp" if i % 2 else "fp", i % 4 != 2) for i in range(depth - 1)] + [("fp", False)]
    s = mixed_chain(spec, locals_size=24)
    table = s.table
    name = "unwind-mixed(range-rules)"
    if real_sframe:
        table, name = _sframe_table(spec, s.funcs, locals_size=24), "unwind-mixed(sframe-v3)"
    cfg = UnwindConfig(max_entries=depth + 1, tables_for=lambda ip: table)
    return _run(name, s.memory, s.regs, cfg, depth, min_seconds)


def _sframe_table(spec, funcs, locals_size: int, func_size: int = 0x100):
    """The SFrame section gas would emit for mixed_chain's functions (SP-based CFA, RA at -8)."""
    fdes = []
    for (kind, has_table), start in zip(spec, funcs, strict=True):
        if not has_table:
            continue
        words = [locals_size + 16, -16] if kind == "fp" else [locals_size + 8]
        fdes.append(FDEData(start, func_size, [FREData(0, words)]))
    vaddr = funcs[-1] + 0x10000
    return SFrameTable.from_bytes_at(encode_section(fdes, vaddr=vaddr), vaddr)
