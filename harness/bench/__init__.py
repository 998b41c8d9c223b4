"""Benchmarks (a driver room): each measures one layer and returns its figures as data; the
renderers are in :mod:`harness.report.bench` and ``harness bench`` (:mod:`harness.commands.bench`)
prints them.

* :mod:`.transport`: what a stop and a read cost through each debugger transport (a guest);
* :mod:`.unwind`: the unwind model's throughput on synthetic deep stacks (no guest);
* :mod:`.sframe`: lookups per second in a real binary's SFrame section (no guest).
"""
