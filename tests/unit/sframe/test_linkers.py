"""The four linkers Debian ships, on the same objects: what each does with their .sframe sections.

callchain.c (host gcc -O2 -S) and guest_programs/sframe_cases/drap.s are assembled twice --
SFrame V1 by the host's gas 2.40, V3 by sid's gas 2.47 (the same assembly: the objects link
against the host's glibc) -- and each pair is linked by the host's gcc with -fuse-ld=bfd, gold,
mold and lld.  ``sframe check`` names what each linker did as findings of their own kinds:

* ld.bfd 2.40 merges V1 inputs (sorted, FDE_SORTED, PT_GNU_SFRAME): clean.  It cannot read V3
  and says so ("error in ...(.sframe); no .sframe will be created"): its output then has the
  PLT's FDEs only.
* gold, mold and lld treat .sframe as any other section: the inputs' sections laid end to end
  (concatenated-not-merged), no FDE_SORTED (fdes-unsorted), no PT_GNU_SFRAME
  (no-pt-gnu-sframe), and -- V1 -- each start left as its relocated PC-relative value under a
  header that says section-relative (pcrel-starts-unflagged); V3 starts are PC-relative by their
  flag, so right.  gold also moves main's .text.startup before .text, which leaves the FDEs of
  the first section out of address order (fde-order).
* Read that way, every FRE of every linker's output agrees with its .eh_frame.
* ``sframe dump`` of each output equals the objdump --sframe of the binutils that writes its
  version (which reads the first of concatenated sections only).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.images.programs import SOURCES
from harness.unwind.sframe_check import check_binary
from tests.support.gating import require
from tests.support.toolchains import need

CASES_DIR = Path(__file__).resolve().parents[3] / "guest_programs" / "sframe_cases"
LINKERS = ("bfd", "gold", "mold", "lld")
LINKER_BINARY = {"bfd": "ld.bfd", "gold": "ld.gold", "mold": "mold", "lld": "ld.lld"}
GAS = {1: "host", 3: "sid"}

EXPECTED = {
    (1, "bfd"): set(),
    (1, "gold"): {"concatenated-not-merged", "pcrel-starts-unflagged", "fdes-unsorted", "no-pt-gnu-sframe",
                  "fde-order"},
    (1, "mold"): {"concatenated-not-merged", "pcrel-starts-unflagged", "fdes-unsorted", "no-pt-gnu-sframe"},
    (1, "lld"): {"concatenated-not-merged", "pcrel-starts-unflagged", "fdes-unsorted", "no-pt-gnu-sframe"},
    (3, "bfd"): set(),
    (3, "gold"): {"concatenated-not-merged", "fdes-unsorted", "no-pt-gnu-sframe", "fde-order"},
    (3, "mold"): {"concatenated-not-merged", "fdes-unsorted", "no-pt-gnu-sframe"},
    (3, "lld"): {"concatenated-not-merged", "fdes-unsorted", "no-pt-gnu-sframe"},
}


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """{version: [callchain.o, drap.o]}, built on first use."""
    made: dict[int, list[Path]] = {}
    asm = tmp_path_factory.mktemp("asm")

    def get(version: int) -> list[Path]:
        if version not in made:
            host = need("host")
            if not (asm / "callchain.s").exists():
                host.run(["gcc", "-O2", "-fno-omit-frame-pointer", "-S", str(SOURCES / "callchain.c"), "-o",
                          str(asm / "callchain.s")], cwd=str(asm))
            tc = need(GAS[version])
            outer, inner = tc.workdir(f"linkers-v{version}")
            dest = tmp_path_factory.mktemp(f"objects-v{version}")
            try:
                shutil.copy(asm / "callchain.s", outer / "callchain.s")
                shutil.copy(CASES_DIR / "drap.s", outer / "drap.s")
                for name in ("callchain", "drap"):
                    tc.run(["as", "--gsframe", f"{name}.s", "-o", f"{name}.o"], cwd=inner)
                    shutil.copy(outer / f"{name}.o", dest / f"{name}.o")
            finally:
                shutil.rmtree(outer, ignore_errors=True)
            made[version] = [dest / "callchain.o", dest / "drap.o"]
        return made[version]

    return get


def _objdump(tc_name: str, path: Path) -> str:
    """``objdump --sframe`` of the binutils that writes the section's version (2.47 cannot read
    a V1 section), run in its root on a copy named as ours is."""
    tc = need(tc_name)
    outer, inner = tc.workdir("linkers-objdump")
    try:
        shutil.copy(path, outer / path.name)
        return tc.run(["objdump", "--sframe", path.name], cwd=inner).stdout
    finally:
        shutil.rmtree(outer, ignore_errors=True)


def _our_dump(path: Path) -> str:
    from harness.report.sframe import objdump_sframe
    from harness.unwind.sframe_check import load

    table, _ = load(path, strict=False, place=False)
    table.section.decode_all()
    return objdump_sframe(table, path.name)


@pytest.mark.parametrize("version", sorted(GAS))
@pytest.mark.parametrize("linker", LINKERS)
def test_each_linker_is_named_for_what_it_did(objects, version, linker, tmp_path):
    require(shutil.which(LINKER_BINARY[linker]) is not None, f"{LINKER_BINARY[linker]} is not installed (./dev)")
    objs = objects(version)
    out = tmp_path / f"callchain-v{version}-{linker}"
    linked = need("host").run(["gcc", f"-fuse-ld={linker}", "-o", str(out), *map(str, objs)], cwd=str(tmp_path))
    r = check_binary(out)
    kinds = set(r.by_kind())
    assert kinds == EXPECTED[(version, linker)], [f.message for f in r.findings]
    assert r.fres_checked == r.num_fres, r.notes  # read as found, every FRE agrees with .eh_frame
    assert _our_dump(out) == _objdump(GAS[r.version], out)  # the first section, as objdump reads it
    if linker == "bfd":
        if version == 1:
            assert r.version == 1 and r.num_fdes >= 7 and r.pieces == 1
        else:
            assert "error in" in linked.stderr and "no .sframe will be created" in linked.stderr
            # what is left is the PLT's: every function of the inputs is without an FDE, and noted
            assert r.version == 1 and r.cfi_without_sframe >= 6
            assert any("have no SFrame FDE" in n and "main" in n for n in r.notes), r.notes
        return
    assert r.pieces == 2 and r.version == version
    (cat,) = r.of_kind("concatenated-not-merged")
    assert "2 SFrame sections laid end to end" in cat.message
    (nopt,) = r.of_kind("no-pt-gnu-sframe")
    assert nopt.message.endswith("so its lookup sees none")
    assert len(r.of_kind("fdes-unsorted")) == 2
    if version == 1:
        assert len(r.of_kind("pcrel-starts-unflagged")) == 2
