"""The benchmark runs and stays in the right order of magnitude (the target is 200k FP frames/s)."""

from harness.unwind.bench import bench_fp, bench_mixed


def test_bench_fp_and_mixed_run():
    fp = bench_fp(depth=200, min_seconds=0.2, verbose=False)
    mixed = bench_mixed(depth=200, min_seconds=0.2, verbose=False)
    for r in (fp, mixed):
        assert r["frames"] == r["walks"] * 200
    # A loose floor: CI machines are shared; a drop below this is a regression in apply_rule or
    # the page cache, not noise.
    assert fp["frames_per_s"] > 50_000
