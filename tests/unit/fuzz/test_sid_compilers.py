"""sid's other compilers in the matrix: gcc-11 .. gcc-15 with sid's binutils, clang-22/-23 with
their integrated assembler's SFrame (V2) or with gas (``sid-clangN-gas``), linked by sid's ld.bfd
and by their own lld; and clang's SFrame judged like gas's, in the object before any linker.

What the toolchain's own tools say is checked beside the checker: ld.bfd 2.47.50's words when it
ignores clang's V2 section, llvm-readobj's and sid's objdump's reading of the object, sid's
readelf's program headers of lld's output.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from harness.fuzz.build import BuildConfig, build
from harness.fuzz.static import StaticChecker
from harness.images.toolchain import SID_CLANGS, SID_GCCS
from harness.toolchain.binutils import binutils
from tests.support.toolchains import need
from tests.unit.fuzz.test_build import C_SHAPE, CXX_SHAPE


def _built(tc, linker, tmp_path, *, static=False, shape=C_SHAPE, opt="-O2"):
    need(tc)
    b = build(shape, BuildConfig(tc, opt, True, True, static, linker), tmp_path / f"{tc}-{linker}-{static}")
    assert b.ok, b.error
    return b


def _sframe_version(path) -> str:
    """sid's objdump --sframe (2.47: reads V2 and V3) on the file: the header's version line."""
    sid = binutils("sid")
    assert sid is not None
    m = re.search(r"Version: (SFRAME_VERSION_\d)", sid.run("objdump", ["--sframe", str(path)]))
    assert m, path
    return m.group(1)


@pytest.mark.parametrize("tc", [f"sid-gcc{v}" for v in SID_GCCS] + [f"sid-clang{v}" for v in SID_CLANGS])
def test_each_compiler_builds_the_generated_program_with_its_own_driver_and_it_runs(tc, tmp_path):
    for shape in (C_SHAPE, CXX_SHAPE):
        b = _built(tc, "bfd", tmp_path / str(len(shape.funcs)), static=True, shape=shape)
        driver = need(tc).driver(shape is CXX_SHAPE)
        assert b.commands[0].startswith(f"[{tc}] {driver} ") and b.commands[1].startswith(f"[{tc}] {driver} ")
        version = tc.rsplit("gcc", 1)[-1] if "gcc" in tc else tc.rsplit("clang", 1)[-1]
        assert b.gcc.startswith(version + "."), b.gcc
        assert f"{version}." in b.versions["cc"] and "2.47" in b.versions["as"] and "2.47" in b.versions["ld"]
        r = subprocess.run([str(b.binary), "3"], capture_output=True, timeout=60)
        assert r.returncode == 0, r


@pytest.mark.parametrize("v", SID_CLANGS)
def test_clangs_v2_is_ignored_by_sids_ld_bfd_and_the_checker_says_the_linker_dropped_it(v, tmp_path):
    tc = f"sid-clang{v}"
    b = _built(tc, "bfd", tmp_path)
    assert "-Wa,--allow-experimental-sframe" in b.commands[0]
    # the linker's own words, on a link that succeeded
    assert "unexpected SFrame format version 2" in b.stderr[1] and "SFrame section ignored" in b.stderr[1]
    # the object's section: V2 to sid's objdump and to LLVM's own llvm-readobj
    assert _sframe_version(b.object) == "SFRAME_VERSION_2"
    root = need(tc).root  # llvm-readobj runs in the root: the object copied into its /tmp
    inner = root / "tmp" / f"sframe-v2-{v}-{tmp_path.name}.o"
    inner.write_bytes(b.object.read_bytes())
    try:
        readobj = subprocess.run(["chroot", str(root), f"llvm-readobj-{v}", "--sframe", f"/tmp/{inner.name}"],
                                 capture_output=True, text=True, timeout=60)
    finally:
        inner.unlink()
    assert readobj.returncode == 0 and "Version: V2 (0x2)" in readobj.stdout, readobj.stderr
    checker = StaticChecker()
    findings = checker(b)
    kinds = {f.kind: f for f in findings}
    dropped = kinds["sframe-dropped"]
    assert dropped.signature.linker == "bfd" and dropped.signature.flags == "sframe dyn"
    with open(b.binary, "rb") as f:  # every generated function and main: all of clang's FDEs gone
        symtab = ELFFile(f).get_section_by_name(".symtab")
        funcs = {s.name for s in symtab.iter_symbols() if s["st_info"]["type"] == "STT_FUNC" and s["st_size"]
                 and (s.name.startswith("fz_") or s.name == "main")}
    assert set(dropped.evidence["functions"]) == funcs and {"fz_f0", "main"} <= funcs
    # clang's own SFrame agrees with its own CFI at every instruction of the object
    assert "sframe-object" not in kinds and checker.object_instructions > 50
    assert "sframe-no-fre" not in kinds and checker.expected["sframe-dropped-function"] > 0


def test_a_static_link_keeps_an_empty_section_and_says_so(tmp_path):
    b = _built("sid-clang22", "bfd", tmp_path, static=True, opt="-O0")
    findings = StaticChecker()(b)
    keys = {f.signature.key for f in findings}
    assert "sframe-check [empty-section] @ sid-clang22/bfd sframe static" in keys, keys
    assert "sframe-dropped @ sid-clang22/bfd sframe static" in keys, keys


@pytest.mark.parametrize("v", SID_CLANGS)
def test_lld_keeps_clangs_section_without_pt_gnu_sframe_and_its_steps_agree(v, tmp_path):
    tc = f"sid-clang{v}"
    b = _built(tc, "lld", tmp_path)
    assert b.link_toolchain == tc and b.commands[1].startswith(f"[{tc}] clang-{v} ") and "-fuse-ld=lld" in b.commands[1]
    assert f"LLD {v}." in need(tc).run([f"ld.lld-{v}", "--version"]).stdout
    sid = binutils("sid")
    phdrs = sid.run("readelf", ["-lW", str(b.binary)])
    assert "GNU_EH_FRAME" in phdrs and "GNU_SFRAME" not in phdrs
    checker = StaticChecker()
    keys = {f.signature.key for f in checker(b)}
    assert f"sframe-check [no-pt-gnu-sframe] @ {tc}/lld sframe dyn" in keys, keys
    assert not any(k.startswith(("sframe-step", "sframe-object", "sframe-dropped", "sframe-no-fre")) for k in keys), keys
    assert checker.instructions > 50 and checker.object_instructions > 50


def test_clang_with_gas_writes_v3_that_ld_bfd_keeps(tmp_path):
    b = _built("sid-clang22-gas", "bfd", tmp_path)
    assert "-fno-integrated-as" in b.commands[0] and "--allow-experimental-sframe" not in b.commands[0]
    assert _sframe_version(b.object) == "SFRAME_VERSION_3" and _sframe_version(b.binary) == "SFRAME_VERSION_3"
    assert "SFrame" not in b.stderr[1]
    keys = {f.signature.key for f in StaticChecker()(b)}
    assert not any(k.startswith(("sframe-dropped", "sframe-object", "sframe-step", "sframe-no-fre")) for k in keys), keys


@pytest.mark.parametrize("v", SID_CLANGS)
def test_clang_with_gas_cannot_assemble_a_probed_block_scope_frame(v, tmp_path):
    """A defect the bigframe shape found (docs/findings.md): with -g and -fstack-clash-protection,
    clang 22.1.8 and 23.1.4 mark the probe loop of a big array declared in a nested block with
    ``.loc 1 0 0``, a file number no ``.file`` declared (DWARF 5: only ``.file 0``).  Their
    integrated assembler takes it and writes a line-table row with file index 1 in a table of one
    file, which LLVM's own verifier rejects; GNU as refuses it ("unassigned file number 1"), so
    ``-fno-integrated-as`` builds fail.  The fuzzer's build of such a shape is a finding of its own
    (its first error line)."""
    from tests.unit.fuzz.test_build import BIG_SHAPE
    need(f"sid-clang{v}-gas")
    b = build(BIG_SHAPE, BuildConfig(f"sid-clang{v}-gas", "-O0", True, True, False, "bfd"), tmp_path / "gas")
    assert not b.ok and "-fstack-clash-protection" in b.commands[0]
    assert "unassigned file number 1" in (tmp_path / "gas" / "build-error.txt").read_text()
    own = _built(f"sid-clang{v}", "bfd", tmp_path, shape=BIG_SHAPE, opt="-O0")
    tc = need(f"sid-clang{v}")
    d, inner = tc.workdir("verify")
    try:
        shutil.copy(own.object, d / "prog.o")
        r = subprocess.run(["chroot", str(tc.root), f"llvm-dwarfdump-{v}", "--verify", f"{inner}/prog.o"],
                           capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    assert r.returncode != 0 and "has invalid file index 1" in r.stdout, r.stdout[-2000:]
