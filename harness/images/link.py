"""One C or C++ file compiled in a toolchain root and linked by a chosen linker: ld.bfd, gold,
mold or lld.

The debootstrap roots carry ld.bfd only: gold, mold and lld link a root's object with the
host's gcc and that linker (the host's crt files and glibc: code that names nothing newer than
the host's glibc links, and a dynamic program still runs on its root's loader and libraries,
which its interpreter path and DT_RPATH name), as ``tests/unit/sframe/test_linkers.py`` does.
:class:`LinkPlan` says which toolchain compiles and which links, and the commands; the guest
programs (:func:`harness.images.programs.build_program`) and the fuzzer's generated programs
(:func:`harness.fuzz.build.build_source`) both build through it.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from pathlib import Path

from .errors import ImageError
from .toolchain import Toolchain, get_toolchain

__all__ = ["LINKERS", "LINKER_BINARY", "LinkPlan", "link_toolchain", "linker_version", "plan_build",
           "root_has_linker", "split_flags"]

LINKERS = ("bfd", "gold", "mold", "lld")
LINKER_BINARY = {"bfd": "ld.bfd", "gold": "ld.gold", "mold": "mold", "lld": "ld.lld"}
#: the flags of :func:`harness.images.programs.cflags` that only the link step reads
LINK_ONLY = frozenset({"-static", "-static-pie", "-pie", "-no-pie"})


def root_has_linker(tc: Toolchain, linker: str) -> bool:
    binary = LINKER_BINARY[linker]
    if tc.prefix is not None:  # a user's install: its own ld is ld.bfd; the others where it has them, or the host's
        bindir = tc.prefix / "bin"
        if linker == "bfd":
            return (bindir / "ld").exists() or (bindir / "ld.bfd").exists()
        return (bindir / binary).exists() or shutil.which(binary) is not None
    if tc.is_host:
        return shutil.which(binary) is not None
    if linker == "lld" and tc.is_clang:  # clang-N's own lld-N (clang -fuse-ld=lld finds it in its own bin)
        return (tc.root / "usr/lib" / f"llvm-{tc.cc.rsplit('-', 1)[-1]}" / "bin/ld.lld").exists()
    return (tc.root / "usr/bin" / binary).exists()


@functools.cache
def _host() -> Toolchain:
    return get_toolchain("host")


def link_toolchain(tc: Toolchain, linker: str) -> Toolchain:
    """Where a program of root ``tc`` is linked with ``linker``: in the root if it has the
    linker, else on the host; :class:`ImageError` if neither has it."""
    if linker not in LINKER_BINARY:
        raise ImageError(f"unknown linker {linker!r}; known: {', '.join(LINKERS)}")
    if root_has_linker(tc, linker):
        return tc
    host = _host()
    if not root_has_linker(host, linker):
        raise ImageError(f"{LINKER_BINARY[linker]} is in neither the {tc.name} root nor on the host")
    return host


@functools.cache
def linker_version(tc: Toolchain, linker: str) -> str:
    """The first line of ``LINKER --version`` in ``tc`` (what a build's cache key records)."""
    binary = LINKER_BINARY[linker]
    if linker == "lld" and tc.is_clang and not tc.is_host:  # clang-N's own, as -fuse-ld=lld finds it
        binary = f"/usr/lib/llvm-{tc.cc.rsplit('-', 1)[-1]}/bin/ld.lld"
    return tc.run([binary, "--version"]).stdout.splitlines()[0]


def split_flags(flags: list[str]) -> tuple[list[str], list[str]]:
    """Compiler-driver flags as (the compile step's, the link step's)."""
    link = [f for f in flags if f in LINK_ONLY or f.startswith("-Wl,")]
    return [f for f in flags if f not in link], link


@dataclass(frozen=True)
class LinkPlan:
    """``source`` compiled to ``output.o`` by ``compile_tc``, linked to ``output`` by ``link_tc``
    with ``-fuse-ld=LINKER`` (a user's install linking with its own ld: no ``-fuse-ld``, its
    driver finds ``ld`` through ``-B PREFIX/bin/``); both run in one work directory (:meth:`Toolchain.workdir` of the
    compiling root: the host sees it as ``outer``)."""

    compile_tc: Toolchain
    link_tc: Toolchain
    compile_argv: tuple[str, ...]
    link_argv: tuple[str, ...]

    @property
    def commands(self) -> list[str]:
        return [f"[{self.compile_tc.name}] " + " ".join(self.compile_argv),
                f"[{self.link_tc.name}] " + " ".join(self.link_argv)]

    def run(self, outer: Path, inner: str, timeout: float = 300) -> list[str]:
        """Compile, then link (in the root, or on the host in the same directory); each step's
        stderr (warnings of a step that succeeded: ld.bfd's "SFrame section ignored")."""
        c = self.compile_tc.run(list(self.compile_argv), cwd=inner, timeout=timeout)
        if self.link_tc is self.compile_tc:
            link = self.link_tc.run(list(self.link_argv), cwd=inner, timeout=timeout)
        else:
            link = self.link_tc.run(list(self.link_argv), cwd=str(outer), timeout=timeout)
        return [c.stderr, link.stderr]


def plan_build(tc: Toolchain, driver: str, source: str, output: str, flags: list[str], linker: str,
               extra_link: tuple[str, ...] = ()) -> LinkPlan:
    """How ``source`` (a file name in the work directory) becomes ``output`` with ``flags``
    (:func:`harness.images.programs.cflags`') and ``linker``; ``driver`` is ``gcc`` or ``g++``,
    each toolchain's own C or C++ driver (gcc-11, clang-22, a user's PREFIX/bin/gcc)."""
    compile_flags, link_flags = split_flags(flags)
    link_tc = link_toolchain(tc, linker)
    cxx = driver in ("g++", "c++", "clang++")
    obj = f"{output}.o"
    use_ld = [] if (link_tc.prefix is not None and linker == "bfd") else [f"-fuse-ld={linker}"]
    # another toolchain's driver links: the compiling toolchain's own flags (clang's
    # -fno-integrated-as) are not its to read
    link_compile = [f for f in compile_flags if link_tc is tc or f not in tc.extra_flags]
    return LinkPlan(tc, link_tc, (tc.driver(cxx), *compile_flags, "-c", source, "-o", obj),
                    (link_tc.driver(cxx), *link_compile, *link_flags, *use_ld, *extra_link, "-o", output, obj))
