"""``harness matrix``'s parts that need no guest: the kernels named as ``--kernel`` takes them
(with the issue's aliases), the cells, the exit code over them, and the table and page drawn from
a real matrix.json (two cells of a six-cell run on this machine, cut to the fields they read)."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.images.kernel import KernelInputError
from harness.matrix import (
    Cell,
    CellResult,
    Kernel,
    MatrixInputError,
    MatrixResult,
    cells,
    parse_kernels,
    parse_qemus,
    parse_smp,
)
from harness.report.matrix import format_matrix, write_matrix_html
from tests.support.paths import REPO

DATA = REPO / "tests" / "data" / "matrix.json"


def test_the_kernels_are_named_as_run_takes_them_with_the_issues_aliases(tmp_path):
    ks = parse_kernels("cloud,generic,rt,6.12,6.1")
    assert [(k.label, k.name) for k in ks] == [("cloud", "default"), ("generic", "generic"), ("rt", "rt"),
                                               ("6.12", "trixie"), ("6.1", "bookworm")]
    image = tmp_path / "bzImage"
    image.write_bytes(b"\0" * 64)
    [k] = parse_kernels(str(image))
    assert (k.label, k.name, k.path) == ("bzImage", None, str(image))
    with pytest.raises(KernelInputError, match="unknown kernel 'focal'"):
        parse_kernels("cloud,focal")
    with pytest.raises(MatrixInputError):
        parse_kernels(",")


def test_a_kernel_tree_is_named_by_its_absolute_path_and_labelled_for_a_directory(tmp_path, monkeypatch):
    """``tree:PATH`` (issue 38): the workers get the absolute path (their cwd is not the client's),
    the cell's directory a label without slashes; a directory that is no kernel tree is refused."""
    tree = tmp_path / "my linux"
    (tree / "arch" / "x86").mkdir(parents=True)
    (tree / "Makefile").write_text("")
    (tree / "Kconfig").write_text("")
    monkeypatch.chdir(tmp_path)
    [k] = parse_kernels("tree:my linux")
    assert (k.label, k.name, k.path) == ("tree-my_linux", f"tree:{tree}", None)
    [c] = cells([k], ["host"], [1])
    assert c.name == "tree-my_linux-host-smp1" and "/" not in c.name
    assert c.argv(("fp-spin",), None, "/w")[2:4] == ["--kernel", f"tree:{tree}"]
    with pytest.raises(KernelInputError, match="not a Linux tree"):
        parse_kernels(f"tree:{tmp_path}")


def test_cells_are_every_kernel_by_qemu_by_smp_and_run_as_harness_run():
    grid = cells(parse_kernels("cloud,rt"), parse_qemus("host,backports"), parse_smp("1,2"))
    assert [c.name for c in grid] == [f"{k}-{q}-smp{n}" for k in ("cloud", "rt") for q in ("host", "backports")
                                      for n in (1, 2)]
    assert grid[0].argv(("fp-spin",), 5, "/w/run") == [
        "run", "fp-spin", "--kernel", "default", "--qemu", "host", "--smp", "1", "--out", "/w/run", "--report",
        "--no-pin", "--samples", "5"]
    assert Cell(Kernel("k", None, "/k/bzImage"), "host", 2).argv((), None, "o")[1:3] == ["--kernel-path", "/k/bzImage"]
    for bad in (lambda: parse_qemus("host,kvm"), lambda: parse_smp("1,x"), lambda: parse_smp("0"),
                lambda: parse_smp("17")):
        with pytest.raises(MatrixInputError):
            bad()


def test_the_exit_code_is_the_worst_cells_and_a_lost_cell_is_3(tmp_path):
    grid = cells(parse_kernels("cloud"), ["host", "backports"], [1])
    res = MatrixResult(tmp_path, grid, ("fp-spin",))
    res.results[grid[0].name] = CellResult(grid[0], 0, "", b"", 1.0)
    res.results[grid[1].name] = CellResult(grid[1], 1, "", b"", 1.0)
    assert res.exit_code == 1
    res.failed[grid[1].name] = "KilledWorker"
    assert res.exit_code == 3
    assert MatrixResult(tmp_path, grid, ()).exit_code == 3  # nothing came back


def test_the_table_and_the_page_over_the_cells(tmp_path):
    m = json.loads(DATA.read_text())
    text = format_matrix(m, out="M")
    lines = text.splitlines()
    assert lines[0] == "matrix: 2 cells x 3 scenarios (stacks/failed stacks per cell)"
    assert lines[1].split() == ["scenario", "cloud-host-smp1", "rt-backports-smp1"]
    assert lines[3].split() == ["fp-spin", "5/0", "5/0"]
    assert lines[7].split() == ["exit", "0", "0"]
    assert "fp-frameless-function" in text and "cloud-host-smp1: exit 0: every stack agrees or is explained" in text
    page = write_matrix_html(m, tmp_path).read_text()
    assert 'href="cloud-host-smp1/report.html"' in page and "7.3.4-1~bpo13+1" in page
    assert '<td class="bad">' not in page  # every cell passed
    m["cells"][1]["summary"]["scenarios"][0].update(stacks=0, failed_stacks=0)  # none checked: a failure
    m["cells"][1]["exit_code"] = 1
    page = write_matrix_html(m, tmp_path).read_text()
    # the scenario's cell, its exit in the table and in the list of cells
    assert page.count('<td class="bad">') == 3 and '<td class="bad">0/0</td>' in page


def test_bad_matrix_input_exits_2_before_any_cluster(capsys):
    assert main(["matrix", "--kernels", "focal"]) == 2
    assert "unknown kernel 'focal'" in capsys.readouterr().err
    assert main(["matrix", "--qemu", "kvm"]) == 2
    assert main(["matrix", "nonesuch-scenario"]) == 2
