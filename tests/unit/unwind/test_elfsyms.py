"""harness.unwind.elfsyms, the struct reader of .symtab and .dynsym, held equal to pyelftools.

Every symbol of real binaries -- catalog programs (static 64-bit, dynamic, i386: 32-bit entries)
and Debian's libc (IFUNC symbols), libstdc++ and libcrypto -- has pyelftools'
name, value, size, type, binding and section index; a function by :data:`FUNCTION_TYPE_NUMBERS`
is a function by pyelftools' names (``FUNCTION_TYPES``: STT_FUNC and STT_LOOS, which is IFUNC).
Tables the struct reader leaves to pyelftools (an odd entry size) read the same.
"""

from __future__ import annotations

import io
import os
import struct

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_ST_INFO_BIND, ENUM_ST_INFO_TYPE, ENUM_ST_SHNDX

from harness.images.programs import Variant
from harness.unwind.elfsyms import FUNCTION_TYPE_NUMBERS, RawSymbol, _read, _read_pyelftools, symbols
from harness.unwind.maps import ElfImage
from harness.unwind.symbolize import FUNCTION_TYPES, SymbolIndex
from tests.support.gating import require
from tests.support.toolchains import program

LIBS = "/usr/lib/x86_64-linux-gnu"
SYSTEM = ("libc.so.6", "libstdc++.so.6", "libcrypto.so.3")
CATALOG = (
    ("callchain", "host", Variant()),
    ("callchain", "host", Variant(static=False)),
    ("callchain", "host", Variant(bits=32, frame_pointers=False)),
)


def _number(names, value) -> int:
    return value if isinstance(value, int) else names[value]


def _pyelftools(data: bytes, secname: str) -> list[tuple] | None:
    """pyelftools' symbols of the section, each as (name, value, size, type, bind, shndx) numbers,
    and whether pyelftools' type name is a function's."""
    elf = ELFFile(io.BytesIO(data))
    sec = elf.get_section_by_name(secname)
    if sec is None or not hasattr(sec, "iter_symbols"):
        return None
    # a table the struct reader reads itself (not one it leaves to pyelftools)
    assert sec["sh_entsize"] == (24 if elf.elfclass == 64 else 16) and sec["sh_offset"] + sec["sh_size"] <= len(data)
    return [(s.name, s["st_value"], s["st_size"], _number(ENUM_ST_INFO_TYPE, s["st_info"]["type"]),
             _number(ENUM_ST_INFO_BIND, s["st_info"]["bind"]), _number(ENUM_ST_SHNDX, s["st_shndx"]),
             s["st_info"]["type"] in FUNCTION_TYPES)
            for s in sec.iter_symbols()]


def _ours(image: ElfImage, secname: str) -> list[tuple] | None:
    syms = symbols(image, secname)
    return None if syms is None else [(*s, s.type in FUNCTION_TYPE_NUMBERS) for s in syms]


def assert_same_as_pyelftools(path: str) -> dict[str, int]:
    data = open(path, "rb").read()
    image = ElfImage(path, data)
    counts = {}
    for secname in (".symtab", ".dynsym"):
        want = _pyelftools(data, secname)
        assert _ours(image, secname) == want, f"{path} {secname}"
        counts[secname] = len(want or ())
        counts[secname + " functions"] = sum(s[-1] for s in want or ())
        counts[secname + " ifuncs"] = sum(s[3] == 10 for s in want or ())
    return counts


@pytest.mark.parametrize("name,tc,variant", CATALOG, ids=[f"{n}-{t}-{v.tag}" for n, t, v in CATALOG])
def test_catalog_programs_read_as_pyelftools_reads_them(name, tc, variant):
    counts = assert_same_as_pyelftools(str(program(name, tc, variant).path))
    assert counts[".symtab functions"] > 10 or counts[".dynsym functions"] > 0, counts
    if variant.static and variant.bits == 64:
        assert counts[".symtab ifuncs"] > 0, counts  # glibc's string functions, linked in


@pytest.mark.parametrize("lib", SYSTEM)
def test_debian_libraries_read_as_pyelftools_reads_them(lib):
    path = f"{LIBS}/{lib}"
    require(os.path.exists(path), f"{path} is not installed (./dev installs it)")
    counts = assert_same_as_pyelftools(path)
    assert counts[".dynsym functions"] > 100, counts
    if lib == "libc.so.6":
        assert counts[".dynsym ifuncs"] > 10, counts  # memcpy, strlen, ...: IFUNC (type 10)
        image = ElfImage.from_path(path)
        ifunc = [s for s in symbols(image, ".dynsym") if s.name == "memcpy" and s.type == 10]  # GLIBC_2.14's
        assert ifunc
        assert SymbolIndex(image).lookup(ifunc[0].value).addr == ifunc[0].value  # an IFUNC is a function


def test_an_odd_entry_size_is_read_by_pyelftools():
    """A .symtab whose sh_entsize is not the class's: pyelftools reads it, as before."""
    path = str(program("callchain", "host", Variant()).path)
    data = bytearray(open(path, "rb").read())
    elf = ELFFile(io.BytesIO(bytes(data)))
    index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".symtab")
    sec = elf.get_section(index)
    # 48-byte entries (each 24-byte entry paired with the next) over the same bytes
    size = sec["sh_size"] - sec["sh_size"] % 48
    header = elf["e_shoff"] + index * elf["e_shentsize"]
    data[header + 32:header + 40] = struct.pack("<Q", size)  # sh_size
    data[header + 56:header + 64] = struct.pack("<Q", 48)  # sh_entsize
    image = ElfImage(path, bytes(data))
    got = _read(image, ".symtab")
    assert got is not None and len(got) == size // 48
    assert got == _read_pyelftools(ElfImage(path, bytes(data)).elf.get_section_by_name(".symtab"))
    assert all(isinstance(s, RawSymbol) for s in got)


def test_no_symbol_table():
    path = str(program("callchain", "host", Variant()).path)
    image = ElfImage(path, open(path, "rb").read())
    assert symbols(image, ".nosuch") is None
    assert symbols(image, ".text") is None  # a section, but no symbol table
