"""The benchmark runs and reports its figures (the target, 200k FP frames/s, is printed by `harness
bench unwind`, not asserted: a timed assertion flakes on a loaded machine)."""

from harness.bench.unwind import bench_fp, bench_mixed


def test_bench_fp_and_mixed_run():
    fp = bench_fp(depth=200, min_seconds=0.2)
    mixed = bench_mixed(depth=200, min_seconds=0.2)
    for r in (fp, mixed):
        assert r["frames"] == r["walks"] * 200
        assert r["frames_per_s"] > 0
    print(f"fp {fp['frames_per_s']:,.0f} frames/s, mixed {mixed['frames_per_s']:,.0f} frames/s")
