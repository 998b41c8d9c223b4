"""An ELF symbol file for gdb, made from a kernel's kallsyms: no debuginfo needed.

Debian's image package ships no usable System.map and the vmlinux has no symbols, so gdb
attached to the guest knows no kernel function.  This writes one assembler line per symbol into
a ``.s`` whose only section, ``.kernel``, is NOBITS and spans the kernel image (``.skip`` between
symbols, so the file holds no bytes of it), assembles it with ``as`` and links it at the
address of the lowest symbol with ``ld --section-start``.  ``symbol-file FILE`` (or
``add-symbol-file FILE``) then gives gdb minimal symbols with types and sizes: ``bt``, ``x/i``,
``info symbol`` and ``break schedule`` work on a kernel without debuginfo.  About 0.6 s for
200,000 symbols; cached per kernel build next to the kallsyms dump.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..kernel.kallsyms import Kallsyms
from .cache import cache_root
from .errors import ImageError
from .lock import cache_lock

__all__ = ["KERNEL_LOW", "kernel_symbol_file", "symbol_file_source"]

KERNEL_LOW = 0xFFFF_FFFF_8000_0000  # the kernel image's mapping (text, data, bss); per-CPU offsets are below


def symbol_file_source(syms: Kallsyms) -> tuple[str, int]:
    """The assembler source and the address its section starts at."""
    rows = sorted({(s.address, s.name): s for s in syms if s.module is None and s.address >= KERNEL_LOW}.values(),
                  key=lambda s: s.address)
    if not rows:
        raise ImageError("kallsyms has no symbol in the kernel image")
    base = rows[0].address
    addrs = sorted({s.address for s in rows})
    nxt = dict(zip(addrs, addrs[1:] + [addrs[-1]], strict=True))
    out = ['.section .kernel,"awx",@nobits']
    seen: set[str] = set()
    cur = base
    for s in rows:
        if s.name in seen or '"' in s.name or "\\" in s.name:
            continue  # a second static function of that name: the first keeps it
        seen.add(s.name)
        if s.address > cur:
            out.append(f".skip {s.address - cur}")
            cur = s.address
        q = f'"{s.name}"'
        out.append(f".globl {q}")  # gdb ignored static ('t') ones left local: all are global here
        out.append(f".type {q},{'@function' if s.type in 'tTwW' else '@object'}")
        out.append(f"{q}:")
        out.append(f".size {q},{nxt[s.address] - s.address}")
    return "\n".join(out) + "\n", base


def kernel_symbol_file(syms: Kallsyms, key: str) -> Path:
    """The ELF symbol file of a kernel build (``key``: its sha256), built once and cached."""
    path = cache_root() / "kallsyms" / f"{key}.syms.elf"
    if path.exists():
        return path
    with cache_lock(path.parent / f".{key}.syms.lock", "another harness writing the kernel symbol file"):
        if not path.exists():
            _build_symbol_file(syms, path)
    return path


def _build_symbol_file(syms: Kallsyms, path: Path) -> None:
    source, base = symbol_file_source(syms)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="harness-syms-") as tmp:
        s, o, elf = Path(tmp, "k.s"), Path(tmp, "k.o"), Path(tmp, "k.elf")
        s.write_text(source)
        for cmd in (["as", "--64", "-o", str(o), str(s)],
                    ["ld", "-o", str(elf), f"--section-start=.kernel={base:#x}", "-e", "0",
                     "--no-warn-rwx-segments", str(o)]):
            r = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if r.returncode != 0:
                raise ImageError(f"{cmd[0]} failed building the kernel symbol file: {r.stderr.strip()[:500]}")
        tmp_out = path.with_suffix(f".{os.getpid()}.tmp")  # on path's file system, then renamed
        shutil.move(elf, tmp_out)
        os.replace(tmp_out, path)
