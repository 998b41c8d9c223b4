"""Building the guest programs (``guest_programs/*.c``) with each toolchain, in every variant.

A variant fixes what the unwinders have to work with: frame pointers or not, SFrame or not
(``as --gsframe``; 64-bit only: SFrame has no i386 ABI), static or dynamic, 64- or 32-bit, and
the ``-finstrument-functions`` shadow stack.  Dynamically linked programs are linked to find
their interpreter and libraries under ``/tc/<toolchain>/lib{64,32}`` in the guest, so programs of
several toolchains (several glibc builds) share one initramfs.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..errors import EXIT_USAGE
from .cache import cached_dir, content_key, repo_root
from .errors import ImageError
from .toolchain import Toolchain

SOURCES = repo_root() / "guest_programs"


@dataclass(frozen=True)
class Variant:
    bits: int = 64
    frame_pointers: bool = True
    sframe: bool = True
    static: bool = True
    shadow: bool = False
    opt: str = "-O1"

    def __post_init__(self) -> None:
        if self.bits not in (32, 64):
            raise ImageError(f"bits must be 32 or 64, not {self.bits}")
        if self.bits == 32 and self.sframe:
            object.__setattr__(self, "sframe", False)  # SFrame defines no i386 ABI

    @property
    def tag(self) -> str:
        parts = ["fp" if self.frame_pointers else "nofp"]
        if self.sframe:
            parts.append("sframe")
        parts.append("static" if self.static else "dyn")
        parts.append(str(self.bits))
        if self.shadow:
            parts.append("shadow")
        if self.opt != "-O1":
            parts.append(self.opt.lstrip("-"))
        return "-".join(parts)

    @classmethod
    def parse(cls, tag: str) -> Variant:
        """Inverse of :attr:`tag`: ``fp-sframe-static-64-shadow`` and the like."""
        words = tag.split("-")
        v = cls(frame_pointers="fp" in words, sframe="sframe" in words, static="dyn" not in words,
                bits=32 if "32" in words else 64, shadow="shadow" in words)
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
    if v.shadow:
        f += ["-finstrument-functions", "-DHARNESS_SHADOW"]
    if v.static:
        f.append("-static")
    else:
        interp = "ld-linux-x86-64.so.2" if v.bits == 64 else "ld-linux.so.2"
        libdir = guest_lib_dir(tc.name, v.bits)
        f += [f"-Wl,--dynamic-linker={libdir}/{interp}", f"-Wl,-rpath,{libdir}"]
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


class ProgramError(ImageError):
    """A user's own binary (``--program``) that cannot run in the guest: missing, not ELF, or
    not x86-64/i386."""

    exit_code = EXIT_USAGE  # bad input


def user_program(path: str | Path) -> Program:
    """A user's own x86-64 or i386 binary, run in the guest as it was linked: its interpreter
    and libraries are copied from this machine to the same paths in the guest.  The variant
    records what the binary has (32/64-bit, static, SFrame, the shadow-stack symbol); whether
    it keeps frame pointers cannot be read from the file, so it is left True."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ProgramError(f"--program {path}: no such file")
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if elf.header.e_machine not in ("EM_X86_64", "EM_386"):
                raise ProgramError(f"--program {path}: {elf.header.e_machine}, not x86-64 or i386")
            bits = elf.elfclass
            static = not any(s["p_type"] == "PT_INTERP" for s in elf.iter_segments())
            sframe = elf.get_section_by_name(".sframe") is not None or any(
                s["p_type"] == "PT_GNU_SFRAME" for s in elf.iter_segments())
            symtab = elf.get_section_by_name(".symtab")
            shadow = bool(symtab and symtab.get_symbol_by_name("harness_shadow"))
    except ELFError as exc:
        raise ProgramError(f"--program {path}: not an ELF file ({exc})") from exc
    variant = Variant(bits=bits, sframe=sframe, static=static, shadow=shadow)
    runtime = () if static else tuple(runtime_files(path, Path("/")))
    return Program(path.name, USER, variant, path, runtime)


def build_program(name: str, tc: Toolchain, variant: Variant = Variant()) -> Program:
    src = SOURCES / f"{name}.c"
    if not src.is_file():
        raise ImageError(f"no guest program source {src}")
    headers = sorted(SOURCES.glob("*.h"))
    flags = cflags(tc, variant)
    key = content_key("program-v1", tc.name, tc.binutils_version, tc.gcc_version, flags, src,
                      *[h for h in headers])

    def build(tmp: Path) -> None:
        outer, inner = tc.workdir(f"{name}-{key}")
        try:
            for f in (src, *headers):
                shutil.copy(f, outer / f.name)
            tc.run(["gcc", *flags, "-o", name, f"{name}.c"], cwd=inner)
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
