"""``harness fuzz report``: a signature's reproducer as a bug report, on real reproducers written by
real campaigns: ld.bfd 2.47.50's ``.plt.got`` FRE (CFA sp+16 where its own .eh_frame says sp+8),
sid's ld.bfd ignoring clang's SFrame V2, lld's output without PT_GNU_SFRAME.  Each report is
checked for what a maintainer needs, in the toolchain's own words."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import strategies as st

from harness.fuzz.bugreport import gather, reproducer_dirs
from harness.fuzz.build import BuildConfig
from harness.fuzz.campaign import CampaignError, run
from harness.fuzz.static import StaticChecker
from harness.report.finding import render_report
from tests.support.tiers import DEEP
from tests.support.toolchains import need

HARNESS = [sys.executable, "-m", "harness.cli"]


@functools.cache
def _campaign(config: BuildConfig, root: Path) -> Path:
    out = root / "out"
    run(StaticChecker(), root / "work", seeds=(0, 1), budget=300, toolchains=(config.toolchain,),
        linkers=(config.linker,), out=out, shrink_budget=20, matrix=st.just(config), examples_per_seed=2)
    return out


def _reproducer(config: BuildConfig, root: Path, key: str) -> Path:
    (root / "work").mkdir(parents=True, exist_ok=True)
    out = _campaign(config, root)
    found = [d for d in reproducer_dirs(out) if key in (d / "signature.json").read_text()]
    assert found, [d.name for d in reproducer_dirs(out)]
    return found[0]


def test_the_plt_got_report_names_the_stub_the_two_rules_and_binutils_source(tmp_path):
    need("sid")
    d = _reproducer(BuildConfig("sid", "-O0", True, True, False, "bfd"), tmp_path,
                    "sframe-check [cfa in runtime code] @ sid/bfd sframe dyn")
    r = gather(d, tmp_path / "scratch")
    md = render_report(r)
    assert r.component.startswith("ld.bfd (GNU ld") and "2.47.50" in r.component
    assert "sp+16" in r.title and "sp+8" in r.title and ".plt.got" in r.title
    assert r.address.startswith("0x") and "in `.plt.got`" in r.address and "@plt`" in r.address
    assert "reads the return address at sp+8" in r.unwinder and "return address at sp+0" in r.unwinder
    tools = {e.tool: e for e in r.evidence}
    sframe = next(e for e in r.evidence if e.command.startswith("objdump --sframe"))
    assert sframe.tool == "objdump 2.47.50 (sid root)" and "STARTPC[m]" in sframe.text and "sp+16" in sframe.text
    cfi = next(e for e in r.evidence if e.command.startswith("readelf --debug-dump=frames"))
    assert "DW_CFA_def_cfa: r7 (rsp) ofs 8" in cfi.text and " FDE cie=" in cfi.text
    code = next(e for e in r.evidence if e.command.startswith("objdump -d"))
    assert "@plt>:" in code.text and "jmp" in code.text, tools
    assert "elf_x86_64_sframe_pltgot_fre1" in r.producer_source and "sframe-pltgot-2.d" in r.producer_source
    assert r.versions["as"].startswith("GNU assembler") and "2.47.50" in r.versions["ld"]
    assert any(c.startswith("gcc ") and " -c prog.c" in c for c in r.commands) and "[sid]" in r.commands[0]
    for needle in ("# ld.bfd 2.47.50", "## Minimal source", "```c\n", "## Commands", "## The tools' own words",
                   "## Where the producer emits it", "## What an unwinder gets wrong there", "fz_f0"):
        assert needle in md, needle


def test_the_dropped_v2_report_quotes_the_linker_and_both_readers_of_the_object(tmp_path):
    need("sid-clang22")
    d = _reproducer(BuildConfig("sid-clang22", "-O2", True, True, False, "bfd"), tmp_path,
                    "sframe-dropped @ sid-clang22/bfd sframe dyn")
    r = gather(d, tmp_path / "scratch")
    assert r.component.startswith("ld.bfd (GNU ld") and "clang-22 22.1.8 integrated assembler" in r.title
    assert "unexpected SFrame format version 2" in r.summary and "SFrame section ignored" in r.summary
    readers = {e.tool.split(" ")[0] for e in r.evidence}
    assert {"objdump", "llvm-readobj-22"} <= readers, readers
    llvm = next(e for e in r.evidence if e.tool.startswith("llvm-readobj"))
    assert "Version: V2 (0x2)" in llvm.text
    assert "version 3" in r.upstream.lower() or "V3" in r.upstream


def test_lld_reports_show_the_program_headers_without_pt_gnu_sframe(tmp_path):
    need("sid-clang23")
    d = _reproducer(BuildConfig("sid-clang23", "-O2", True, True, False, "lld"), tmp_path,
                    "sframe-check [no-pt-gnu-sframe] @ sid-clang23/lld sframe dyn")
    r = gather(d, tmp_path / "scratch")
    assert r.component.startswith("ld.lld (Debian LLD 23.")
    phdrs = next(e for e in r.evidence if e.command == "readelf -lW prog")
    assert "GNU_EH_FRAME" in phdrs.text and "GNU_SFRAME" not in phdrs.text
    assert "llvm/llvm-project#156667" in r.upstream and r.address is None


@DEEP  # a campaign's reproducers built and reported (5-11 s): the deep tier (tests/support/tiers.py)
def test_the_command_writes_report_md_and_refuses_a_directory_without_reproducers(tmp_path):
    need("sid")
    d = _reproducer(BuildConfig("sid", "-O0", True, True, False, "bfd"), tmp_path,
                    "sframe-check [cfa in runtime code] @ sid/bfd sframe dyn")
    r = subprocess.run([*HARNESS, "fuzz", "report", str(d)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (d / "report.md").read_text().startswith("# ld.bfd 2.47.50") and str(d / "report.md") in r.stdout
    r = subprocess.run([*HARNESS, "fuzz", "report", str(tmp_path / "scratch-none")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "neither a reproducer directory nor a campaign's" in r.stderr, r.stderr
    with pytest.raises(CampaignError):
        reproducer_dirs(tmp_path / "nothing")


@DEEP  # sid's ld.bfd and objdump on a built program (6-14 s): the deep tier (tests/support/tiers.py)
def test_the_empty_section_report_quotes_binutils_own_objdump_rejecting_it(tmp_path):
    need("sid-clang23")
    d = _reproducer(BuildConfig("sid-clang23", "-O0", True, True, True, "bfd"), tmp_path,
                    "sframe-check [empty-section] @ sid-clang23/bfd sframe static")
    r = gather(d, tmp_path / "scratch")
    actual = next(e for e in r.evidence if e.label == "actual (the program's SFrame)")
    assert actual.tool == "objdump 2.47.50 (sid root)" and "SFrame decode failure: Corrupt SFrame." in actual.text
    assert "0 bytes" in r.summary and "0-byte `SHT_GNU_SFRAME`" in r.producer_source


def test_an_object_finding_is_placed_at_its_function_in_the_program(tmp_path):
    """An sframe-object finding's address is the placed object's, not the program's: the report
    takes the function and offset from its message and finds them in the linked program (nm's
    value plus the offset), or says no address."""
    from harness.fuzz.bugreport import _in_program
    from harness.fuzz.build import build
    from tests.unit.fuzz.test_static import BIGFRAME
    need("host")
    b = build(BIGFRAME, BuildConfig("host", "-O2", False, True, False, "bfd"), tmp_path / "b")
    assert b.ok, b.error
    nm = subprocess.run(["nm", str(b.binary)], capture_output=True, text=True, timeout=60).stdout
    start = next(int(line.split()[0], 16) for line in nm.splitlines() if line.endswith(" T fz_f0"))
    assert _in_program(b.binary, "the object: fz_f0+0x8: the SFrame step (FRE ...)") == start + 8
    assert _in_program(b.binary, "the object: fz_nothere+0x8: ...") is None
    assert _in_program(b.binary, "no place named") is None
