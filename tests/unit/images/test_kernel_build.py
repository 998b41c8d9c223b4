"""harness/images/kernel_build.py without the long make: bad trees and base configs refused
(exit 2, nothing built), a base config whose choice drops an option the harness needs failing
fast with the dependency named (the tree's own kconfig runs: olddefconfig), and the tree's
identity -- git commit + diff + untracked files, or the content hash of a tarball tree -- moving
with exactly the edits that matter."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.cli import main
from harness.images.kernel import KernelInputError, check_kernel_choice
from harness.images.kernel_build import (
    KernelBuildError,
    KernelConfigDropped,
    KernelTreeError,
    build_tree,
    check_tree,
    harness_fragment,
    tree_identity,
)
from harness.kernel.config import NEEDS, Kconfig
from tests.support.gating import require
from tests.support.tiers import DEEP


@pytest.fixture(scope="module")
def tree() -> Path:
    from harness.images.kernel_source import get_linux_source
    return get_linux_source().tree


def test_not_a_tree_is_bad_input(tmp_path, capsys):
    with pytest.raises(KernelTreeError, match="no such directory"):
        check_tree(tmp_path / "nothing")
    with pytest.raises(KernelTreeError, match="not a Linux tree"):
        check_tree(tmp_path)
    assert main(["kernel", "build", str(tmp_path)]) == 2
    with pytest.raises(KernelInputError, match=r"--kernel tree:.*not a Linux tree"):
        check_kernel_choice(f"tree:{tmp_path}")
    # run refuses it before any run directory is made
    out = tmp_path / "out"
    assert main(["run", "--kernel", f"tree:{tmp_path}", "--out", str(out)]) == 2
    assert not out.exists()
    assert "not a Linux tree" in capsys.readouterr().err


def test_missing_base_config(tree, tmp_path):
    with pytest.raises(KernelTreeError, match="--config .*: no such file"):
        build_tree(tree, base_config=tmp_path / "nope")


def test_fragment_names_every_need(tree):
    frag = harness_fragment(Kconfig.read(tree))
    for need in NEEDS:
        if need.option != "UNWIND_USER":  # no prompt: selected by the arch, a fragment cannot set it
            assert f"CONFIG_{need.option}=y\n" in frag
    assert "CONFIG_BPF_SYSCALL=y" in frag and "CONFIG_DEBUG_INFO_DWARF5=y" in frag


def test_dropped_option_fails_before_make(tree, tmp_path, monkeypatch):
    """A base config that asks for reduced debug info: olddefconfig (the tree's kconfig) then
    drops DEBUG_INFO_BTF, and the build stops at once naming the dependency, nothing compiled.
    The base is the tree's own x86_64_defconfig file with the two options appended: olddefconfig
    gives every option it leaves out its default, as ``make x86_64_defconfig`` does (one kconfig
    run of about 4 s fewer than writing the base with make first)."""
    for tool in ("make", "gcc", "flex", "bison"):
        require(shutil.which(tool) is not None, f"{tool} is needed to run the tree's kconfig")
    base = tmp_path / "base.config"
    base.write_text((tree / "arch/x86/configs/x86_64_defconfig").read_text()
                    + "CONFIG_DEBUG_INFO=y\nCONFIG_DEBUG_INFO_REDUCED=y\n")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))  # the O= directory lands here
    with pytest.raises(KernelConfigDropped) as exc:
        build_tree(tree, base_config=base)
    msg = str(exc.value)
    assert "MISSING  CONFIG_DEBUG_INFO_BTF=n" in msg
    assert "depends on !DEBUG_INFO_SPLIT && !DEBUG_INFO_REDUCED (DEBUG_INFO_SPLIT=n, DEBUG_INFO_REDUCED=y)" in msg
    assert exc.value.exit_code == 2
    [out] = (tmp_path / "cache/kbuild").glob("*/")
    assert not [p for p in out.rglob("*.o") if p.relative_to(out).parts[0] != "scripts"]  # only kconfig was built
    assert not (tmp_path / "cache/kernels-built").exists()


def test_content_identity_follows_edits(tree, tmp_path, monkeypatch):
    """A tarball tree (no .git): a hard-linked copy has the same identity; replacing one file's
    bytes changes it; touching a file without changing it does not."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    src = tree / "kernel/unwind"
    a = tmp_path / "a"
    shutil.copytree(src, a, copy_function=os.link)
    first = tree_identity(a)
    assert first.startswith("content:")
    assert tree_identity(a) == first
    os.utime(a / "deferred.c")  # same bytes, new mtime: hashed again, same identity
    assert tree_identity(a) == first
    text = (a / "deferred.c").read_text()
    (a / "deferred.c").unlink()  # replace the hard link, never write through it into the tree
    (a / "deferred.c").write_text(text.replace("unwind_deferred_request", "unwind_deferred_request ", 1))
    assert tree_identity(a) != first
    assert (src / "deferred.c").read_text() == text


def test_git_identity_follows_commit_diff_and_untracked(tmp_path):
    require(shutil.which("git") is not None, "git is needed")
    repo = tmp_path / "r"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env, timeout=60)

    git("init", "-q")
    (repo / "f.c").write_text("int x;\n")
    git("add", "f.c")
    git("commit", "-qm", "one")
    clean = tree_identity(repo)
    assert clean.startswith("git:") and len(clean.split(":")[1]) == 40
    (repo / "f.c").write_text("int y;\n")
    dirty = tree_identity(repo)
    assert dirty.split(":")[1] == clean.split(":")[1] and dirty != clean
    (repo / "new.c").write_text("int z;\n")
    assert tree_identity(repo) not in (clean, dirty)
    (repo / "new.c").unlink()
    assert tree_identity(repo) == dirty
    git("commit", "-qam", "two")
    assert tree_identity(repo).split(":")[1] != clean.split(":")[1]


