"""Building the guest programs (``guest_programs/*.c``) with each toolchain, in every variant.

A variant fixes what the unwinders have to work with: frame pointers or not, SFrame or not
(``as --gsframe``; 64-bit only: SFrame has no i386 ABI), static or dynamic, 64- or 32-bit, and
the ``-finstrument-functions`` shadow stack, position-independent or not, and the linker (ld.bfd,
gold, mold, lld: :mod:`harness.images.link`; the roots have ld.bfd only, the others link a
root's object on the host).  Dynamically linked programs are linked to find their interpreter
and libraries under ``/tc/<toolchain>/lib{64,32}`` in the guest, so programs of several
toolchains (several glibc builds) share one initramfs.

PIE: Debian's gcc (every root's) links a dynamic program as a PIE and a ``-static`` one as an
ET_EXEC unless told otherwise; that is each variant's default, built with no flag for it (the
builds, and their cache keys, of the variants before ``pie`` existed).  ``pie=False`` of a
dynamic program is ``-fno-PIE -no-pie``, ``pie=True`` of a static one ``-static-pie``.
"""

from __future__ import annotations

import functools
import os
import posixpath
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..errors import EXIT_USAGE
from ..verdicts.facts import FACTS
from .cache import cached_dir, content_key, repo_root
from .errors import ImageError
from .link import LINKERS, link_toolchain, linker_version, plan_build
from .toolchain import Toolchain, get_toolchain

SOURCES = repo_root() / "guest_programs"


@dataclass(frozen=True)
class Variant:
    bits: int = 64
    frame_pointers: bool = True
    sframe: bool = True
    static: bool = True
    shadow: bool = False
    opt: str = "-O1"
    linker: str = "bfd"  # ld.bfd, gold, mold or lld (harness.images.link.LINKERS)
    # position-independent: None is the toolchains' default, PIE when dynamic, ET_EXEC when
    # static (the module's docstring); read back as a bool
    pie: bool | None = None

    def __post_init__(self) -> None:
        if self.bits not in (32, 64):
            raise ImageError(f"bits must be 32 or 64, not {self.bits}")
        if self.linker not in LINKERS:
            raise ImageError(f"unknown linker {self.linker!r}; known: {', '.join(LINKERS)}")
        if self.bits == 32 and self.sframe:
            object.__setattr__(self, "sframe", False)  # SFrame defines no i386 ABI
        if self.pie is None:
            object.__setattr__(self, "pie", not self.static)

    @property
    def default_pie(self) -> bool:
        """Whether :attr:`pie` is what the toolchains do without a flag (no tag word, no flag)."""
        return self.pie == (not self.static)

    @property
    def tag(self) -> str:
        parts = ["fp" if self.frame_pointers else "nofp"]
        if self.sframe:
            parts.append("sframe")
        parts.append("static" if self.static else "dyn")
        parts.append(str(self.bits))
        if self.shadow:
            parts.append("shadow")
        if not self.default_pie:
            parts.append("pie" if self.pie else "nopie")
        if self.linker != "bfd":
            parts.append(self.linker)
        if self.opt != "-O1":
            parts.append(self.opt.lstrip("-"))
        return "-".join(parts)

    @classmethod
    def parse(cls, tag: str) -> Variant:
        """Inverse of :attr:`tag`: ``fp-sframe-static-64-shadow``, ``fp-sframe-dyn-64-nopie-mold``
        and the like."""
        words = tag.split("-")
        pie = True if "pie" in words else False if "nopie" in words else None
        linker = next((w for w in words if w in LINKERS), "bfd")
        v = cls(frame_pointers="fp" in words, sframe="sframe" in words, static="dyn" not in words,
                bits=32 if "32" in words else 64, shadow="shadow" in words, linker=linker, pie=pie)
        for w in words:
            if w.startswith("O") and len(w) <= 3:
                v = replace(v, opt="-" + w)
        return v


def guest_lib_dir(toolchain: str, bits: int) -> str:
    return f"/tc/{toolchain}/lib{bits}"


