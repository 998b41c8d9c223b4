"""A work copy of Debian's linux-source-7.3 for the QEMU tests that build a kernel tree: every
file a hard link into the cached tree (harness.images.kernel_source), made once per cache at a
stable path so that its O= build directory (keyed by the tree's path) stays warm across
sessions.  An edit replaces the one file with a file of its own (:func:`edit`), never writing
through a hard link into the cached tree, and :func:`restore` puts the original bytes back the
same way (a new file, a new mtime: make sees the change either way)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness.images.cache import cached_dir, content_key
from harness.images.kernel_source import get_linux_source

__all__ = ["EDITED", "edit", "restore", "work_tree"]

#: the file an edit changes: the deferred unwinder itself
EDITED = "kernel/unwind/deferred.c"


def work_tree() -> tuple[Path, Path]:
    """(the work copy, the cached tree it links into)."""
    src = get_linux_source().tree

    def build(tmp: Path) -> None:
        shutil.copytree(src, tmp / src.name, symlinks=True, copy_function=os.link)

    d = cached_dir("kernel-tree-work", content_key("kernel-tree-work-v1", str(src)), build,
                   what=f"a hard-linked work copy of {src}")
    return d / src.name, src


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".harness-new")
    tmp.write_text(text)
    os.replace(tmp, path)  # the hard link is gone, the cached tree's file untouched


def edit(tree: Path, original: Path, marker: str) -> str:
    """Change one line of ``EDITED`` in the work copy: its first ``#include`` line is followed
    by a string constant holding ``marker``, which the built kernel's .rodata then carries (the
    proof that the edit was compiled in); the lines as they now read."""
    text = (original / EDITED).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("#include "))
    new = f'{line}\nstatic const char harness_tree_edit[] __used = "{marker}";  /* harness test edit */'
    _replace(tree / EDITED, text.replace(line, new, 1))
    return new


def restore(tree: Path, original: Path) -> None:
    _replace(tree / EDITED, (original / EDITED).read_text())
