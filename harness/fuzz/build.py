"""The build matrix of generated programs, and one build.

A :class:`BuildConfig` is one point of the matrix: a toolchain (``host``: gcc 12 + binutils
2.40, SFrame V1; ``trixie``: 2.44, V2; ``sid``: 2.46+, V3 -- the SFrame version follows the root;
``sid-gcc11`` .. ``sid-gcc15`` and ``sid-clang22``/``sid-clang23`` by name, clang's integrated
assembler writing V2; a user's install registered with ``--toolchain NAME=PREFIX``),
an optimisation level, frame pointers on/off, SFrame on/off, static/dynamic, a linker
(ld.bfd, gold, mold, lld) and the ABI: x86-64, or i386 (``-m32``, where the toolchain's compiler
finds an i386 multilib: :func:`i386_lacks`; no SFrame, which has no i386 ABI).  The compiler
flags are :func:`harness.images.programs.cflags`' for the matching
:class:`~harness.images.programs.Variant` (the guest programs' own), split into the compile step's
and the link step's.

A program is compiled in its root (``gcc -c``) and linked there when the root has the linker.
The debootstrap roots carry ld.bfd only: gold, mold and lld link a root's object with the host's
gcc and that linker (the host's crt files and glibc; the generated code names nothing newer
than glibc 2.34), through :mod:`harness.images.link` as the guest programs are --
:attr:`Built.link_toolchain` records which.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from hypothesis import strategies as st

from ..errors import EXIT_USAGE, HarnessError
from ..images.errors import ImageError
from ..images.link import plan_build, root_has_linker
from ..images.programs import Variant, cflags
from ..images.toolchain import DEFAULT_TOOLCHAINS, TOOLCHAINS, Toolchain, get_toolchain, known_toolchains
from .defaults import LINKERS
from .render import extra_cflags, render, source_name
from .shape import Shape

OPTS = ("-O0", "-O1", "-O2", "-O3", "-Os")
ABIS = (64, 32)  # x86-64, i386 (-m32)
__all__ = ["ABIS", "DEFAULT_TOOLCHAINS", "LINKERS", "OPTS", "TOOLCHAINS", "BuildConfig", "Built", "MatrixError",
           "build", "build_source", "configs", "fit_abi", "i386_lacks", "linkable", "linker_available",
           "root_has_linker", "toolchain"]
BUILD_TIMEOUT = 120.0


class MatrixError(HarnessError):
    """A toolchain or linker name the matrix does not know (bad usage)."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class BuildConfig:
    toolchain: str = "host"
    opt: str = "-O2"
    fp: bool = True
    sframe: bool = True
    static: bool = False
    linker: str = "bfd"
    # position-independent: None is the toolchains' default (PIE when dynamic, ET_EXEC when static),
    # and a value equal to it is kept as None, so that dataclasses.replace(config, static=...) keeps
    # the default; True of a static build is -static-pie, False of a dynamic one -no-pie
    pie: bool | None = None
    # the ABI: 64 (x86-64) or 32 (i386, ``-m32``: the kernel's compat frame-pointer walk).  SFrame
    # defines no i386 ABI (gas --gsframe refuses -m32), so an i386 build has none: sframe is kept
    # False, as Variant keeps it
    bits: int = 64

    def __post_init__(self) -> None:
        if self.pie == (not self.static):
            object.__setattr__(self, "pie", None)
        if self.bits not in ABIS:
            raise MatrixError(f"unknown ABI bits={self.bits!r}; known: {', '.join(map(str, ABIS))} (x86-64, i386)")
        if self.bits == 32 and self.sframe:
            object.__setattr__(self, "sframe", False)
        if self.toolchain not in known_toolchains():
            raise MatrixError(f"unknown toolchain {self.toolchain!r}; known: {', '.join(known_toolchains())}")
        if self.opt not in OPTS:
            raise MatrixError(f"unknown optimisation {self.opt!r}; known: {', '.join(OPTS)}")
        if self.linker not in LINKERS:
            raise MatrixError(f"unknown linker {self.linker!r}; known: {', '.join(LINKERS)}")

    @property
    def variant(self) -> Variant:
        return Variant(bits=self.bits, frame_pointers=self.fp, sframe=self.sframe, static=self.static, opt=self.opt,
                       linker=self.linker, pie=self.pie)

    @property
    def _pie_word(self) -> list[str]:
        """"pie"/"nopie" where not the toolchains' default (today's signatures keep their words)."""
        return [] if self.pie is None else ["pie" if self.pie else "nopie"]

    @property
    def _abi_word(self) -> list[str]:
        """"m32" for an i386 build (x86-64, the default, keeps today's signatures' words)."""
        return ["m32"] if self.bits == 32 else []

    @property
    def flags(self) -> str:
        """The flags part of a signature: ``-O2 fp sframe dyn``."""
        return " ".join([self.opt, "fp" if self.fp else "nofp", "sframe" if self.sframe else "nosframe",
                         "static" if self.static else "dyn", *self._pie_word, *self._abi_word])

    @property
    def compile_flags(self) -> str:
        """The flags of a signature that only the compiler and assembler decide (a finding in the
        object, before any linker): ``-O2 fp sframe``."""
        return " ".join([self.opt, "fp" if self.fp else "nofp", "sframe" if self.sframe else "nosframe",
                         *self._abi_word])

    @property
    def link_flags(self) -> str:
        """The flags of a signature that only the link decides: ``sframe dyn``."""
        return " ".join(["sframe" if self.sframe else "nosframe", "static" if self.static else "dyn", *self._pie_word,
                         *self._abi_word])

    @property
    def tag(self) -> str:
        return f"{self.toolchain}-{self.linker}-" + self.flags.lstrip("-").replace(" ", "-")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> BuildConfig:
        return cls(**d)


