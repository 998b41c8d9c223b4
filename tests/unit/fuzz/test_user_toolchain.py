"""``--toolchain NAME=PREFIX``: a user's own install (PREFIX/bin with gcc or clang, as and ld) builds
the generated programs on the host, with its own as and ld (``-B PREFIX/bin/``), and its versions go
into every reproducer.

Two real installs: a prefix of symlinks to this machine's gcc 12 and binutils 2.40, and one whose
as and ld are the sid root's binutils 2.47.50 run through the root's own dynamic loader (as
harness/toolchain/binutils.py runs them), beside the host's gcc: its objects carry SFrame V3, which
binutils 2.40 cannot write, so the prefix's as, not the host's, assembled them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from harness.fuzz.build import BuildConfig, MatrixError, build
from harness.images.errors import ImageError
from harness.images.toolchain import USER_TOOLCHAINS, known_toolchains, user_toolchain
from tests.support.tiers import DEEP
from tests.support.toolchains import need
from tests.unit.fuzz.test_build import C_SHAPE

HARNESS = [sys.executable, "-m", "harness.cli"]


def _host_tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not on this machine"
    return os.path.realpath(path)


@pytest.fixture
def registered():
    """USER_TOOLCHAINS as it was before the test (a test's registrations do not leak)."""
    before = dict(USER_TOOLCHAINS)
    yield
    USER_TOOLCHAINS.clear()
    USER_TOOLCHAINS.update(before)


def host_prefix(d: Path) -> Path:
    (d / "bin").mkdir(parents=True)
    for tool in ("gcc", "g++", "as", "ld"):
        (d / "bin" / tool).symlink_to(_host_tool(tool))
    return d


def sid_binutils_prefix(d: Path) -> Path:
    """as and ld of the sid root, each run through the root's ld.so; gcc and g++ the host's."""
    root = need("sid").root
    (d / "bin").mkdir(parents=True)
    libs = f"{root}/usr/lib/x86_64-linux-gnu:{root}/lib/x86_64-linux-gnu"
    for tool, binary in (("as", "as"), ("ld", "ld.bfd")):
        script = d / "bin" / tool
        script.write_text(f'#!/bin/sh\nexec {root}/lib64/ld-linux-x86-64.so.2 --library-path {libs} '
                          f'{root}/usr/bin/{binary} "$@"\n')
        script.chmod(0o755)
    for tool in ("gcc", "g++"):
        (d / "bin" / tool).symlink_to(_host_tool(tool))
    return d


def sframe_version(path: Path) -> int:
    with open(path, "rb") as f:
        sec = ELFFile(f).get_section_by_name(".sframe")
        assert sec is not None, f"{path} has no .sframe"
        data = sec.data()
    assert data[:2] == b"\xe2\xde", data[:4]  # SFRAME_MAGIC 0xdee2, little-endian
    return data[2]


def test_a_prefix_without_its_tools_or_with_a_taken_name_is_refused(tmp_path, registered):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "gcc").symlink_to(_host_tool("gcc"))
    with pytest.raises(ImageError, match=r"has no as, ld"):
        user_toolchain("mine", tmp_path)
    with pytest.raises(ImageError, match="has no gcc or clang, as, ld"):
        user_toolchain("mine", tmp_path / "nowhere")
    with pytest.raises(ImageError, match="the name must be new"):
        user_toolchain("sid", host_prefix(tmp_path / "p"))
    assert "mine" not in known_toolchains()
    with pytest.raises(MatrixError, match="unknown toolchain 'mine'"):
        BuildConfig("mine")


