"""``harness images build``: fetch and build kernels, toolchain roots, programs, QEMU, initramfs."""

from __future__ import annotations

from ..errors import EXIT_OK
from ..images.qemu import DEFAULT_CHOICE
from . import arg, command, group

group("images", help="fetch and build kernels, toolchain roots, programs, initramfs")


@command("build", parent="images", help="build (or find in the cache) what the guests need", args=[
    arg("--kernel", dest="kernels", action="append", help="kernel name (repeatable)"),
    arg("--toolchain", dest="toolchains", action="append",
        help="host, trixie, sid, or one of sid's other compilers (sid-gcc11.., sid-clang22..: one root "
             "holds them all) (repeatable)"),
    arg("--qemu", dest="qemus", action="append", choices=("auto", "host", "backports"),
        help=f"the QEMU to fetch and check (repeatable; default: $HARNESS_QEMU, else {DEFAULT_CHOICE})"),
    arg("--kallsyms", action="append", metavar="KERNEL",
        help="boot KERNEL once to cache its /proc/kallsyms, if not cached (repeatable)"),
])
def cmd_images_build(args) -> int:
    from ..images.initramfs import build_initramfs
    from ..images.kernel import get_kernel
    from ..images.programs import Variant, build_program
    from ..images.qemu import resolve_qemu
    from ..images.toolchain import get_toolchain
    from ..report.text import qemu_line
    from ..session import GuestSpec, Session, kallsyms_path
    for choice in args.qemus or [None]:  # None: $HARNESS_QEMU, else the default
        print(qemu_line(resolve_qemu(choice)))
    for name in args.kernels or ["default"]:
        k = get_kernel(name)
        print(f"kernel {name}: {k.package}={k.version} sha256={k.sha256[:16]} {k.vmlinux}")
    progs = []
    for tc_name in args.toolchains or ["host", "trixie", "sid"]:
        tc = get_toolchain(tc_name)
        print(f"toolchain {tc_name}: binutils {tc.binutils_version} (SFrame V{tc.sframe_version()}), "
              f"gcc {tc.gcc_version}")
        for v in (Variant(), Variant(frame_pointers=False), Variant(bits=32), Variant(static=False),
                  Variant(shadow=True)):
            progs.append(build_program("callchain", tc, v))
    print(f"initramfs: {build_initramfs(progs)}")
    for name in args.kallsyms or []:
        # A kernel's symbols come from its /proc/kallsyms, dumped at its first boot and cached
        # (harness/session.py): booted here once, so that the unit tests that read them
        # (test_lockstep's points in the real kernel text) have them on an empty cache too.
        path = kallsyms_path(get_kernel(name))
        if not path.exists():
            with Session(GuestSpec(kernel=name, programs=[])):
                pass
        print(f"kallsyms {name}: {path}")
    return EXIT_OK