def cflags(tc: Toolchain, v: Variant) -> list[str]:
    f = [v.opt, "-g", "-Wall", f"-m{v.bits}"]
    f += ["-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"] if v.frame_pointers else ["-fomit-frame-pointer"]
    if v.sframe:
        f.append("-Wa,--gsframe")
        if tc.integrated_as:  # LLVM 22's integrated assembler: SFrame V2 behind this flag
            f.append("-Wa,--allow-experimental-sframe")
    f += tc.extra_flags
    if tc.prefix is not None:  # a user's install: its as and ld before anything on PATH
        f.append(f"-B{tc.prefix / 'bin'}/")
    if v.shadow:
        f += ["-finstrument-functions", "-DHARNESS_SHADOW"]
    if v.static:
        f += ["-static"] if not v.pie else ["-fPIE", "-static-pie"]
    else:
        if not v.pie:
            f += ["-fno-PIE", "-no-pie"]
        interp = "ld-linux-x86-64.so.2" if v.bits == 64 else "ld-linux.so.2"
        libdir = guest_lib_dir(tc.name, v.bits)
        # DT_RPATH, not DT_RUNPATH: a DT_RUNPATH reaches the program's own DT_NEEDED only, and the
        # libraries' needs (libstdc++'s libm) would be searched for where the guest's loader looks
        # by default, which holds no root's files.
        f += [f"-Wl,--dynamic-linker={libdir}/{interp}", "-Wl,--disable-new-dtags", f"-Wl,-rpath,{libdir}"]
    return f


@dataclass(frozen=True)
class Program:
    name: str  # source stem, e.g. "callchain"
    toolchain: str
    variant: Variant
    path: Path  # the built binary on the host
    runtime: tuple[tuple[Path, str], ...]  # (host file, guest path) the binary needs at run time

    @property
    def guest_path(self) -> str:
        if self.toolchain == USER:
            return f"/user/{self.name}"
        return f"/progs/{self.toolchain}/{self.name}-{self.variant.tag}"

    @property
    def comm(self) -> str:
        """The task's comm in the guest: the file name cut to TASK_COMM_LEN - 1."""
        return self.guest_path.rsplit("/", 1)[1][:15]


USER = "user"  # the toolchain name of a user's own binary


# What each guest program does, as facts the causes need (harness/verdicts/causes.py: FACTS); the
# program's header comment is the source.  One line per program of guest_programs/.
PROGRAM_FACTS: dict[str, frozenset[str]] = {
    "callchain": frozenset(),  # main -> a -> b -> c, getppid from c: no buffer on the stack
    "forkexec": frozenset({"execs", "exits", "stack-buffers"}),  # children exec and exit; wait4(&status)
    "soak": frozenset({"execs", "exits", "stack-buffers"}),  # the same, in 8 workers
    "threads": frozenset(),  # threads spin until killed
    "signal": frozenset({"signals", "stack-buffers"}),  # SIGALRM handler; clock_gettime(&ts)
    "vdso": frozenset({"stack-buffers"}),  # clock_gettime(&ts), a syscall from the vDSO without a vDSO clock
    "recurse": frozenset({"deep"}),  # 600 levels
    "prologues": frozenset(),
    "tailcall": frozenset({"noreturn-calls"}),  # middle and die end with calls of noreturn functions
}
assert all(f <= set(FACTS) for f in PROGRAM_FACTS.values()), "PROGRAM_FACTS names an unknown fact"


def program_facts(name: str, toolchain: str | None = None) -> frozenset[str] | None:
    """The facts of the guest program ``name`` (a built :class:`~harness.images.programs.Program`'s
    name and toolchain), or None for one not in :data:`PROGRAM_FACTS` or a user's own binary
    (unknown)."""
    return None if toolchain == USER else PROGRAM_FACTS.get(name)


