"""Where an address lies -- its section and its symbol -- named as ``objdump -d`` names it
(harness/unwind/symbolize.py ``Places``, ``plt_symbols``): what ``sframe check``'s findings say
beside their addresses (issue 34: the .plt.got finding named neither section nor symbol).

The oracle is the toolchain's own objdump: every label ``ADDR <NAME>:`` it prints in its
disassembly (a symbol's start; a label with an offset, such as ``<printf@plt-0x10>`` for PLT0, is
a place with no symbol of its own) must be our symbol at that address, in the section objdump
disassembles there.  The binaries are real, built in each toolchain root: ld.bfd 2.44 and 2.47
PIE, non-PIE, ``-z now``, IBT (``-z ibtplt``: .plt.sec, and a .plt.got of 16-byte entries), IBT
with ``-z now``, a C++ shared library, a static program (aliases galore, IFUNCs), a local IFUNC
called through the PLT (an IRELATIVE slot: ``*ABS*+0xADDEND@plt``); and the host's gold, mold and
lld.  PLT entries have no symbol in .symtab: their names (``printf@plt``,
``__cxa_finalize@plt`` in .plt.got) come from the relocations of their GOT slots.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from harness.unwind.maps import ElfImage
from harness.unwind.symbolize import Places, plt_symbols
from tests.support.gating import require
from tests.support.toolchains import need

MAIN_C = """\
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) { printf("%d %d\\n", (int)strlen(argv[0]), atoi(argc > 1 ? argv[1] : "1")); return 0; }
"""
IFUNC_C = """\
static int impl(void) { return 1; }
static void *resolve(void) { return (void *)impl; }
int f(void) __attribute__((ifunc("resolve")));
int main(void) { return f(); }
"""
LIB_CC = """\
#include <string>
#include <vector>
std::string g(int n) { std::vector<int> v(n, 1); return std::to_string(v.size()); }
"""
# name -> the build command, run in the toolchain root's build directory
BUILDS = {
    "pie": "gcc -O1 m.c -o pie",
    "nopie": "gcc -O1 -no-pie m.c -o nopie",
    "now": "gcc -O1 -Wl,-z,now m.c -o now",
    "ibt": "gcc -O1 -fcf-protection=full -Wl,-z,ibtplt m.c -o ibt",
    "ibtnow": "gcc -O1 -fcf-protection=full -Wl,-z,ibtplt,-z,now m.c -o ibtnow",
    "libg.so": "g++ -O1 -fPIC -shared l.cc -o libg.so",
    "static": "gcc -O1 -static m.c -o static",
    "ifunc": "gcc -O1 ifunc.c -o ifunc",  # a local IFUNC called through the PLT: an IRELATIVE slot
}
HOST_LINKERS = {"gold": "ld.gold", "mold": "mold", "lld": "ld.lld"}
_LABEL = re.compile(r"^([0-9a-f]+) <(.+)>:$")
_SECTION = re.compile(r"^Disassembly of section (\S+):$")


def objdump_labels(text: str) -> dict[int, tuple[str, str | None]]:
    """address -> (section, name) of every symbol start objdump -d labels (no offset); where it
    labels an address with its section's name (``<.plt>``: no symbol before it there), None."""
    out: dict[int, tuple[str, str | None]] = {}
    section = ""
    for line in text.splitlines():
        if m := _SECTION.match(line):
            section = m[1]
        elif (m := _LABEL.match(line)) and not re.search(r"[+-]0x[0-9a-f]+$", m[2]):
            out[int(m[1], 16)] = (section, None if m[2] == section else m[2])
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """tc_name -> {binary name: (path, objdump -d's text)}, built on first use."""
    made: dict[str, dict[str, tuple[Path, str]]] = {}

    def get(tc_name: str) -> dict[str, tuple[Path, str]]:
        if tc_name in made:
            return made[tc_name]
        tc = need(tc_name)
        dest = tmp_path_factory.mktemp(f"places-{tc_name}")
        outer, inner = tc.workdir("places")
        try:
            (outer / "m.c").write_text(MAIN_C)
            (outer / "l.cc").write_text(LIB_CC)
            (outer / "ifunc.c").write_text(IFUNC_C)
            builds = dict(BUILDS)
            if tc_name == "host":
                for linker, binary in HOST_LINKERS.items():
                    require(shutil.which(binary) is not None, f"{binary} is not installed (./dev)")
                    builds[linker] = f"gcc -O1 -fuse-ld={linker} m.c -o {linker}"
            out = {}
            for name, cmd in builds.items():
                tc.run(["sh", "-c", cmd], cwd=inner)
                text = tc.run(["objdump", "-d", name], cwd=inner, timeout=600).stdout
                shutil.copy(outer / name, dest / name)
                out[name] = (dest / name, text)
        finally:
            shutil.rmtree(outer, ignore_errors=True)
        made[tc_name] = out
        return out

    return get


