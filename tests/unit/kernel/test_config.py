"""harness.kernel.config and ``harness kernel config``: real .config files judged -- the Debian
kernels' own (from their packages, cached), and the ones the linux-source-7.3 tree's own kconfig
writes (``make x86_64_defconfig`` and ``olddefconfig`` into a temporary O= directory) -- and the
Kconfig reader's expressions checked against kconfig's own results."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.cli import main
from harness.kernel.config import (
    NEEDS,
    ConfigError,
    Kconfig,
    _Eval,
    judge,
    pahole_version_number,
    parse_config,
    read_config,
)
from tests.support.gating import require

KCONFIG_TOOLS = ("make", "gcc", "flex", "bison")


@pytest.fixture(scope="session")
def tree() -> Path:
    from harness.images.kernel_source import get_linux_source
    return get_linux_source().tree


@pytest.fixture(scope="session")
def kconfig(tree) -> Kconfig:
    return Kconfig.read(tree)


def _make(tree: Path, out: Path, *args: str) -> None:
    missing = [t for t in KCONFIG_TOOLS if shutil.which(t) is None]
    require(not missing, f"kconfig needs {', '.join(missing)} (Debian: build-essential flex bison)")
    subprocess.run(["make", "-s", "-C", str(tree), f"O={out}", *args], check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="session")
def engineer_config(tree, tmp_path_factory) -> Path:
    """What the issue's kernel engineer did: x86_64_defconfig, DWARF 5, BTF, KALLSYMS_ALL and
    PERF_EVENTS with scripts/config, then olddefconfig (which drops BTF: no BPF_SYSCALL)."""
    out = tmp_path_factory.mktemp("engineer")
    _make(tree, out, "x86_64_defconfig")
    subprocess.run([str(tree / "scripts/config"), "--file", str(out / ".config"), "-e", "DEBUG_INFO_DWARF5",
                    "-e", "DEBUG_INFO_BTF", "-e", "KALLSYMS_ALL", "-e", "PERF_EVENTS"], check=True, timeout=60)
    _make(tree, out, "olddefconfig")
    return out


def _debian(name: str) -> dict[str, str]:
    from harness.images.kernel import kernel_config
    path = kernel_config(name)
    return parse_config(path.read_text(), str(path))


# --- the Debian kernels' own configs -------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "generic", "rt"])
def test_debian_7x_kernels_will_do(name, kconfig):
    """The harness boots these; their configs must pass, with and without the tree's Kconfig."""
    values = _debian(name)
    for kc in (None, kconfig):
        j = judge(values, kc, pahole=124)
        assert j.ok, [v.line() for v in j.missing]
        assert {v.need.option for v in j.verdicts} >= {n.option for n in NEEDS}
    assert values["UNWIND_USER"] == "y" and values["DEBUG_INFO_BTF"] == "y"


@pytest.mark.parametrize("name", ["bookworm", "trixie"])
def test_debian_kernels_before_617_lack_unwind_user(name, capsys):
    """6.1 and 6.12 have no unwind_user: the one thing missing, and no fragment can set it."""
    values = _debian(name)
    j = judge(values, None, pahole=124)
    assert [v.need.option for v in j.missing] == ["UNWIND_USER"]
    assert "CONFIG_UNWIND_USER=y" not in j.fragment()
    assert j.fragment().startswith("# CONFIG_UNWIND_USER: no prompt")
    from harness.images.kernel import kernel_config
    assert main(["kernel", "config", str(kernel_config(name))]) == 1
    out = capsys.readouterr().out
    assert re.search(r"MISSING\s+CONFIG_UNWIND_USER=n", out) and "# 1 missing" in out


def test_host_pahole_too_old_is_named(kconfig):
    """A config asking for BTF judged for a machine whose pahole is 1.21: olddefconfig would drop it."""
    j = judge(_debian("default"), kconfig, pahole=121)
    [v] = j.missing
    assert v.need.option == "" and "pahole 1.21 on this machine: DEBUG_INFO_BTF needs >= 1.22" in v.because[0]
    assert "made with 1.30" in v.because[0]  # the Debian config's own CONFIG_PAHOLE_VERSION=130
    assert j.fragment() == "# pahole 1.21: install pahole >= 1.22 (Debian: dwarves)\n"


# --- the tree's own kconfig --------------------------------------------------------------------


def test_engineer_config_names_bpf_syscall(engineer_config, tree, capsys):
    """The issue's case: BTF dropped by olddefconfig without a word; here it is named, with
    BPF_SYSCALL first in the fragment, and PVH (the harness's boot path) and PROC_CHILDREN
    (kernel-diff's end of its program) with it."""
    values, found_tree = read_config(engineer_config)
    assert found_tree == tree.resolve()
    j = judge(values, Kconfig.read(found_tree), pahole=124)
    missing = {v.need.option: v for v in j.missing}
    assert set(missing) == {"DEBUG_INFO_BTF", "PVH", "PROC_CHILDREN"}
    assert missing["DEBUG_INFO_BTF"].because == ("depends on BPF_SYSCALL (BPF_SYSCALL=n)",)
    frag = j.fragment().splitlines()
    assert frag.index("CONFIG_BPF_SYSCALL=y") < frag.index("CONFIG_DEBUG_INFO_BTF=y")
    assert main(["kernel", "config", str(engineer_config)]) == 1
    out = capsys.readouterr().out
    assert "depends on BPF_SYSCALL (BPF_SYSCALL=n)" in out and out.endswith(j.fragment())


