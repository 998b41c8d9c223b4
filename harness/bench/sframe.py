"""Lookup throughput of the SFrame decoder, for ``harness bench unwind``."""

from __future__ import annotations

import os
import random
import time

from ..sframe.elf import SFrameTable


def bench_lookups(path: str | os.PathLike, n: int = 200_000, *, seed: int = 0) -> dict:
    """Time parsing the SFrame section of ``path`` and ``n`` rule_for() lookups at random PCs.

    PCs are drawn uniformly from the executable PT_LOAD segments, so some fall outside every
    FDE (``hit_rate`` says how many found a rule).  ``cold_*`` is the first pass, which decodes
    each function's FREs on first use; the second pass over the same PCs is all cache hits.
    """
    t0 = time.perf_counter()
    table = SFrameTable.from_elf(path)
    parse_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    SFrameTable.from_elf(path).section.decode_all()
    parse_and_decode_all_s = time.perf_counter() - t0

    ranges = table.text_ranges or [(f.func_start, f.func_end) for f in table.fdes[:1]]
    weights = [b - a for a, b in ranges]
    rng = random.Random(seed)
    pcs = [rng.randrange(a, b) for a, b in rng.choices(ranges, weights=weights, k=n)] if ranges else []
    rule_for = table.section.rule_for

    t0 = time.perf_counter()
    hits = sum(1 for pc in pcs if rule_for(pc) is not None)
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for pc in pcs:
        rule_for(pc)
    warm_s = time.perf_counter() - t0

    # The same number of lookups at PCs inside FDEs only (every one finds a rule).
    fdes = [f for f in table.fdes if f.func_size]
    in_fde = [f.func_start + rng.randrange(f.func_size) for f in rng.choices(fdes, k=n)] if fdes else []
    t0 = time.perf_counter()
    for pc in in_fde:
        rule_for(pc)
    in_fde_s = time.perf_counter() - t0

    h = table.header
    return {
        "path": str(path),
        "version": h.version,
        "num_fdes": h.num_fdes,
        "num_fres": h.num_fres,
        "parse_s": parse_s,
        "parse_and_decode_all_s": parse_and_decode_all_s,
        "lookups": n,
        "hit_rate": hits / n if n else 0.0,
        "cold_lookups_per_s": n / cold_s if cold_s else 0.0,
        "lookups_per_s": n / warm_s if warm_s else 0.0,
        "in_fde_lookups_per_s": len(in_fde) / in_fde_s if in_fde_s else 0.0,
    }
