"""Every linker's layout read as the loaders read it (issue 34 item 1).

tests/data/load_bias.c (and, for the dynamic layouts, the shared library load_bias_lib.c, loaded
twice: linked, and again in a new namespace by dlmopen) is linked by the host's gcc with
``-fuse-ld=bfd``, ``gold``, ``mold`` and ``lld`` in every layout the four write: PIE, non-PIE
(ET_EXEC), static, static-pie, ``-z separate-code`` and ``-z noseparate-code``,
``--no-rosegment``, 64 KiB and 2 MiB alignment.  Each binary runs on this host (its kernel's ELF
loader and its ld.so place it as the guest's do; a dynamic one also run as ``ld.so ./prog``, so
that ld.so maps the program too, holes and all), stops itself, and every mapping of every module
in its /proc/PID/maps gets from :class:`AddressSpace` the bias the program itself reports:
dl_iterate_phdr()'s ``dlpi_addr``, and a function's runtime address less its ``st_value`` (nm).
At that bias the CFI oracle finds the function's FDE, the one ``readelf --debug-dump=frames``
shows.  A maps text whose mappings disagree with the file is a :class:`LoadBiasError` naming
the file and the mappings.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.images.errors import ImageError
from harness.unwind.cfi import cfi_table
from harness.unwind.maps import AddressSpace, LoadBiasError, Mapping, host_resolver, load_image, page_down, parse_maps
from tests.support.gating import require
from tests.support.layout import shares_file_pages
from tests.support.paths import TEST_DATA
from tests.support.tiers import unit_share
from tests.support.toolchains import need

LINKERS = ("bfd", "gold", "mold", "lld")
LINKER_BINARY = {"bfd": "ld.bfd", "gold": "ld.gold", "mold": "ld.mold", "lld": "ld.lld"}
LDSO = "/lib64/ld-linux-x86-64.so.2"
STOP_WAIT = 20.0  # seconds for a program to print and stop itself


@dataclass(frozen=True)
class Layout:
    name: str
    mode: tuple[str, ...]  # gcc's: what the objects are compiled as and how they are linked
    ld: tuple[str, ...] = ()  # the linker's own options (-Wl,...)

    @property
    def pie(self) -> bool:
        return "-pie" in self.mode or "-static-pie" in self.mode

    @property
    def dynamic(self) -> bool:
        return "-static" not in self.mode and "-static-pie" not in self.mode


PIE, NO_PIE = ("-fPIE", "-pie"), ("-fno-PIE", "-no-pie")
LAYOUTS = {lo.name: lo for lo in [
    Layout("pie", PIE),
    Layout("no-pie", NO_PIE),
    Layout("static", ("-fno-PIE", "-static")),
    Layout("static-pie", ("-fPIE", "-static-pie")),
    Layout("pie-separate-code", PIE, ("-z", "separate-code")),
    Layout("pie-noseparate-code", PIE, ("-z", "noseparate-code")),
    Layout("no-pie-noseparate-code", NO_PIE, ("-z", "noseparate-code")),
    Layout("pie-no-rosegment", PIE, ("--no-rosegment",)),
    Layout("pie-64k", PIE, ("-z", "max-page-size=0x10000")),
    Layout("pie-common-64k", PIE, ("-z", "max-page-size=0x10000", "-z", "common-page-size=0x10000")),
    Layout("pie-2m", PIE, ("-z", "max-page-size=0x200000")),
    Layout("no-pie-2m", NO_PIE, ("-z", "max-page-size=0x200000")),
    Layout("static-pie-2m", ("-fPIE", "-static-pie"), ("-z", "max-page-size=0x200000")),
]}

# The combinations a linker refuses, with its words and why: the test shows the refusal, then
# skips (in CI too: it is the linker's answer, not a missing install).
REFUSED = {
    ("bfd", "pie-no-rosegment"): ("unrecognized option '--no-rosegment'",
                                  "ld.bfd has no --no-rosegment (its one-segment text is -z noseparate-code, tested)"),
    ("gold", "pie-separate-code"): ("separate-code: unknown -z option",
                                    "gold 1.16 has no -z separate-code: its one layout puts text and read-only "
                                    "data in one segment (tested as pie)"),
    ("gold", "pie-noseparate-code"): ("noseparate-code: unknown -z option",
                                      "gold 1.16 has no -z noseparate-code (its only layout, tested as pie)"),
    ("gold", "no-pie-noseparate-code"): ("noseparate-code: unknown -z option",
                                         "gold 1.16 has no -z noseparate-code (its only layout, tested as no-pie)"),
    ("gold", "static-pie"): ("--no-dynamic-linker: unknown option",
                             "gcc -static-pie passes --no-dynamic-linker, which gold 1.16 does not know"),
    ("gold", "static-pie-2m"): ("--no-dynamic-linker: unknown option",
                                "gcc -static-pie passes --no-dynamic-linker, which gold 1.16 does not know"),
}

# The combinations a linker links but whose output does not start, with the loader's words and
# why: the test shows the failure, then skips (in CI too: it is the linker's output).
UNRUNNABLE = {
    ("lld", "pie-common-64k", "kernel"): (
        "cannot apply additional memory protection after relocation",
        "lld 14 rounds PT_GNU_RELRO up to the 64 KiB common page past the end of the RW PT_LOAD it covers: "
        "the kernel leaves the rest unmapped, and ld.so's mprotect of it fails (ENOMEM); ld.so's own mapping "
        "of the program reserves the whole span, so run as ld.so ./prog it starts (tested)"),
}

CASES = [(linker, layout, loader) for linker in LINKERS for layout in LAYOUTS
         for loader in (("kernel", "ld.so") if LAYOUTS[layout].dynamic else ("kernel",))]


@dataclass(frozen=True)
class Built:
    prog: Path
    lib: Path | None
    layout: Layout


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """``build(linker, layout)``: the program (and its library) linked that way, made once."""
    made: dict[tuple[str, str], Built] = {}
    refusals: dict[tuple[str, str], str] = {}
    objects: dict[tuple[str, ...], Path] = {}
    root = tmp_path_factory.mktemp("load-bias")

    def compile_(src: str, flags: tuple[str, ...]) -> Path:
        if flags not in objects:
            out = root / f"obj{len(objects)}.o"
            need("host").run(["gcc", "-O1", "-fno-omit-frame-pointer", "-c", *flags, str(TEST_DATA / src),
                              "-o", str(out)])
            objects[flags] = out
        return objects[flags]

    def get(linker: str, name: str) -> Built:
        require(shutil.which("gcc") is not None, "no host gcc")
        require(shutil.which(LINKER_BINARY[linker]) is not None, f"{LINKER_BINARY[linker]} is not installed (./dev)")
        if (linker, name) in made:
            return made[(linker, name)]
        lo = LAYOUTS[name]
        if (linker, name) in refusals:
            pytest.skip(refusals[(linker, name)])
        d = root / f"{linker}-{name}"
        d.mkdir()
        wl = [f"-Wl,{','.join(lo.ld)}"] if lo.ld else []
        host = need("host")
        lib = d / "libbias.so" if lo.dynamic else None
        refused = REFUSED.get((linker, name))
        try:
            if lib:
                obj = compile_("load_bias_lib.c", ("-fPIC",))
                host.run(["gcc", f"-fuse-ld={linker}", "-shared", *wl, str(obj), "-o", str(lib)])
            obj = compile_("load_bias.c", (lo.mode[0], "-DWITH_LIB") if lib else (lo.mode[0],))
            argv = ["gcc", f"-fuse-ld={linker}", *lo.mode[1:], *wl, str(obj), "-o", str(d / "prog")]
            if lib:
                argv += [f"-L{d}", "-lbias", "-Wl,-rpath,$ORIGIN"]
            host.run(argv)
        except ImageError as exc:
            if refused is None or refused[0] not in str(exc):
                raise
            refusals[(linker, name)] = f"{linker} refuses {name}: {refused[1]}"
            pytest.skip(refusals[(linker, name)])
        assert refused is None, f"{linker} now links {name}: REFUSED is out of date"
        made[(linker, name)] = Built(d / "prog", lib, lo)
        return made[(linker, name)]

    return get


@dataclass
class Stopped:
    pid: int
    maps: str
    lines: list[str]

    def modules(self) -> list[tuple[int, str]]:
        """dl_iterate_phdr()'s modules in its first pass: (dlpi_addr, dlpi_name), the program first."""
        out = []
        for line in self.lines:
            if line.startswith("module "):
                _, addr, name = line.split(" ", 2)
                if out and (int(addr, 16), name) == out[0]:
                    break  # the second pass, after dlmopen
                out.append((int(addr, 16), name))
        return out

    def values(self, key: str) -> list[int]:
        return [int(line.split()[1], 16) for line in self.lines if line.startswith(key + " ")]