def test_the_cli_refuses_a_bad_prefix_and_an_unknown_name_with_exit_2(tmp_path):
    r = subprocess.run([*HARNESS, "fuzz", "--static", "--toolchain", f"mine={tmp_path}", "--budget", "5"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "has no gcc or clang, as, ld" in r.stderr, r.stderr
    r = subprocess.run([*HARNESS, "fuzz", "--static", "--toolchains", "host,nosuch", "--budget", "5"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--toolchains nosuch: known are host, trixie, sid, sid-gcc11" in r.stderr, r.stderr


def test_a_prefix_of_the_hosts_tools_builds_with_its_driver_and_records_its_versions(tmp_path, registered):
    prefix = host_prefix(tmp_path / "pfx")
    tc = user_toolchain("mine", prefix)
    assert tc.is_host and tc.prefix == prefix and tc.cc == str(prefix / "bin/gcc")
    host_ld = subprocess.run(["ld", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    host_gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    assert tc.versions() == {"as": subprocess.run(["as", "--version"], capture_output=True,
                                                  text=True).stdout.splitlines()[0],
                             "ld": host_ld, "cc": host_gcc}
    b = build(C_SHAPE, BuildConfig("mine", "-O2", True, True, True, "bfd"), tmp_path / "b")
    assert b.ok, b.error
    assert b.link_toolchain == "mine" and b.versions == tc.versions()
    compile_cmd, link_cmd = b.commands
    assert compile_cmd.startswith(f"[mine] {prefix}/bin/gcc ") and f"-B{prefix}/bin/" in compile_cmd
    # its own ld: no -fuse-ld (which would look for an ld.bfd on PATH, the host's)
    assert "-fuse-ld" not in link_cmd and f"-B{prefix}/bin/" in link_cmd
    assert sframe_version(b.binary) == 1  # binutils 2.40's


def test_a_prefix_of_sids_binutils_assembles_and_links_with_them(tmp_path, registered):
    prefix = sid_binutils_prefix(tmp_path / "pfx")
    tc = user_toolchain("sidbin", prefix)
    assert tc.binutils_version.startswith("2.47"), tc
    assert tc.versions()["as"].startswith("GNU assembler") and "2.47" in tc.versions()["as"]
    assert "2.47" in tc.versions()["ld"] and "12." in tc.versions()["cc"]
    for static in (True, False):
        b = build(C_SHAPE, BuildConfig("sidbin", "-O1", False, True, static, "bfd"), tmp_path / f"b{static}")
        assert b.ok, b.error
        # V3 (binutils 2.46+): the host's as 2.40 writes V1 and its ld 2.40 cannot merge V3
        assert sframe_version(b.binary) == 3
        with open(b.binary, "rb") as f:
            phdrs = [seg["p_type"] for seg in ELFFile(f).iter_segments()]
        assert "PT_GNU_SFRAME" in phdrs or 0x6474E554 in phdrs


@DEEP  # a whole campaign and its replay (12-30 s): the deep tier (tests/support/tiers.py)
def test_a_campaign_with_a_users_install_writes_its_versions_and_replays_it(tmp_path):
    prefix = sid_binutils_prefix(tmp_path / "pfx")
    out = tmp_path / "out"
    r = subprocess.run([*HARNESS, "fuzz", "--static", "--toolchain", f"sidbin={prefix}", "--linkers", "mold",
                        "--seeds", "0:1", "--budget", "30", "--no-shrink", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr  # mold's SFrame kinds: signatures
    camp = json.loads((out / "campaign.json").read_text())
    assert camp["toolchains"] == ["sidbin"]
    rid = camp["signatures"][0]["reproducer"]
    meta = json.loads((out / rid / "signature.json").read_text())
    assert meta["toolchain"]["prefix"] == str(prefix) and meta["toolchain"]["name"] == "sidbin"
    assert "2.47" in meta["toolchain"]["versions"]["as"] and "2.47" in meta["toolchain"]["versions"]["ld"]
    sh = (out / rid / "build.sh").read_text()
    assert "# as: GNU assembler" in sh and (f"{prefix}/bin/gcc " in sh or f"{prefix}/bin/g++ " in sh)
    # a fresh process: replay registers the install again from the reproducer
    r = subprocess.run([*HARNESS, "fuzz", "replay", str(out / rid)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
