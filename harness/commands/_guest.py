"""The options every guest-booting command shares (``--kernel``, ``--smp``, ``--qemu``, ...) and
the :class:`~harness.session.GuestSpec` they describe."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..images.programs import Variant
from ..images.qemu import DEFAULT_CHOICE
from . import arg, positive_int

if TYPE_CHECKING:
    from ..session import GuestSpec

# The session and the scenario catalog (the transports, the engine) are imported by the functions
# that build a guest's spec, not here: every command's parser is built from this module, and
# `harness --help` or `harness check` need none of them (harness/commands/__init__.py).

__all__ = ["DEFAULT_PROGRAMS", "GUEST_ARGS", "LIB_ARG", "guest_spec", "shell_spec"]

DEFAULT_PROGRAMS = [
    ("callchain", "host", Variant()),
    ("callchain", "host", Variant(bits=32)),
]

GUEST_ARGS = (
    arg("--kernel", default="default",
        help="default (trixie-backports 7.x, cloud flavour), generic and rt (the same suite's generic and "
             "PREEMPT_RT flavours), trixie (6.12), bookworm (6.1), or tree:PATH (a kernel tree: built out of tree "
             "in the cache when it changed, see harness kernel build)"),
    arg("--kernel-path", help="boot this bzImage or vmlinux instead"),
    arg("--smp", type=positive_int, default=1, help="vCPUs (at most 16)"),
    arg("--mem", type=positive_int, metavar="MiB",
        help="guest RAM (default: twice the initramfs plus 256 MiB, at least 512)"),
    arg("--accel", default="auto", choices=("auto", "tcg", "kvm")),
    arg("--pti", action="store_true", help="boot with pti=on"),
    arg("--transport", default="rsp", choices=("rsp", "mi")),
    arg("--pin", action="store_const", const=True, default=None,
        help="QEMU's vCPU threads on CPUs of their own, the harness and QEMU's main loop on the last "
             "(faster stops), even where another harness on this machine is pinned (default: pinned "
             "unless another harness is)"),
    arg("--no-pin", dest="pin", action="store_const", const=False,
        help="leave the harness and QEMU where the scheduler puts them"),
    arg("--rt", action="store_true",
        help="QEMU's main loop (gdb stub, NMI monitor) at SCHED_FIFO: it answers at once, not after "
             "the harness's own work (needs CAP_SYS_NICE)"),
    arg("--qemu", choices=("auto", "host", "backports"),
        help="host: Debian 12's QEMU 7.2; backports: 11.x from trixie-backports (no flush of "
             "translated code on every gdb stop); auto: backports if it can be built, else host "
             f"(default: $HARNESS_QEMU, else {DEFAULT_CHOICE})"),
)

#: --lib (run, shell, boot): a library a user's program dlopens
LIB_ARG = arg("--lib", action="append", metavar="PATH",
              help="a library the program dlopens: copied in at its own path (and under its soname where the loader "
                   "looks), with the libraries it needs (repeatable)")


def guest_spec(args: argparse.Namespace, programs=None) -> GuestSpec:
    """The guest the options in ``args`` describe, with these programs (default: callchain, 64 and 32 bits)."""
    from ..session import GuestSpec

    return GuestSpec(kernel=args.kernel, kernel_path=args.kernel_path, smp=args.smp, accel=args.accel,
                     pti=args.pti, transport=getattr(args, "transport", "rsp"),
                     programs=list(programs if programs is not None else DEFAULT_PROGRAMS),
                     qemu=getattr(args, "qemu", None), pin=getattr(args, "pin", None), rt=getattr(args, "rt", False),
                     memory_mb=getattr(args, "mem", None), libs=list(getattr(args, "lib", None) or []))


def shell_spec(args: argparse.Namespace) -> GuestSpec:
    """The guest of ``harness shell`` / ``harness boot``: the default programs, those of the
    default scenarios and of ``--scenario``, and the user's ``--program`` binaries."""
    from ..scenarios.catalog import DEFAULT_SET, programs_for, select_scenarios

    scenarios = select_scenarios(list(DEFAULT_SET) + list(args.scenario or []))
    progs = list(DEFAULT_PROGRAMS)
    progs += [p for p in programs_for(scenarios) if p not in progs]
    spec = guest_spec(args, progs)
    spec.user_programs = list(args.program or [])
    return spec