class ProgramError(ImageError):
    """A user's own binary (``--program``) or library (``--lib``) that cannot run in the guest:
    missing, not ELF, not x86-64/i386, not a program (an object file, a shared library), or a
    library it needs that this machine does not have."""

    exit_code = EXIT_USAGE  # bad input


@dataclass(frozen=True)
class ElfFacts:
    """What the guest needs to know of a user's ELF before anything boots."""

    bits: int
    static: bool
    sframe: bool
    shadow: bool
    pie: bool = False  # ET_DYN: a PIE (static-pie without an interpreter)


DF_1_PIE = 0x08000000  # DT_FLAGS_1: a position-independent executable (elf.h)


def elf_facts(path: Path, what: str = "--program") -> ElfFacts:
    """The facts of an x86-64 or i386 ELF *program*, or :class:`ProgramError` saying why it is
    not one: an object file (ET_REL), a core file, a shared library (ET_DYN with a DT_SONAME
    and no DF_1_PIE flag, like libc.so.6, or with neither an interpreter nor DF_1_PIE), an
    executable without an entry point, another machine's ELF."""
    if not path.is_file():
        raise ProgramError(f"{what} {path}: no such file")
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            h = elf.header
            if h.e_machine not in ("EM_X86_64", "EM_386"):
                raise ProgramError(f"{what} {path}: {h.e_machine}, not x86-64 or i386")
            if h.e_type not in ("ET_EXEC", "ET_DYN"):
                kind = {"ET_REL": "an object file (ET_REL)",
                        "ET_CORE": "a core dump (ET_CORE)"}.get(h.e_type, h.e_type)
                raise ProgramError(f"{what} {path}: {kind}, not a program")
            segments = list(elf.iter_segments())
            has_interp = any(s["p_type"] == "PT_INTERP" for s in segments)
            dyn = elf.get_section_by_name(".dynamic")
            tags = {t.entry.d_tag: t for t in dyn.iter_tags()} if dyn is not None else {}
            pie = bool(tags["DT_FLAGS_1"].entry.d_val & DF_1_PIE) if "DT_FLAGS_1" in tags else False
            if h.e_type == "ET_DYN" and not pie and ("DT_SONAME" in tags or not has_interp):
                soname = f" (DT_SONAME {tags['DT_SONAME'].soname})" if "DT_SONAME" in tags else ""
                raise ProgramError(f"{what} {path}: a shared library{soname}, not a program "
                                   f"(a library the program loads goes with --lib)")
            if h.e_entry == 0:
                raise ProgramError(f"{what} {path}: no entry point (e_entry is 0), not a program")
            sframe = elf.get_section_by_name(".sframe") is not None or any(
                s["p_type"] == "PT_GNU_SFRAME" for s in segments)
            symtab = elf.get_section_by_name(".symtab")
            shadow = bool(symtab and symtab.get_symbol_by_name("harness_shadow"))
            return ElfFacts(elf.elfclass, not has_interp, sframe, shadow, h.e_type == "ET_DYN")
    except ELFError as exc:
        raise ProgramError(f"{what} {path}: not an ELF file ({exc})") from exc


def user_program(path: str | Path, libs: tuple[str | Path, ...] = ()) -> Program:
    """A user's own x86-64 or i386 binary, run in the guest as it was linked: its interpreter
    and libraries are copied from this machine to where the guest's loader looks for them
    (:func:`user_runtime_files`), with ``libs`` (the ones it dlopens: ``--lib``) and theirs.
    The variant records what the binary has (32/64-bit, static, PIE, SFrame, the shadow-stack
    symbol); whether it keeps frame pointers cannot be read from the file, so it is left True,
    and which linker wrote it is not recorded (left bfd)."""
    path = Path(path).resolve()
    facts = elf_facts(path)
    variant = Variant(bits=facts.bits, sframe=facts.sframe, static=facts.static, shadow=facts.shadow, pie=facts.pie)
    root = _linked_to_root(path)
    if root is not None:
        runtime = tuple(root_runtime_files(path, root, [Path(p) for p in libs]))
    else:
        runtime = tuple(user_runtime_files(path, f"/user/{path.name}", [Path(p) for p in libs]))
    return Program(path.name, USER, variant, path, runtime)