def configs(toolchains=DEFAULT_TOOLCHAINS, linkers=LINKERS) -> st.SearchStrategy[BuildConfig]:
    """Points of the matrix; shrinks towards the first toolchain and linker, -O0, frame
    pointers and SFrame on, dynamic, the toolchain's default PIE-ness (then PIE, static-pie or
    -no-pie: the four linkers' layouts, as tests/qemu/test_linker_matrix.py runs them live), x86-64
    (then i386: ``-m32``, drawn like the other flags; :func:`fit_abi` keeps it where the toolchain
    has the i386 multilib)."""
    return st.builds(BuildConfig, toolchain=st.sampled_from(tuple(toolchains)), opt=st.sampled_from(OPTS),
                     fp=st.booleans().map(lambda b: not b), sframe=st.booleans().map(lambda b: not b),
                     static=st.booleans(), linker=st.sampled_from(tuple(linkers)),
                     pie=st.one_of(st.none(), st.booleans()), bits=st.sampled_from(ABIS)).filter(linkable)



def linkable(config: BuildConfig) -> bool:
    """Whether the linker can make this layout at all: gold cannot make a static PIE (it has no
    --no-dynamic-linker, which gcc's -static-pie passes: "ld returned 1 exit status", a build failure
    that says nothing of the generated program; the 25-minute live campaign of 2026-12-07 drew it)."""
    return not (config.linker == "gold" and config.static and config.pie)


@functools.cache
def toolchain(name: str) -> Toolchain:
    return get_toolchain(name)


@functools.cache
def i386_lacks(tc_name: str, cxx: bool = False) -> str | None:
    """Why toolchain ``tc_name`` cannot build an i386 (``-m32``) program, or None: its compiler
    must find an i386 ``crtbegin.o`` (its gcc's 32-bit multilib: sid's gcc-11 to -15 have none,
    only gcc-16's; clang uses the newest gcc's), glibc's i386 ``crt1.o`` (libc6-dev-i386) and, for
    C++, an i386 libstdc++ (g++-multilib: no root has it).  Asked of the compiler itself
    (``-m32 -print-file-name=``), each answer's ELF class checked: gcc-11 answers its 64-bit
    crtbegin.o for -m32."""
    tc = toolchain(tc_name)
    wanted = ["crtbegin.o", "crt1.o"] + (["libstdc++.so"] if cxx else [])
    for name in wanted:
        try:
            said = tc.run([tc.driver(cxx), *tc.extra_flags, "-m32", f"-print-file-name={name}"], timeout=60)
        except ImageError as exc:
            return f"{tc.driver(cxx)} -m32 -print-file-name={name} failed: {str(exc).splitlines()[0]}"
        where = said.stdout.strip()
        path = tc.host_path(where) if where.startswith("/") else None
        if path is None or not path.exists():
            return f"{tc.driver(cxx)} -m32 finds no i386 {name} (no i386 multilib)"
        try:
            with path.open("rb") as fh:  # a symlink followed (gcc's libstdc++.so: a relative one)
                bits = ELFFile(fh).elfclass
        except ELFError:
            if name.endswith(".so"):
                continue  # a linker script (libc.so is one): found is enough
            return f"{tc.driver(cxx)} -m32 -print-file-name={name}: {where} is no ELF file"
        except OSError as exc:
            return f"{tc.driver(cxx)} -m32 -print-file-name={name}: {where} unreadable ({exc})"
        if bits != 32:
            return f"{tc.driver(cxx)} -m32 finds only a {bits}-bit {name} ({where}): no i386 multilib"
    return None


