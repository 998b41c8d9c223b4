"""The live fuzzer's breadth on a real guest (issue 35 item 3): generated programs built by
harness fuzz's own build (harness.fuzz.build), sampled in one guest by check_live.

- i386 (``-m32``) programs, static with frame pointers and dynamic without (sid's root, its
  lib32 loader): the kernel's compat frame-pointer walk (the model's, 4-byte words) against the
  CFI oracle's i386 walk, every stack agreeing or proven by a cause;
- vDSO leaves (x86-64 and i386): the leaf loops in clock_gettime/gettimeofday, stacks are sampled
  inside the vDSO and the CFI oracle steps out of it by the vDSO's own .eh_frame back into the
  program (Result.vdso_stacks, and no ``vdso-lost``);
- every kernel flavour a campaign names with ``--kernel`` (the default cloud kernel, ``generic``,
  ``rt``, and a built tree, ``tree:PATH``), two programs each (x86-64 without frame pointers,
  i386 with a vDSO leaf) with Debian's perf oracle: on the suite's kernels (7.3, perf's deferred
  callchains) perf's records are compared with our unwinder on every program, on the tree it is
  skipped with its reason (no suite to take linux-perf from).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.fuzz.build import BuildConfig, build
from harness.fuzz.live import LiveProgram, check_live, findings_of
from harness.fuzz.shape import Func, Shape
from harness.unwind.maps import VDSO
from tests.support.gating import require
from tests.support.toolchains import need

pytestmark = pytest.mark.qemu

F = frozenset
CHAIN = Shape((Func("build", F(), (1,), 2), Func("build", F({"alloca"}), (2,), 0), Func("build", F(), (), 1)))
VDSO_CHAIN = Shape((Func("build", F(), (1,), 2), Func("build", F({"vdso"}), (), 1)))
PROGRAMS = {  # name -> (shape, config)
    "m32-fp": (CHAIN, BuildConfig("host", "-O1", True, True, True, "bfd", bits=32)),
    "m32-nofp-dyn": (CHAIN, BuildConfig("sid", "-O2", False, True, False, "bfd", bits=32)),
    "vdso-64": (VDSO_CHAIN, BuildConfig("host", "-O1", True, True, True, "bfd")),
    "vdso-m32": (VDSO_CHAIN, BuildConfig("host", "-O1", True, True, True, "bfd", bits=32)),
}


def _own_stacks(log: Path) -> list[dict]:
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in recs if r["ev"] == "stack" and r["own"]]


def _names(frames: list) -> list[str]:
    return [f[2].split("+")[0] for f in frames]


def _build_all(wanted: dict, tmp_path) -> tuple[dict, list[LiveProgram]]:
    """Each (shape, config) of ``wanted`` built under its name, and the live programs of them."""
    built, programs = {}, []
    for name, (shape, config) in wanted.items():
        b = build(shape, config, tmp_path / name)
        assert b.ok, b.error
        built[name] = b
        programs.append(LiveProgram(name, b.binary, ("0",), description=config.flags))
    return built, programs


def test_i386_and_vdso_programs_in_one_guest(tmp_path):
    need("host")
    need("sid")
    built, programs = _build_all(PROGRAMS, tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    outcomes = dict(zip(PROGRAMS, check_live(programs, samples=12, timeout=240, log_dir=logs), strict=True))
    report = "\n".join(f"{n}: {o.stacks} stacks ({o.vdso_stacks} in the vDSO), crash {o.crash}, "
                       f"{o.disagreements[:3]}, {o.notes}" for n, o in outcomes.items())
    print(report)
    for name, o in outcomes.items():
        assert o.crash is None and o.stacks >= 5, report
        assert findings_of(built[name], o) == [], report

    for name in ("m32-fp", "m32-nofp-dyn", "vdso-m32"):
        stacks = _own_stacks(logs / f"{name}.jsonl")
        # a compat task: its registers 32-bit, and the CFI oracle's i386 walk reached main
        assert all(r["regs"]["sp"] < 1 << 32 and r["regs"]["ip"] < 1 << 32 for r in stacks)
        assert sum("main" in _names(r["frames"]["cfi"]) for r in stacks) >= 0.9 * len(stacks), report
    # frame pointers: the compat FP walk itself holds the chain (fz_f2 <- fz_f1 <- fz_f0 <- main)
    fp = _own_stacks(logs / "m32-fp.jsonl")
    assert sum({"fz_f0", "fz_f1", "main"} <= set(_names(r["frames"]["fp"])) for r in fp) >= 0.9 * len(fp)
    # no frame pointers: where the compat walk falls short of the CFI, a cause proves why
    nofp = _own_stacks(logs / "m32-nofp-dyn.jsonl")
    causes = {d["cause"] for r in nofp for v in r["verdicts"] if v["oracle"] == "cfi" for d in v["divergences"]}
    assert causes and None not in causes, causes

    for name in ("vdso-64", "vdso-m32"):
        o = outcomes[name]
        assert o.vdso_stacks >= 1, report
        stacks = [r for r in _own_stacks(logs / f"{name}.jsonl") if r["frames"]["cfi"][0][1] == VDSO]
        assert len(stacks) == o.vdso_stacks
        # out of the vDSO by its own .eh_frame, into the vDSO leaf and on to main
        for r in stacks:
            names = _names(r["frames"]["cfi"])
            assert "fz_f1" in names and "main" in names, names


def _tree_kernel() -> str:
    """``tree:PATH`` of the built Debian linux-source-7.3 work tree (tests/qemu/test_kernel_tree.py
    builds it; cold once per cache, reused after)."""
    import shutil

    from harness.images.kernel_build import BUILD_TIMEOUT, build_tree
    from tests.support.kernel_tree import work_tree

    missing = [t for t in ("make", "gcc", "flex", "bison", "bc", "pahole") if shutil.which(t) is None]
    require(not missing, f"a kernel build needs {', '.join(missing)}")
    work, _ = work_tree()
    build_tree(work, timeout=BUILD_TIMEOUT)
    return f"tree:{work}"


@pytest.mark.parametrize("kernel", ["default", "generic", "rt", "tree"])
def test_the_kernel_flavours_live_with_debian_perf(kernel, tmp_path):
    need("host")
    need("sid")
    name = _tree_kernel() if kernel == "tree" else kernel
    pair = {"nofp-64": (CHAIN, BuildConfig("sid", "-O2", False, True, False, "bfd")),
            "vdso-m32": (VDSO_CHAIN, BuildConfig("host", "-O1", True, True, False, "bfd", bits=32))}
    built, programs = _build_all(pair, tmp_path)
    outcomes = dict(zip(pair, check_live(programs, samples=10, timeout=180, kernel=name, perf=True), strict=True))
    report = "\n".join(f"{n}: {o.stacks} stacks ({o.vdso_stacks} in the vDSO), crash {o.crash}, perf {o.perf} "
                       f"skipped {o.perf_skipped}, {o.disagreements[:3]}, {o.notes}" for n, o in outcomes.items())
    print(report)
    for pname, o in outcomes.items():
        assert o.crash is None and o.stacks >= 5, report
        assert findings_of(built[pname], o) == [], report
        if kernel == "tree":
            assert o.perf == {} and "not a kernel tree or file" in o.perf_skipped, report
        else:
            assert o.perf_skipped is None, report
            # every record compared; the few not equal are named differences (an entry that ended in
            # execve, a sample perf script printed after its record), none unexplained (no finding)
            assert o.perf["ours_compared"] >= 20 and o.perf["ours_equal"] >= 0.95 * o.perf["ours_compared"], report
            assert o.perf["ours_compared"] - o.perf["ours_equal"] <= sum(o.perf["named"].values()), report
            assert o.perf["merged_compared"] >= 20, report
