"""The kernel-side parsers' speed on real data: figures printed, nothing asserted.

A guest's set-up parses the kernel's BTF (vmlinux ``.BTF``, ~121k types) and its cached
/proc/kallsyms (~150k symbols) at every start.  These were timed assertions in the unit suite
(under 0.5-1.0 s each), which failed on a loaded 2-core machine; speed is a benchmark's to print,
not a test's to guess (README of the developers: "never timed tests that flake").

    PYTHONPATH=. .venv/bin/python benchmarks/parsers.py [--kernel default] [--runs 5]

Each figure is the least, the median and the most of ``--runs`` runs (other work only ever adds
time to a run, so the least is the parser's own cost).  It needs the kernel image and its cached
kallsyms (``harness images build --kernel NAME --kallsyms NAME``).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from harness.bench import timed
from harness.images.kernel import get_kernel
from harness.kernel.btf import Btf
from harness.kernel.kallsyms import Kallsyms
from harness.session import kallsyms_path


def _line(what: str, times: list[float]) -> str:
    return (f"{what:40} min {min(times):7.3f} s  median {statistics.median(times):7.3f} s  "
            f"max {max(times):7.3f} s  ({len(times)} runs)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", default="default")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    k = get_kernel(args.kernel)
    btf = Btf.from_elf(k.vmlinux)
    data = btf._data
    print(f"kernel {k.package}={k.version}: .BTF {len(data) / 1e6:.1f} MB, {len(btf)} types")
    print(_line("BTF index", timed(lambda: Btf(data), args.runs)))
    first = timed(lambda: Btf(data).member_offset("task_struct", "pid"), args.runs)
    print(_line("BTF index + first name lookup", first))
    print(_line("BTF from the vmlinux file", timed(lambda: Btf.from_elf(k.vmlinux), args.runs)))
    path = kallsyms_path(k)
    if not path.exists():
        print(f"kallsyms: not cached ({path}); harness images build --kallsyms {args.kernel}")
        return 0
    text = path.read_text()
    table = Kallsyms.parse(text)
    print(f"kallsyms: {len(table)} symbols, {len(text) / 1e6:.1f} MB of text")
    print(_line("kallsyms parse + lookup", timed(lambda: Kallsyms.parse(text).lookup("_printk"), args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