def _interp(path: Path) -> str | None:
    with open(path, "rb") as f:
        return next((s.get_interp_name() for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_INTERP"), None)


def _linked_to_root(path: Path) -> str | None:
    """The toolchain root a dynamic program was linked against the way the harness links its
    own builds (:func:`cflags`: the interpreter ``/tc/NAME/libNN/ld-...``), where this machine
    has no such file; else None."""
    interp = _interp(path)
    if interp is None or Path(interp).is_file():
        return None
    parts = interp.split("/")
    if len(parts) == 5 and parts[:2] == ["", "tc"] and parts[3] in ("lib32", "lib64"):
        return parts[2]
    return None


@functools.cache
def _toolchain(name: str) -> Toolchain:
    """A toolchain root, looked up once per process (each lookup runs its ld and gcc for their
    versions: a batch of programs of one root would pay it per program)."""
    return get_toolchain(name)


def root_runtime_files(binary: Path, root: str, libs: list[Path] = ()) -> list[tuple[Path, str]]:
    """The interpreter and libraries of a program linked against toolchain root ``root`` as the
    harness links its own dynamic builds (a generated program of ``harness fuzz``): every file
    from that root into its guest directory (:func:`guest_lib_dir`, where the program's
    interpreter path and DT_RPATH point), as the guest programs get theirs (:func:`runtime_files`);
    ``libs`` (the ones it dlopens) at their own path and under their soname there, with theirs."""
    bits = _elf_class(binary)
    try:
        tc = _toolchain(root)
    except ImageError as exc:
        raise ProgramError(f"--program {binary}: linked against toolchain root {root} (its interpreter "
                           f"{_interp(binary)}), which cannot be had: {exc}") from exc
    guest_dir = guest_lib_dir(root, bits)
    out: dict[str, Path] = {}
    try:
        for host, guest in runtime_files(binary, tc.root, guest_dir):
            out[guest] = host.resolve()
        for lib in libs:
            lib = _checked_lib(lib, bits, binary)
            out[str(lib)] = lib.resolve()
            out[f"{guest_dir}/{_dynamic(lib)[3] or lib.name}"] = lib.resolve()
            for host, guest in runtime_files(lib, tc.root, guest_dir):
                out.setdefault(guest, host.resolve())
    except ProgramError:
        raise
    except ImageError as exc:  # a library the root does not have: the program's fault, not the machine's
        raise ProgramError(f"--program {binary}: {exc}") from exc
    return [(host, guest) for guest, host in out.items()]


def build_program(name: str, tc: Toolchain, variant: Variant = Variant()) -> Program:
    src = SOURCES / f"{name}.c"
    if not src.is_file():
        raise ImageError(f"no guest program source {src}")
    headers = sorted(SOURCES.glob("*.h"))
    flags = cflags(tc, variant)
    # another linker than the root's ld.bfd: which toolchain links, and that linker's version
    linked = ()
    if variant.linker != "bfd":
        link_tc = link_toolchain(tc, variant.linker)
        linked = (variant.linker, link_tc.name, linker_version(link_tc, variant.linker))
    key = content_key("program-v1", tc.name, tc.binutils_version, tc.gcc_version, flags, src,
                      *[h for h in headers], *linked)

    def build(tmp: Path) -> None:
        outer, inner = tc.workdir(f"{name}-{key}")
        try:
            for f in (src, *headers):
                shutil.copy(f, outer / f.name)
            if variant.linker == "bfd":
                tc.run([tc.cc, *flags, "-o", name, f"{name}.c"], cwd=inner)
            else:
                plan_build(tc, "gcc", f"{name}.c", name, flags, variant.linker).run(outer, inner)
            shutil.copy(outer / name, tmp / name)
        finally:
            shutil.rmtree(outer, ignore_errors=True)

    d = cached_dir("programs", key, build, what=f"{name} [{variant.tag}] with {tc.name}")
    path = d / name
    runtime = () if variant.static else tuple(runtime_files(path, tc.root, guest_lib_dir(tc.name, variant.bits)))
    return Program(name, tc.name, variant, path, runtime)


_LIB_DIRS = {
    64: ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "usr/lib64"),
    32: ("lib/i386-linux-gnu", "usr/lib/i386-linux-gnu", "lib32", "usr/lib32"),
}


def runtime_files(binary: Path, root: Path, guest_dir: str | None = None) -> list[tuple[Path, str]]:
    """The interpreter and DT_NEEDED libraries (transitively) of ``binary``, found under ``root``.

    Returns (host path, guest path) pairs.  With ``guest_dir`` every file goes there (our own
    builds); without it each keeps its path in ``root`` (a user's binary, run as it was linked).
    """
    with open(binary, "rb") as f:
        elf = ELFFile(f)
        bits = elf.elfclass
        interp = next((s.get_interp_name() for s in elf.iter_segments() if s["p_type"] == "PT_INTERP"), None)
    out: dict[str, tuple[Path, str]] = {}
    todo = [binary]
    if interp:
        host = _in_root(root, interp) or _find_lib(root, Path(interp).name, bits)
        if host is None:
            raise ImageError(f"{binary}: interpreter {interp} not found under {root}")
        out[Path(interp).name] = (host, f"{guest_dir}/{Path(interp).name}" if guest_dir else interp)
    while todo:
        for lib in _needed(todo.pop()):
            if lib in out:
                continue
            host = _find_lib(root, lib, bits)
            if host is None:
                raise ImageError(f"{binary}: needs {lib}, not found under {root}")
            rel = "/" + str(host.relative_to(root)) if guest_dir is None else f"{guest_dir}/{lib}"
            out[lib] = (host, rel)
            todo.append(host)
    return list(out.values())


def _needed(path: Path) -> list[str]:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        dyn = elf.get_section_by_name(".dynamic")
        if dyn is None:
            return []
        return [t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED"]


def _in_root(root: Path, path: str) -> Path | None:
    p = root / path.lstrip("/")
    return p.resolve() if p.exists() else None


def _find_lib(root: Path, name: str, bits: int) -> Path | None:
    for d in _LIB_DIRS[bits]:
        p = root / d / name
        if p.exists():
            return p.resolve()
    return None


# -- a user's binary: its libraries where the guest's loader looks for them --------------------
#: The directories glibc's loader searches last (no /etc/ld.so.cache in the guest), Debian's
#: multiarch ones first; a library found in none of them on this machine lands in the first.
_LOADER_DIRS = {
    64: ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"),
    32: ("/lib/i386-linux-gnu", "/usr/lib/i386-linux-gnu", "/lib32", "/usr/lib32", "/lib", "/usr/lib"),
}
#: ``$PLATFORM`` in a search path (the loader's AT_PLATFORM on the guest's CPU)
_PLATFORM = {64: "x86_64", 32: "i686"}


@dataclass(frozen=True)
class _Object:
    """An ELF the loader maps: the file on this machine (as found, not resolved: ``$ORIGIN`` is
    the directory the loader opened it from) and its path in the guest."""

    host: Path
    guest: str
    #: DT_RPATH directories in effect for what this object loads: its own (when it has no
    #: DT_RUNPATH) then its loader's, as (host dir, guest dir) pairs
    rpath: tuple[tuple[Path, str], ...] = ()


def _dynamic(path: Path) -> tuple[list[str], list[str] | None, list[str] | None, str | None]:
    """(DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME) of an ELF, read with pyelftools.  Not with
    ldd: ldd runs the binary (its loader, with the binary's own constructors on some setups),
    resolves against this machine's ld.so.cache rather than the guest's search path, and cannot
    read an i386 binary without the i386 loader installed."""
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            dyn = elf.get_section_by_name(".dynamic")
            if dyn is None:  # sections stripped: the PT_DYNAMIC segment has the same tags
                dyn = next((s for s in elf.iter_segments() if s["p_type"] == "PT_DYNAMIC"), None)
            if dyn is None:
                return [], None, None, None
            needed, rpath, runpath, soname = [], None, None, None
            for t in dyn.iter_tags():
                tag = t.entry.d_tag
                if tag == "DT_NEEDED":
                    needed.append(t.needed)
                elif tag == "DT_RPATH":
                    rpath = (rpath or []) + t.rpath.split(":")
                elif tag == "DT_RUNPATH":
                    runpath = (runpath or []) + t.runpath.split(":")
                elif tag == "DT_SONAME":
                    soname = t.soname
            return needed, rpath, runpath, soname
    except ELFError as exc:
        raise ProgramError(f"{path}: not an ELF file ({exc})") from exc


def _expand(entry: str, obj: _Object, bits: int) -> tuple[Path, str] | None:
    """One search-path entry of ``obj`` as (host dir, guest dir): ``$ORIGIN`` (``${ORIGIN}``) is
    the object's own directory on each side, ``$LIB`` and ``$PLATFORM`` what the loader puts
    there on Debian.  A relative entry (the loader takes it from its working directory) has no
    fixed place and is skipped, as an empty one is."""
    if not entry:
        return None
    subst = {"LIB": _LOADER_DIRS[bits][0].lstrip("/"), "PLATFORM": _PLATFORM[bits]}
    host = guest = entry
    for var, value in subst.items():
        for form in (f"${{{var}}}", f"${var}"):
            host, guest = host.replace(form, value), guest.replace(form, value)
    for form in ("${ORIGIN}", "$ORIGIN"):
        host = host.replace(form, str(obj.host.parent))
        guest = guest.replace(form, posixpath.dirname(obj.guest))
    if not host.startswith("/"):
        return None
    return Path(posixpath.normpath(host)), posixpath.normpath(guest)


def _search(name: str, obj: _Object, bits: int) -> tuple[Path, str] | None:
    """Where the loader finds ``name`` (a DT_NEEDED entry of ``obj``), in its order: DT_RPATH
    (the object's and its loaders', unless the object has DT_RUNPATH), DT_RUNPATH (for the
    object's own needs only), then the system directories.  Returns (host file as found, guest
    path): the name the loader asks for, in the guest directory it searches, so a soname that
    is a symlink on this machine (liblzma.so.5 -> liblzma.so.5.4.1) keeps that name there."""
    if "/" in name:  # a path: opened as it is
        p = Path(name)
        return (p, name) if p.is_absolute() and p.is_file() else None
    _needed, _rpath, runpath, _soname = _dynamic(obj.host)
    dirs = [] if runpath is not None else list(obj.rpath)
    dirs += [d for d in (_expand(e, obj, bits) for e in runpath or []) if d is not None]
    dirs += [(Path(d), d) for d in _LOADER_DIRS[bits]]
    for host_dir, guest_dir in dirs:
        p = host_dir / name
        if p.is_file() and _elf_class(p) == bits:
            return p, f"{guest_dir}/{name}"
    return None


def _elf_class(path: Path) -> int | None:
    """32 or 64 (the loader skips a library of the other class and searches on), None: no ELF."""
    try:
        with open(path, "rb") as f:
            head = f.read(5)
    except OSError:
        return None
    return {1: 32, 2: 64}.get(head[4]) if head[:4] == b"\x7fELF" and len(head) == 5 else None


def user_runtime_files(binary: Path, guest_path: str, libs: list[Path] = ()) -> list[tuple[Path, str]]:
    """The interpreter and the libraries (transitively) of a user's ``binary`` at ``guest_path``,
    plus ``libs`` (the libraries it dlopens) and theirs, as (host file, guest path) pairs: each
    library at the name and in the directory the guest's loader will look in (:func:`_search`).
    The host file is the resolved one (its bytes); the guest has no symlinks to follow.

    A ``--lib`` lands at its own absolute path (as given, symlinks not resolved: the name a
    dlopen() by path uses) and, when that is outside the loader's directories, also under its
    DT_SONAME (else its file name) in the first of them, where a dlopen() by bare name looks."""
    bits = _elf_class(binary)
    facts = elf_facts(binary)
    out: dict[str, Path] = {}  # guest path -> host file
    loaded: set[str] = set()  # sonames the loader has before it searches (its own)
    if facts.static and not _dynamic(binary)[0]:
        todo: list[_Object] = []
    else:
        with open(binary, "rb") as f:
            interp = next((s.get_interp_name() for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_INTERP"), None)
        if interp is not None:
            host = Path(interp)
            if not host.is_file():
                raise ProgramError(f"--program {binary}: its interpreter {interp} is not on this machine")
            out[interp] = host.resolve()
            loaded.add(_dynamic(host)[3] or host.name)
        todo = [_Object(binary, guest_path)]
    for lib in libs:
        lib = _checked_lib(lib, bits, binary)
        out[str(lib)] = lib.resolve()
        todo.append(_Object(lib, str(lib)))
        if str(lib.parent) not in _LOADER_DIRS[bits]:
            soname = _dynamic(lib)[3] or lib.name
            out[f"{_LOADER_DIRS[bits][0]}/{soname}"] = lib.resolve()
    seen: set[str] = set()
    while todo:
        obj = todo.pop()
        needed, rpath, runpath, _ = _dynamic(obj.host)
        # DT_RPATH reaches what the object's own libraries load, unless the object has DT_RUNPATH.
        own = () if runpath is not None else tuple(
            d for d in (_expand(e, obj, bits) for e in rpath or []) if d is not None)
        inherited = tuple(dict.fromkeys(own + obj.rpath))
        for name in needed:
            if name in loaded:  # the loader itself: DT_NEEDED matches its soname, no search
                continue
            found = _search(name, replace(obj, rpath=inherited), bits)
            if found is None:
                raise ProgramError(f"--program {binary}: {obj.host.name} needs {name}, which is in none of "
                                   f"the directories the loader would search on this machine "
                                   f"(DT_RPATH/DT_RUNPATH of {obj.host.name}, {', '.join(_LOADER_DIRS[bits])}); "
                                   f"install it, or name the file with --lib")
            host, guest = found
            if guest in seen:
                continue
            seen.add(guest)
            out.setdefault(guest, host.resolve())
            todo.append(_Object(host, guest, inherited))
    return [(host, guest) for guest, host in out.items()]


def needed_sonames(program: Program) -> frozenset[str]:
    """The sonames the loader maps before a dynamic program's first instruction: its DT_NEEDED
    closure, each followed into the runtime file of that name (the guest has every library as a
    regular file named by its soname, so /proc/PID/maps names each by it).  A ``--lib`` (dlopen'ed
    later) is not among them unless the program needs it; the loader itself is mapped at exec."""
    by_name: dict[str, Path] = {}
    for host, guest in program.runtime:
        by_name.setdefault(guest.rsplit("/", 1)[-1], host)
    interp = _interp(program.path)
    if not by_name or interp is None:
        return frozenset()
    loader = interp.rsplit("/", 1)[-1]  # mapped by the kernel at exec, and libc needs it by name
    out: set[str] = set()
    todo = [program.path]
    while todo:
        for name in _dynamic(todo.pop())[0]:
            host = by_name.get(name)
            if name in out or name == loader or host is None:
                continue
            out.add(name)
            todo.append(host)
    return frozenset(out)


def _checked_lib(lib, bits: int, binary: Path) -> Path:
    """A ``--lib`` path, absolute, refused unless it is a file of the program's ELF class."""
    lib = Path(os.path.abspath(lib))
    if not lib.is_file():
        raise ProgramError(f"--lib {lib}: no such file")
    if _elf_class(lib) != bits:
        raise ProgramError(f"--lib {lib}: not a {bits}-bit ELF like the program {binary.name}")
    return lib
