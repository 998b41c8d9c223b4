"""``harness sframe check --tree DIR`` on a small Debian-like root made of real gas output.

The root holds objects the host's ``as --gsframe`` assembled from guest_programs/sframe_cases,
an archive of them, a program the host's gold linked (its .sframe concatenated), and bad files:
an ELF file cut after its header, a copy whose .sframe magic is broken, a text file.  dpkg's
lists under var/lib/dpkg/info name the packages, through a usrmerge link (lib -> usr/lib).
Each bad file is its own typed error; the run goes on and says which package has what.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from harness.cli import main
from harness.images.errors import ImageError
from harness.images.toolchain import get_toolchain
from harness.unwind.sframe_tree import NO_PACKAGE, check_tree
from tests.support.gating import require

CASES_DIR = Path(__file__).resolve().parents[3] / "guest_programs" / "sframe_cases"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    require(shutil.which("ld.gold") is not None, "ld.gold is not installed (binutils)")
    try:
        tc = get_toolchain("host")
    except ImageError as exc:
        require(False, f"host toolchain: {exc}")
    r = tmp_path_factory.mktemp("tree")
    build = tmp_path_factory.mktemp("build")
    for case in ("frames", "drap"):
        tc.run(["as", "--gsframe", str(CASES_DIR / f"{case}.s"), "-o", str(build / f"{case}.o")])
    (build / "main.c").write_text("int drap(void); int main(void) { return drap(); }\n")
    tc.run(["gcc", "-O1", "-Wa,--gsframe", "-fuse-ld=gold", "-o", str(build / "prog"), str(build / "main.c"),
            str(build / "drap.o")])
    tc.run(["ar", "rc", str(build / "libcases.a"), str(build / "frames.o"), str(build / "drap.o")])
    lib = r / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (r / "lib").symlink_to("usr/lib")
    (r / "usr/bin").mkdir(parents=True)
    shutil.copy(build / "frames.o", lib / "frames.o")
    shutil.copy(build / "libcases.a", lib / "libcases.a")
    shutil.copy(build / "prog", r / "usr/bin/prog")
    data = (build / "frames.o").read_bytes()
    (r / "usr/bin/truncated").write_bytes(data[:40])
    with open(build / "frames.o", "rb") as f:
        off = ELFFile(f).get_section_by_name(".sframe")["sh_offset"]
    bad = bytearray(data)
    bad[off] ^= 0xFF
    (lib / "badmagic.o").write_bytes(bytes(bad))
    (r / "usr/bin/script").write_text("#!/bin/sh\necho hi\n")
    info = r / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    (info / "libcases-dev:amd64.list").write_text("/.\n/lib\n/lib/x86_64-linux-gnu/frames.o\n"
                                                  "/lib/x86_64-linux-gnu/libcases.a\n")
    (info / "prog.list").write_text("/usr/bin/prog\n/usr/bin/script\n")
    return r


def test_every_file_is_checked_and_bad_ones_are_their_own_errors(root):
    rep = check_tree(root, jobs=2, timeout=300)
    assert rep.elf_files == 4 and rep.archives == 1 and rep.timed_out == 0
    by = {r.path: r for r in rep.results}
    assert set(by) == {"/usr/lib/x86_64-linux-gnu/frames.o", "/usr/lib/x86_64-linux-gnu/libcases.a",
                       "/usr/bin/prog", "/usr/bin/truncated", "/usr/lib/x86_64-linux-gnu/badmagic.o"}
    assert not any(r.crash for r in rep.results)
    assert by["/usr/bin/truncated"].errors and "not a readable ELF file" in by["/usr/bin/truncated"].errors[0]
    assert "bad magic" in by["/usr/lib/x86_64-linux-gnu/badmagic.o"].errors[0]
    # gas 2.40's own faults in frames.s (outermost's RA, inexpressible's CFA), once alone, once in the .a
    assert by["/usr/lib/x86_64-linux-gnu/frames.o"].kinds == {"ra": 1, "cfa": 1}
    lib = by["/usr/lib/x86_64-linux-gnu/libcases.a"]
    assert lib.kinds == {"ra": 1, "cfa": 1} and lib.members == 2 and lib.checked_members == 2
    assert set(by["/usr/bin/prog"].kinds) == {"no-pt-gnu-sframe", "concatenated-not-merged",
                                              "pcrel-starts-unflagged", "fdes-unsorted"}
    pk = rep.by_package()
    # via the lib -> usr/lib link; the broken copy has .sframe (a bad one) and no package
    assert sorted(pk) == [NO_PACKAGE, "libcases-dev:amd64", "prog"]
    assert not by["/usr/bin/truncated"].has_sframe
    assert pk["prog"]["kinds"]["no-pt-gnu-sframe"] == 1
    assert rep.packages["/usr/lib/x86_64-linux-gnu/badmagic.o"] == NO_PACKAGE


def test_the_command_prints_one_line_per_kind(root, capsys):
    rc = main(["sframe", "check", "--tree", str(root)])
    out, err = capsys.readouterr()
    assert rc == 2, err  # bad input (the two broken files) outranks findings
    assert out.startswith(f"{root}: ") and " 4 ELF files, 1 archives; 4 with SFrame data" in out
    lines = out.splitlines()
    assert [ln.split(":")[0].strip() for ln in lines if " findings in " in ln] == [
        "concatenated-not-merged", "pcrel-starts-unflagged", "fdes-unsorted", "no-pt-gnu-sframe", "cfa", "ra"]
    assert "  unreadable: 2 files (bad input, each its own)" in lines
    assert any(ln.startswith("    prog: 1 files (/usr/bin/prog): ") and "1 no-pt-gnu-sframe" in ln for ln in lines)
    assert main(["sframe", "check", "--tree", str(root / "nowhere")]) == 2


@pytest.mark.parametrize("name", ["usr/lib/x86_64-linux-gnu/frames.o", "usr/bin/prog",
                                  "usr/lib/x86_64-linux-gnu/libcases.a"])
def test_cut_and_corrupted_copies_are_findings_or_typed_errors(root, name, tmp_path):
    """Real files cut at 150 lengths and corrupted at random bytes (seeded): each is checked, or
    is its own typed error; no copy makes the checker itself fail."""
    import random

    from harness.unwind.sframe_tree import check_one

    src = (root / name).read_bytes()
    rng = random.Random(24)
    copies = [src[:k] for k in range(0, len(src), max(1, len(src) // 150))]
    for _ in range(150):
        b = bytearray(src)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        copies.append(bytes(b))
    crashes, errors = [], 0
    for i, data in enumerate(copies):
        p = tmp_path / f"copy{i}"
        p.write_bytes(data)
        r = check_one(str(p), data[:8] == b"!<arch>\n", str(tmp_path))
        errors += bool(r.errors)
        if r.crash:
            crashes.append((i, r.crash))
    assert crashes == []
    assert errors > 50  # most cuts break the file: typed errors, one each


def test_a_tree_without_sframe_data_says_so(tmp_path, capsys):
    """A root whose ELF files carry no SFrame data (Debian's own packages, so far): nothing to
    check, which is no verdict (exit 2), never a clean one (issue 34); the figures say 0 without
    an empty list of versions."""
    (tmp_path / "bin").mkdir()
    shutil.copy("/bin/true", tmp_path / "bin" / "true")
    rc = main(["sframe", "check", "--tree", str(tmp_path)])
    out, err = capsys.readouterr()
    assert rc == 2, err
    first = out.splitlines()[0]
    assert first.startswith(f"{tmp_path}: 1 files, 1 ELF files, 0 archives; 0 with SFrame data, 0 FDEs, 0 FREs, "
                            f"0 FREs checked against .eh_frame (0 addresses), 0 .eh_frame FDEs without one; ")
    assert out.splitlines()[1:-1] == ["  nothing to check: no file carries SFrame data", "  packages with SFrame data: 0"]
    assert out.splitlines()[-1].startswith("cluster: LocalCluster, ")  # Dask by default (issue 36)


def test_a_file_whose_check_checked_nothing_is_no_verdict_in_the_tree(root, tmp_path, capsys):
    """A tree of two copies of frames.o, one with its CIE's augmentation length made 65 (what
    mutating real files found, issue 34): that file's rules are not compared, so it is counted
    under "no verdict" with its reason, its package says so instead of "clean", and the run
    exits 2; the counts the summary rests on (FREs checked, addresses) are the good copy's."""
    from harness.unwind.sframe_tree import check_one

    good = root / "usr/lib/x86_64-linux-gnu/frames.o"
    data = bytearray(good.read_bytes())
    with open(good, "rb") as f:
        eh = ELFFile(f).get_section_by_name(".eh_frame")["sh_offset"]
    assert data[eh + 8:eh + 16] == b"\x01zR\x00\x01\x78\x10\x01"
    data[eh + 15] = 65  # augmentation data length
    (tmp_path / "lib").mkdir()
    shutil.copy(good, tmp_path / "lib" / "good.o")
    (tmp_path / "lib" / "bad.o").write_bytes(bytes(data))
    info = tmp_path / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    (info / "frames.list").write_text("/lib/good.o\n/lib/bad.o\n")
    bad = check_one(str(tmp_path / "lib" / "bad.o"), False, str(tmp_path))
    assert bad.has_sframe and not bad.errors and bad.kinds == {} and bad.fres_checked == 0
    assert len(bad.no_verdict) == 1 and bad.no_verdict[0].startswith(
        "/lib/bad.o: no verdict: rules not compared: /lib/bad.o: .eh_frame does not decode (EhFrameError: the CIE "
        "at +0x0 has 65 bytes of augmentation data, past its end)"), bad.no_verdict
    rep = check_tree(tmp_path, jobs=1, timeout=300)
    assert [r.path for r in rep.no_verdict] == ["/lib/bad.o"]
    rc = main(["sframe", "check", "--tree", str(tmp_path)])
    out, _ = capsys.readouterr()
    assert rc == 2
    lines = out.splitlines()
    g = check_one(str(tmp_path / "lib" / "good.o"), False, str(tmp_path))
    assert g.fres_checked > 0 and f", {g.fres_checked} FREs checked against .eh_frame ({g.addresses} addresses), " \
        in lines[0]
    at = lines.index("  no verdict: 1 files (a check that checked nothing: never counted clean)")
    assert lines[at + 1] == f"    {bad.no_verdict[0]}"
    # gas 2.40's two findings in each copy's structure and in good.o's rules; bad.o's rules not compared
    assert lines[-2].startswith("    frames: 2 files (/lib/bad.o, /lib/good.o): ") and lines[-2].endswith(
        ", 1 no verdict"), lines[-2]
    assert lines[-1].startswith("cluster: LocalCluster, ")  # Dask by default (issue 36)


def test_the_tree_as_dask_tasks_gives_the_pools_report(root, capsys):
    """``--workers 2 --chunk 1``: each file a task on a LocalCluster (harness.campaign), the
    results merged on the client: the same report as the process pool's (``--jobs 2``), line for
    line."""
    rc_pool = main(["sframe", "check", "--tree", str(root), "--jobs", "2"])
    pool = capsys.readouterr().out.splitlines()
    rc = main(["sframe", "check", "--tree", str(root), "--workers", "2", "--chunk", "1"])
    out = capsys.readouterr().out.splitlines()
    assert rc == rc_pool == 2
    # the first line ends with the wall time and the processes; the cluster's line follows the report
    assert out[0].rsplit(";", 1)[0] == pool[0].rsplit(";", 1)[0]
    assert out[1:-1] == pool[1:]
    assert out[-1].startswith("cluster: LocalCluster, 2 workers; 5 tasks done, 0 retried, 0 failed;")