def run_stopped(argv: list[str], out: Path) -> Stopped:
    """Run ``argv`` until it stops itself (SIGSTOP), read its maps and output, kill it."""
    with open(out, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + STOP_WAIT
        while True:
            pid, status = os.waitpid(proc.pid, os.WNOHANG | os.WUNTRACED)
            if pid and os.WIFSTOPPED(status):
                break
            assert not pid, f"{argv} ended ({status:#x}) without stopping: {out.read_text()}"
            assert time.monotonic() < deadline, f"{argv} did not stop within {STOP_WAIT}s: {out.read_text()}"
            time.sleep(0.005)
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        lines = out.read_text().splitlines()
        assert lines and lines[-1].startswith("ready "), lines
        return Stopped(proc.pid, maps, lines)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


def st_value(path: Path, name: str) -> int:
    """``name``'s value in ``path``'s symbol table, as nm reads it."""
    for line in need("host").run(["nm", str(path)]).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == name:
            return int(parts[0], 16)
    raise AssertionError(f"nm: no {name} in {path}")


_FDE = re.compile(r"\bFDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)")


def readelf_fde(path: Path, link: int) -> tuple[int, int] | None:
    """The pc range of the FDE that ``readelf --debug-dump=frames`` shows covering ``link``."""
    out = need("host").run(["readelf", "--debug-dump=frames", str(path)]).stdout
    for m in _FDE.finditer(out):
        lo, hi = int(m[1], 16), int(m[2], 16)
        if lo <= link < hi:
            return lo, hi
    return None


def file_maps(space: AddressSpace, path: Path) -> list[Mapping]:
    return space.mappings_of(str(path.resolve()))


def check_fde(space: AddressSpace, addr: int, path: Path, symbol: str) -> None:
    """At the module's bias the CFI oracle finds ``symbol``'s FDE at its link address, the one
    readelf shows."""
    e = space.elf_at(addr)
    link = e.link_address(addr)
    assert link == st_value(path, symbol)
    fde = cfi_table(e.image).fde_for(link)
    assert fde is not None, f"no FDE for {symbol} at {link:#x} in {path}"
    ours = (fde["initial_location"], fde["initial_location"] + fde["address_range"])
    assert ours == readelf_fde(path, link), (symbol, hex(link))


# one case in four in the unit tier (every linker, layout and loader among them: 23 of 92), all of
# them in the deep tier (tests/support/tiers.py)
@pytest.mark.parametrize("linker,layout,loader", unit_share(CASES, 4, [f"{a}-{b}-{c}" for a, b, c in CASES]))
def test_one_bias_per_module_as_the_loaders_place_it(build, linker, layout, loader, tmp_path):
    b = build(linker, layout)
    argv = [str(b.prog)] + ([str(b.lib)] if b.lib else [])
    if loader == "ld.so":
        require(Path(LDSO).is_file(), f"no {LDSO}")
        argv = [LDSO, *argv]
    broken = UNRUNNABLE.get((linker, layout, loader))
    if broken is not None:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=STOP_WAIT)
        assert r.returncode != 0 and broken[0] in r.stderr, f"{linker} {layout} now runs: UNRUNNABLE is out of date"
        pytest.skip(f"{linker} {layout} does not start: {broken[1]}")
    run = run_stopped(argv, tmp_path / "out")
    space = AddressSpace.from_maps(run.maps, host_resolver())
    img = load_image(b.prog)
    assert img.elf["e_type"] == ("ET_DYN" if b.layout.pie else "ET_EXEC")

    # the program: every one of its mappings at the bias dl_iterate_phdr and its own leaf() say
    (leaf,) = run.values("leaf")
    truth = leaf - st_value(b.prog, "leaf")
    assert run.modules()[0][0] == truth  # dlpi_addr of the program (0 for an ET_EXEC)
    prog_maps = file_maps(space, b.prog)
    assert len(prog_maps) >= 2
    assert {space.elf_at(m.start).bias for m in prog_maps} == {truth}, run.maps
    check_fde(space, leaf, b.prog, "leaf")

    # the library, mapped twice by ld.so (linked, and by dlmopen): one bias per instance
    if b.lib is not None:
        first, again = run.values("lib_leaf")
        value = st_value(b.lib, "lib_leaf")
        truths = {first - value, again - value}
        assert len(truths) == 2
        span = load_image(b.lib).span()
        seen = set()
        for m in file_maps(space, b.lib):
            bias = space.elf_at(m.start).bias
            assert bias in truths and bias <= m.start < bias + span, (m, run.maps)
            seen.add(bias)
        assert seen == truths
        check_fde(space, first, b.lib, "lib_leaf")
        check_fde(space, again, b.lib, "lib_leaf")

    # every module dl_iterate_phdr names (libc, ld.so, the library's first instance) at its dlpi_addr
    for addr, name in run.modules()[1:]:
        if name.startswith("/"):
            ms = [m for m in file_maps(space, Path(name)) if space.elf_at(m.start).bias == addr]
            assert ms, f"{name}: no mapping at the bias {addr:#x}"
    mods = {(e.path, e.bias) for e in space.elves()}  # each module once, each checked
    assert (str(b.prog.resolve()), truth) in mods

    # the layouts' shapes this test is about are there
    loads = img.loads
    if linker in ("mold", "lld") and layout in ("pie", "no-pie", "static", "static-pie"):
        assert shares_file_pages(loads), loads
    if layout.endswith("2m"):
        assert all(s.align == 0x200000 for s in loads)
        holes = [m for m in prog_maps if m.perms == "---p"]
        assert bool(holes) == (loader == "ld.so" and b.layout.pie), run.maps  # ld.so's PROT_NONE holes
        if b.lib is not None:
            assert any(m.perms == "---p" for m in file_maps(space, b.lib))


