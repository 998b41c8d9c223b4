"""Throughput of the unwind model on synthetic deep stacks in :class:`BufferMemory`.

``bench_fp()`` walks a frame-pointer chain, ``bench_mixed()`` a chain where frameless and
frame-pointer functions alternate, unwound through a table (the SFrame path) with FP fallback.
Each returns a dict (frames, walks, seconds, frames_per_s) and, with ``verbose``, prints one line.
Walks use ``max_entries`` above the depth so every frame of the chain is counted.
"""

from __future__ import annotations

import time

from .synth import fp_chain, mixed_chain
from .user import UnwindConfig, UserUnwinder


def _run(name: str, memory, regs, config: UnwindConfig, expect: int, min_seconds: float,
         verbose: bool) -> dict:
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
    if verbose:
        print(f"{name}: {out['frames_per_s']:,.0f} frames/s ({walks} walks of {expect} frames in {elapsed:.2f}s)")
    return out


def bench_fp(depth: int = 500, min_seconds: float = 1.0, verbose: bool = True) -> dict:
    s = fp_chain(depth)
    return _run("unwind-fp", s.memory, s.regs, UnwindConfig(max_entries=depth + 1), depth,
                min_seconds, verbose)


def bench_mixed(depth: int = 500, min_seconds: float = 1.0, verbose: bool = True) -> dict:
    spec = [("nofp" if i % 2 else "fp", i % 4 != 2) for i in range(depth - 1)] + [("fp", True)]
    s = mixed_chain(spec)
    table = s.table
    cfg = UnwindConfig(max_entries=depth + 1, tables_for=lambda ip: table)
    return _run("unwind-mixed", s.memory, s.regs, cfg, depth, min_seconds, verbose)


if __name__ == "__main__":
    bench_fp()
    bench_mixed()