# Two files broken, two places in make bzImage's first steps (-j2).  arch/x86/tools/relocs_common.c
# is among the first host programs make compiles (archscripts), before objtool and resolve_btfids:
# make stops within seconds, the other job's lines after the compiler's error.
# tools/objtool/special.c comes later, when resolve_btfids' make builds the whole of libbpf beside
# objtool: make waits for that job to finish, so the compiler's error is about 50 lines above
# the log's end, which the error lines must still find; about 20 s of CPU more (libbpf).  Both are
# the deep tier's: a kernel make is a whole heavy run, 15-60 s with the tree's kconfig before it
# (tests/support/tiers.py).  (Breaking tools/lib/subcmd, objtool's first object, saves nothing:
# resolve_btfids' libbpf is built beside it all the same.)
BROKEN_FILES = [
    pytest.param("arch/x86/tools/relocs_common.c", id="relocs-first", marks=DEEP),
    pytest.param("tools/objtool/special.c", id="objtool-behind-libbpf", marks=DEEP),
]


@pytest.mark.parametrize("broken_file", BROKEN_FILES)
def test_a_tree_that_does_not_compile_fails_with_its_log(tree, tmp_path, monkeypatch, broken_file):
    """A hard-linked copy of the tree with one file that no longer compiles (one of the first
    things make bzImage builds): a KernelBuildError
    (exit 2) with the compiler's error among the log's last lines and the whole log kept;
    nothing enters the cache of built kernels."""
    for tool in ("make", "gcc", "flex", "bison"):
        require(shutil.which(tool) is not None, f"{tool} is needed to build the tree")
    copy = tmp_path / "linux"
    shutil.copytree(tree, copy, symlinks=True, copy_function=os.link)
    broken = copy / broken_file
    text = broken.read_text()
    broken.unlink()  # never write through the hard link
    broken.write_text(text + "\nthis is not C;\n")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(KernelBuildError) as exc:
        build_tree(copy, timeout=600)
    msg = str(exc.value)
    assert "make bzImage in" in msg and "failed" in msg and broken.name in msg and "error" in msg
    assert exc.value.exit_code == 2 and exc.value.log.is_file()
    assert "this is not C" in exc.value.log.read_text()
    assert not any((tmp_path / "cache/kernels-built").glob("[!.]*"))