# --- disagreements: typed, named, never "no ELF here" --------------------------------------

def _edit(maps: str, path: Path, edit) -> str:
    """``maps`` with each line of ``path`` replaced by ``edit(mapping)`` (a Mapping, or None to drop it)."""
    out = []
    for line in maps.splitlines():
        (m,) = parse_maps(line) or [None]
        if m is not None and m.path == str(path.resolve()):
            m = edit(m)
            if m is None:
                continue
            line = m.to_line()
        out.append(line)
    return "\n".join(out)


def _moved(m: Mapping, by: int) -> Mapping:
    return Mapping(m.start + by, m.end + by, m.perms, m.offset, m.dev, m.inode, m.path)


@pytest.fixture(scope="module")
def mold_pie(build, tmp_path_factory):
    """A mold PIE with its library, stopped once: (built, its real maps text)."""
    b = build("mold", "pie")
    return b, run_stopped([str(b.prog), str(b.lib)], tmp_path_factory.mktemp("mold-pie") / "out").maps


def test_two_mappings_that_imply_two_biases_are_an_error_naming_both(build, tmp_path):
    """bfd's PIE, its text mapping read from the next segment's file page: the two mappings imply
    two biases."""
    b = build("bfd", "pie")
    maps = run_stopped([str(b.prog), str(b.lib)], tmp_path / "out").maps
    real = AddressSpace.from_maps(maps, host_resolver())
    low, text = file_maps(real, b.prog)[0], next(m for m in file_maps(real, b.prog) if m.executable)
    bias = real.elf_at(low.start).bias
    wrong = Mapping(text.start, text.end, text.perms, text.offset + 0x1000, text.dev, text.inode, text.path)
    space = AddressSpace.from_maps(_edit(maps, b.prog, lambda m: wrong if m == text else m), host_resolver())
    with pytest.raises(LoadBiasError) as e:
        space.elf_at(text.start)
    err = e.value
    assert err.path == str(b.prog.resolve()) and err.exit_code == 2
    assert low in err.mappings and wrong in err.mappings
    assert err.loads == tuple(load_image(b.prog).loads)
    first = str(err).splitlines()[0]
    assert first.startswith(f"load bias of {b.prog.resolve()}: the mapping at {text.start:#x} (offset "
                            f"{wrong.offset:#x}) implies the bias "), first
    assert f"{bias - 0x1000:#x}" in first.split(" implies the bias ")[1]  # the R segment's page's
    assert first.endswith(f", the mapping at {low.start:#x} (offset {low.offset:#x}) {bias:#x}"), first
    assert wrong.to_line() in str(err) and low.to_line() in str(err)
    # every address of the module says so, every time, and so does the list of modules
    for addr in (low.start, text.start, text.start):
        with pytest.raises(LoadBiasError):
            space.elf_at(addr)
    with pytest.raises(LoadBiasError):
        space.elves()
    # the other modules are read as before
    libc = next(m for m in space.mappings if m.path.endswith("/libc.so.6"))
    assert space.elf_at(libc.start).bias == real.elf_at(libc.start).bias