def _kconfig_dir(engineer_config: Path, tmp_path: Path) -> Path:
    """A copy of the engineer's O= directory, modification times kept: make finds its kconfig
    tools (scripts/basic, scripts/kconfig/conf) built and runs only the config step (a fresh
    directory compiles them again first, about 2 s a test)."""
    out = tmp_path / "o"
    shutil.copytree(engineer_config, out, symlinks=True)
    return out


def test_fragment_applied_makes_the_config_do(engineer_config, tree, tmp_path, capsys):
    """The printed fragment, appended and olddefconfig'd by the tree's kconfig, is enough."""
    out = _kconfig_dir(engineer_config, tmp_path)
    frag = judge(read_config(engineer_config)[0], Kconfig.read(tree), pahole=124).fragment()
    (out / ".config").write_text((engineer_config / ".config").read_text() + frag)
    _make(tree, out, "olddefconfig")
    values = parse_config((out / ".config").read_text())
    assert values["DEBUG_INFO_BTF"] == values["BPF_SYSCALL"] == values["PVH"] == values["PROC_CHILDREN"] == "y"
    assert main(["kernel", "config", str(out / ".config")]) == 0  # the file alone: no tree beside it
    assert "# the config will do" in capsys.readouterr().out


def test_no_pahole_is_named(engineer_config, tree, tmp_path):
    """olddefconfig where pahole is missing (PAHOLE=false: version 0) drops BTF even with
    BPF_SYSCALL; the judgement says the config was made without pahole."""
    out = _kconfig_dir(engineer_config, tmp_path)
    (out / ".config").write_text((engineer_config / ".config").read_text() + "CONFIG_BPF_SYSCALL=y\nCONFIG_PVH=y\n"
                                 "CONFIG_DEBUG_INFO_BTF=y\nCONFIG_PROC_CHILDREN=y\n")
    _make(tree, out, "PAHOLE=false", "olddefconfig")
    values = parse_config((out / ".config").read_text())
    assert values["PAHOLE_VERSION"] == "0" and values.get("DEBUG_INFO_BTF", "n") == "n"
    j = judge(values, Kconfig.read(tree), pahole=124)
    [v] = j.missing
    assert v.need.option == "DEBUG_INFO_BTF"
    assert v.because == ("depends on PAHOLE_VERSION >= 122: this .config was made with no pahole; "
                         "this machine has pahole 1.24",)


def test_expressions_agree_with_kconfig(engineer_config, kconfig):
    """Every option kconfig set (y or m) in three real configs has a definition whose every
    dependency our evaluator finds true: the reader's depends (with if/menu blocks and trailing
    comments) and the tristate logic agree with kconfig's own results."""
    configs = [read_config(engineer_config)[0], _debian("default"), _debian("rt")]
    for values in configs:
        ev = _Eval(values)
        checked = 0
        for name, value in values.items():
            entry = kconfig.entries.get(name)
            if value not in ("y", "m") or entry is None:
                continue
            holds = []
            for d in entry.defs:
                deps = [dep for dep in d.depends if "$(" not in dep]  # macros need the toolchain
                checked += len(deps)
                holds.append(all(ev(dep) for dep in deps))
            assert any(holds), (name, [d.depends for d in entry.defs])
        assert checked > 800


def test_reader_facts_against_the_tree(kconfig, tree):
    """Where the reader says an option is defined, the file says ``config NAME``; its
    unwinding options are every such ``config`` line of the x86 build's Kconfig files."""
    btf = kconfig.entries["DEBUG_INFO_BTF"]
    path, line = btf.where.rsplit(":", 1)
    assert (tree / path).read_text().splitlines()[int(line) - 1] == "config DEBUG_INFO_BTF"
    assert "BPF_SYSCALL" in btf.depends and "PAHOLE_VERSION >= 122" in btf.depends
    grep = subprocess.run(["grep", "-rhoE", r"^(menu)?config \S*(UNWIND_(USER|DEFERRED)|SFRAME)\S*",
                           "--include=Kconfig*", "arch/Kconfig", "arch/x86", "kernel", "init", "lib", "mm"],
                          cwd=tree, capture_output=True, text=True, timeout=60).stdout
    assert kconfig.offered() == sorted({ln.split()[1] for ln in grep.splitlines()}) == [
        "HAVE_UNWIND_USER_FP", "UNWIND_USER"]


# --- bad input ---------------------------------------------------------------------------------


def test_bad_input(tmp_path, capsys):
    bad = tmp_path / "passwd"
    bad.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(ConfigError, match=r"passwd:1: not a \.config line"):
        read_config(bad)
    assert main(["kernel", "config", str(bad)]) == 2
    assert main(["kernel", "config", str(tmp_path / "nothing")]) == 2
    assert main(["kernel", "config", str(tmp_path)]) == 2  # a directory without .config
    err = capsys.readouterr().err
    assert "passwd:1: not a .config line" in err and "no such file or directory" in err and "no .config in it" in err
    (tmp_path / "empty").write_text("# only a comment\n")
    with pytest.raises(ConfigError, match="no CONFIG_ line"):
        read_config(tmp_path / "empty")


def test_pahole_version_number():
    assert pahole_version_number("v1.24\n") == 124
    assert pahole_version_number("v1.30") == 130
    with pytest.raises(ConfigError):
        pahole_version_number("pahole: command failed")
