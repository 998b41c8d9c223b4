"""``harness kernel``: a kernel engineer's tree, configured and built for the harness's guest.

    harness kernel config PATH [--json]     a .config (or a tree / build directory with one) judged
    harness kernel build TREE [--config FILE] [--jobs N] [--timeout S]

``config`` prints every option the harness needs with its state and, for a missing one, the
dependency that keeps it off (read from the tree's Kconfig when PATH belongs to a tree), then the
missing options as a Kconfig fragment.  Exit 0: the config will do; 1: something is missing; 2:
PATH is no .config.

``build`` builds TREE out of tree in the cache (:mod:`harness.images.kernel_build`): a cold build
takes tens of minutes, an unchanged tree is reused at once, an edit recompiles what it touches.
It prints the vmlinux to pass as ``--kernel-path`` (or name the tree: ``--kernel tree:TREE``).
Exit 0 built or reused; 2 not a tree, a config that drops a needed option (named, before the long
make), or a tree that does not compile (the log's last lines); 3 infrastructure (a timeout).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import EXIT_FAILURES, EXIT_OK
from . import arg, command, group, positive_int

group("kernel", help="a kernel tree: its config judged (config), built for the guest (build)")


@command("config", parent="kernel", help="judge a kernel .config against what the harness needs",
         args=[arg("path", metavar="PATH", help="a .config, or a kernel tree or O= build directory holding one"),
               arg("--json", action="store_true", help="the judgement as JSON")])
def cmd_kernel_config(args) -> int:
    from ..images.kernel_build import host_pahole
    from ..kernel.config import Kconfig, judge, read_config

    values, tree = read_config(Path(args.path))
    kconfig = Kconfig.read(tree) if tree is not None else None
    pahole = host_pahole()
    judgement = judge(values, kconfig, pahole=pahole)
    if args.json:
        d = judgement.to_dict()
        d["tree"] = str(tree) if tree else None
        d["pahole"] = pahole
        print(json.dumps(d, indent=1))
        return EXIT_OK if judgement.ok else EXIT_FAILURES
    print(f"# {args.path}: {len(judgement.verdicts)} options the harness needs"
          + (f", dependencies read from {tree}" if tree else " (no tree: dependencies known for BTF only)")
          + f"; this machine's pahole: {f'{pahole // 100}.{pahole % 100}' if pahole else 'none'}")
    group_name = None
    for v in judgement.verdicts:
        if v.need.group != group_name:
            group_name = v.need.group
            print(f"# {group_name}")
        print(v.line())
    if judgement.ok:
        print("# the config will do")
        return EXIT_OK
    print(f"# {len(judgement.missing)} missing; add this fragment (then make olddefconfig):")
    sys.stdout.write(judgement.fragment())
    return EXIT_FAILURES


@command("build", parent="kernel", help="build a kernel tree for the guest (out of tree, cached)",
         args=[arg("tree", metavar="TREE", help="the kernel tree (a git checkout or an unpacked source)"),
               arg("--config", metavar="FILE",
                   help="base config instead of the tree's x86_64_defconfig (the harness's fragment is added)"),
               arg("--jobs", "-j", type=positive_int, help="make -jN (default: the CPUs)"),
               arg("--timeout", type=positive_int, metavar="S", help="bound on the make (default 4 h)"),
               arg("--json", action="store_true", help="print the build's record as JSON")])
def cmd_kernel_build(args) -> int:
    from ..images.kernel_build import BUILD_TIMEOUT, build_tree

    b = build_tree(Path(args.tree), base_config=Path(args.config) if args.config else None, jobs=args.jobs,
                   timeout=args.timeout or BUILD_TIMEOUT)
    if args.json:
        print(json.dumps(b.describe(), indent=1))
    else:
        how = "reused (unchanged since its build)" if b.reused else f"built in {b.seconds:.0f}s"
        print(f"{b.tree}: {b.release} {how}\n  vmlinux  {b.vmlinux}\n  config   {b.config}\n  log      {b.log}\n"
              f"  O=       {b.build_dir}\nboot it: harness run --kernel tree:{b.tree}")
    return EXIT_OK
