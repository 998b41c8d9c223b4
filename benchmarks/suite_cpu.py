"""Where the unit suite's CPU goes, per test and per module (a measurement plugin; not loaded by
the suite itself).

The machine the suite is measured on is often shared (QEMU campaigns, mutmut): wall times are then
noise, CPU seconds are not.  This plugin takes ``os.times()`` (the process's own user + system
time and that of its reaped children: compilers, objdump, bpftool, the CLI in a subprocess)
around each test's set-up, call and teardown, and appends one JSON line a phase to
``$SUITE_CPU_OUT`` (each pytest-xdist worker appends to the same file: lines are short, written
whole).  Then ``python benchmarks/suite_cpu.py FILE`` sums them per module::

    SUITE_CPU_OUT=/tmp/cpu.jsonl PYTHONPATH=. nice -n 19 .venv/bin/python -m pytest -p benchmarks.suite_cpu \\
        -m "not qemu" -n 2 --dist loadfile -q -p no:cacheprovider tests
    .venv/bin/python benchmarks/suite_cpu.py /tmp/cpu.jsonl

A module-scoped fixture's CPU is counted in the set-up of the module's first test, as pytest
runs it there.  What no test phase holds (collection, worker start-up) is the difference between
``/usr/bin/time``'s figure and the sum here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict

import pytest


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _write(record: dict) -> None:
    path = os.environ.get("SUITE_CPU_OUT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _timed(when: str):
    """A hook wrapper that writes the CPU its phase (``when``) of each test took."""
    @pytest.hookimpl(wrapper=True)
    def hook(item):
        start = _cpu()
        try:
            return (yield)
        finally:
            _write({"test": item.nodeid, "when": when, "cpu": round(_cpu() - start, 4),
                    "end": round(time.time(), 2), "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")})
    return hook


pytest_runtest_setup = _timed("setup")
pytest_runtest_call = _timed("call")
pytest_runtest_teardown = _timed("teardown")


def summary(path: str, top: int = 40) -> str:
    modules: dict[str, float] = defaultdict(float)
    workers: dict[str, float] = defaultdict(float)
    tests: dict[str, float] = defaultdict(float)
    ends: dict[str, float] = {}
    last: dict[str, list[str]] = defaultdict(list)  # a worker's modules in the order it ran them
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            module = r["test"].split("::")[0]
            modules[module] += r["cpu"]
            workers[r["worker"]] += r["cpu"]
            tests[r["test"]] += r["cpu"]
            ends[r["worker"]] = max(ends.get(r["worker"], 0), r.get("end", 0))
            if not last[r["worker"]] or last[r["worker"]][-1] != module:
                last[r["worker"]].append(module)
    first_end = min(ends.values())
    out = [f"tests' CPU: {sum(modules.values()):.1f} s; per worker: "
           + ", ".join(f"{w} {c:.1f} s (its last test ended {ends[w] - first_end:+.1f} s after the first "
                       f"worker's; its last modules: {', '.join(m.rsplit('/', 1)[-1] for m in last[w][-3:])})"
                       for w, c in sorted(workers.items())), "", "per module:"]
    out += [f"{c:8.2f}  {m}" for m, c in sorted(modules.items(), key=lambda x: -x[1])[:top]]
    out += ["", "per test:"]
    out += [f"{c:8.2f}  {t}" for t, c in sorted(tests.items(), key=lambda x: -x[1])[:top]]
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40))