def test_without_its_lowest_mapping_a_shared_page_layout_is_not_read_a_page_off(mold_pie):
    """mold puts every PT_LOAD in file page 0: without the mapping of the first, the lowest left
    (the text's, offset 0) would give a bias a page off, and every mapping above it would still
    be one of some segment at that bias -- but the first PT_LOAD's is then not where it is."""
    b, maps = mold_pie
    low = file_maps(AddressSpace.from_maps(maps, host_resolver()), b.prog)[0]
    space = AddressSpace.from_maps(_edit(maps, b.prog, lambda m: None if m == low else m), host_resolver())
    with pytest.raises(LoadBiasError, match=r"the PT_LOAD of vaddr 0x[0-9a-f]+ is not mapped at"):
        space.elf_at(low.end)


def test_a_mapping_no_segment_explains_is_an_error(mold_pie):
    b, maps = mold_pie
    size = b.prog.stat().st_size
    last = file_maps(AddressSpace.from_maps(maps, host_resolver()), b.prog)[-1]
    edited = _edit(maps, b.prog, lambda m: Mapping(m.start, m.end, m.perms, page_down(size) + 0x1000, m.dev,
                                                   m.inode, m.path) if m == last else m)
    with pytest.raises(LoadBiasError, match=rf"no PT_LOAD maps file offset {page_down(size) + 0x1000:#x} "
                                            rf"\(the mapping at {last.start:#x}\) at the bias"):
        AddressSpace.from_maps(edited, host_resolver()).elf_at(last.start)