CASES = [(tc, name) for tc in ("trixie", "sid") for name in BUILDS] + \
        [("host", name) for name in ("pie", "static", *HOST_LINKERS)]


@pytest.mark.parametrize("tc_name,name", CASES, ids=[f"{t}-{n}" for t, n in CASES])
def test_every_label_objdump_prints_is_ours(built, tc_name, name):
    path, text = built(tc_name)[name]
    labels = objdump_labels(text)
    assert len(labels) >= 10, text[:2000]
    where = Places(ElfImage.from_path(str(path)))
    ours = {addr: (where.section(addr), where.symbol(addr)) for addr in labels}
    assert {a: v for a, v in ours.items() if v != labels[a]} == {}, [(hex(a), labels[a]) for a in labels
                                                                      if ours[a] != labels[a]][:10]
    if name != "static" and name != "mold":  # ld.bfd, gold and lld: every PLT entry named from its slot
        plt = {s.addr: s.name for s in plt_symbols(ElfImage.from_path(str(path)))}
        assert plt and {a: (sec, n) for a, (sec, n) in labels.items() if n and n.endswith("@plt")} == {
            a: (where.section(a), n) for a, n in plt.items()}


@pytest.mark.parametrize("tc_name", ["trixie", "sid"])
def test_the_plt_got_entry_is_named_from_its_glob_dat_slot(built, tc_name):
    """crtbeginS's __cxa_finalize is called through .plt.got (its GOT slot a GLOB_DAT relocation,
    no JUMP_SLOT): objdump -d labels the entry ``__cxa_finalize@plt``, 8 bytes, and with IBT 16
    (endbr64 first); an address inside it is ``__cxa_finalize@plt+0x4``; PLT0 has no symbol."""
    for name, size in (("pie", 8), ("ibt", 16)):
        path, text = built(tc_name)[name]
        (addr, _), = [(a, v) for a, v in objdump_labels(text).items() if v == (".plt.got", "__cxa_finalize@plt")]
        image = ElfImage.from_path(str(path))
        assert [(s.addr, s.size) for s in plt_symbols(image) if s.name == "__cxa_finalize@plt"] == [(addr, size)]
        where = Places(image)
        assert where.describe(addr) == "in .plt.got (__cxa_finalize@plt)"
        assert where.describe(addr + 4) == "in .plt.got (__cxa_finalize@plt+0x4)"
        plt0 = image.elf.get_section_by_name(".plt")["sh_addr"]
        assert where.describe(plt0) == "in .plt (no symbol)"


@pytest.mark.parametrize("tc_name", ["trixie", "sid"])
def test_a_plt_entry_of_an_irelative_slot_is_named_by_its_addend(built, tc_name):
    """A local IFUNC called through the PLT: its GOT slot's relocation is R_X86_64_IRELATIVE, of
    no symbol, whose addend is the resolver: objdump names the entry ``*ABS*+0xADDEND@plt``."""
    path, text = built(tc_name)["ifunc"]
    image = ElfImage.from_path(str(path))
    resolve = next(s["st_value"] for s in image.elf.get_section_by_name(".symtab").iter_symbols()
                   if s.name == "resolve")
    name = f"*ABS*+{resolve:#x}@plt"
    assert [v for v in objdump_labels(text).values() if v[1] and v[1].startswith("*ABS*")] == [(".plt", name)]
    assert [s.name for s in plt_symbols(image) if s.name.startswith("*ABS*")] == [name]


def test_an_address_past_a_function_or_in_no_section_has_no_symbol(built):
    """Past the end of a function, in the padding before the next (crt1's _start is followed by
    alignment), an address has no symbol, where objdump would still count from the one below;
    outside every section, no section either: each said, not left out."""
    path, _ = built("sid")["pie"]
    image = ElfImage.from_path(str(path))
    where = Places(image)
    text = image.elf.get_section_by_name(".text")
    lo_text, hi_text = text["sh_addr"], text["sh_addr"] + text["sh_size"]
    funcs = sorted((s["st_value"], s["st_size"], s.name) for s in image.elf.get_section_by_name(".symtab").iter_symbols()
                   if s["st_info"]["type"] == "STT_FUNC" and lo_text <= s["st_value"] < hi_text)
    gaps = [(lo + size, name) for (lo, size, name), (nxt, _, _) in zip(funcs, funcs[1:], strict=False)
            if size and lo + size < nxt]
    assert gaps, funcs
    for end, name in gaps:
        assert where.describe(end) == "in .text (no symbol)", name
        assert where.describe(end - 1).startswith(f"in .text ({name}+0x"), name
    assert where.describe(0x10_0000_0000) == "in no section (no symbol)"