def fit_abi(config: BuildConfig, cxx: bool = False) -> BuildConfig:
    """``config`` as its toolchain can build it: an i386 config of a toolchain without the i386
    multilib (:func:`i386_lacks`; for C++ too) becomes the x86-64 one.  A drawn ABI the toolchain
    cannot build would be a build failure that says nothing of the generated program."""
    if config.bits == 32 and i386_lacks(config.toolchain, cxx):
        return dataclasses.replace(config, bits=64)
    return config


def linker_available(tc_name: str, linker: str) -> bool:
    """Whether a program of root ``tc_name`` can be linked with ``linker`` (in the root, or on the
    host with the host's gcc)."""
    return root_has_linker(toolchain(tc_name), linker) or root_has_linker(toolchain("host"), linker)


@dataclass
class Built:
    """One program built: the source, the commands that built it, the binary on the host (None
    when the build failed: ``error`` says why)."""

    shape: Shape
    config: BuildConfig
    source: str
    source_name: str
    commands: list[str] = field(default_factory=list)
    binary: Path | None = None
    error: str | None = None
    object: Path | None = None  # the compiler's object (prog.o), before any linker
    stderr: list[str] = field(default_factory=list)  # each step's, when it succeeded (its warnings)
    link_toolchain: str = ""
    binutils: str = ""
    gcc: str = ""  # the compiler's version (clang's, for a clang toolchain)
    versions: dict = field(default_factory=dict)  # as/ld/compiler --version, first lines (Toolchain.versions)

    @property
    def ok(self) -> bool:
        return self.binary is not None


def build(shape: Shape, config: BuildConfig, dest: Path) -> Built:
    """Build ``shape`` with ``config``; the binary and source land in ``dest`` (created).  A
    compiler or linker that fails leaves ``Built.error`` (a finding's matter, not an error of
    the harness); a root that cannot be had raises :class:`ImageError`."""
    return build_source(shape, render(shape), source_name(shape), config, dest)


def build_source(shape: Shape, source: str, name: str, config: BuildConfig, dest: Path) -> Built:
    """:func:`build` of a given source text (a reproducer's, as kept or as edited by hand)."""
    tc = toolchain(config.toolchain)
    cxx = name.endswith(".cc")
    out = Built(shape, config, source, name, binutils=tc.binutils_version, gcc=tc.gcc_version,
                versions=tc.versions())
    dest.mkdir(parents=True, exist_ok=True)
    (dest / name).write_text(source)
    plan = plan_build(tc, "g++" if cxx else "gcc", name, "prog", [*cflags(tc, config.variant), *extra_cflags(shape)],
                      config.linker, ("-pthread",))
    out.link_toolchain = plan.link_tc.name
    out.commands = plan.commands
    outer, inner = tc.workdir("fuzz")
    try:
        shutil.copy(dest / name, outer / name)
        try:
            out.stderr = plan.run(outer, inner, BUILD_TIMEOUT)
        except ImageError as exc:
            if "timed out" in str(exc):
                raise
            out.error = _first_error(str(exc))
            (dest / "build-error.txt").write_text(str(exc))
            return out
        shutil.copy(outer / "prog", dest / "prog")
        shutil.copy(outer / "prog.o", dest / "prog.o")
        out.binary, out.object = dest / "prog", dest / "prog.o"
        return out
    finally:
        shutil.rmtree(outer, ignore_errors=True)


_NOISE = re.compile(r"(/[\w./+-]+|0x[0-9a-f]+|\b\d+\b)")


_ERROR = re.compile("error", re.IGNORECASE)


def _first_error(text: str) -> str:
    """The first ``error``/``internal compiler error`` line of a failed build (gas says
    ``Error:``, before the driver's "assembler command failed"), paths and numbers taken out
    (what a signature keeps of it)."""
    for line in text.splitlines():
        parts = _ERROR.split(line, maxsplit=1)
        if len(parts) == 2:
            return _NOISE.sub("#", parts[1]).strip(" :")[:160] or "error"
    return "failed"