def test_a_hole_not_where_ld_so_leaves_one_is_an_error(build, tmp_path):
    """ld.so's PROT_NONE holes run on from the first PT_LOAD's offset; one off by a page is not one."""
    b = build("lld", "pie-2m")
    maps = run_stopped([str(b.prog), str(b.lib)], tmp_path / "out").maps
    space = AddressSpace.from_maps(maps, host_resolver())
    holes = [m for m in file_maps(space, b.lib) if m.perms == "---p"]
    assert holes and all(space.elf_at(h.start) is not None for h in holes)
    hole = holes[0]
    edited = _edit(maps, b.lib, lambda m: Mapping(m.start, m.end, m.perms, m.offset + 0x1000, m.dev, m.inode,
                                                  m.path) if m == hole else m)
    with pytest.raises(LoadBiasError, match=rf"the mapping at {hole.start:#x}"):
        AddressSpace.from_maps(edited, host_resolver()).elf_at(hole.start)


def test_an_et_exec_not_at_its_link_addresses_is_an_error(build, tmp_path):
    b = build("lld", "no-pie")
    maps = run_stopped([str(b.prog), str(b.lib)], tmp_path / "out").maps
    edited = _edit(maps, b.prog, lambda m: _moved(m, 0x10000))
    first = file_maps(AddressSpace.from_maps(maps, host_resolver()), b.prog)[0]
    with pytest.raises(LoadBiasError, match=r"an ET_EXEC mapped 0x10000 away from its link addresses"):
        AddressSpace.from_maps(edited, host_resolver()).elf_at(first.start + 0x10000)


def test_no_file_or_no_elf_is_no_module_not_an_error(mold_pie):
    b, maps = mold_pie
    text = next(m for m in parse_maps(maps) if m.path == str(b.prog.resolve()) and m.executable)
    assert AddressSpace.from_maps(maps, lambda p: None).elf_at(text.start) is None
    source = TEST_DATA / "load_bias.c"  # a file, not an ELF
    assert AddressSpace.from_maps(maps, lambda p: source).elf_at(text.start) is None


def test_a_library_read_between_two_of_ld_so_mmaps_is_not_mapped_whole(build, tmp_path):
    """The engine reads the program's maps until every module reads whole: between ld.so's first
    mmap of a library (the whole span from its first PT_LOAD's offset) and the next, bfd's
    data segment (p_vaddr - p_offset a page more than the text's) is not where its file bytes
    are mapped yet."""
    from harness.memory import MemoryFault
    from harness.scenarios.engine import _mapped_whole
    from harness.unwind.maps import FileBackedMemory

    b = build("bfd", "pie")
    maps = run_stopped([str(b.prog), str(b.lib)], tmp_path / "out").maps
    assert _mapped_whole(maps, host_resolver())
    lib = [m for m in parse_maps(maps) if m.path == str(b.lib.resolve())]
    first = lib[0]  # the linked instance: the lower of the two when ld.so maps the dlmopen one below it
    span = load_image(b.lib).span()
    instance = [m for m in lib if first.start <= m.start < first.start + span]
    whole = Mapping(first.start, first.start + span, first.perms, first.offset, first.dev, first.inode, first.path)
    mid = _edit(maps, b.lib, lambda m: whole if m == first else None if m in instance else m)
    assert not _mapped_whole(mid, host_resolver())
    with pytest.raises(LoadBiasError, match=r"the PT_LOAD of vaddr 0x[0-9a-f]+ is not mapped at"):
        AddressSpace.from_maps(mid, host_resolver()).elf_at(first.start)
    # a PROT_NONE hole is never read from the file
    hole = Mapping(first.start, first.end, "---p", first.offset, first.dev, first.inode, first.path)
    space = AddressSpace.from_maps(_edit(maps, b.lib, lambda m: hole if m == first else m), host_resolver())
    with pytest.raises(MemoryFault):
        FileBackedMemory(space).read(first.start, 4)
