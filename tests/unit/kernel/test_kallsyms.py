"""harness.kernel.kallsyms: hand-written and vmlinux-derived symbol text, the cache round trip, an ELF
.symtab checked against nm, censored tables, and property tests for garbage lines."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.kernel.kallsyms import (
    AmbiguousSymbolError,
    Kallsyms,
    KallsymsCensoredError,
    KallsymsError,
    KallsymsParseError,
    Symbol,
    SymbolLookupError,
)
from tests.support.gating import require

# Shapes from a 6.x x86-64 /proc/kallsyms: zero-based per-CPU symbols (before 6.15), __pfx_
# padding symbols, aliases at one address, static functions of the same name, module symbols.
SAMPLE = """\
0000000000000000 A fixed_percpu_data
0000000000001000 A cpu_debug_store
000000000001fb80 A current_task
ffffffff81000000 T startup_64
ffffffff81000000 T _stext
ffffffff81000070 T secondary_startup_64
ffffffff81001000 T __pfx_do_one_initcall
ffffffff81001010 T do_one_initcall
ffffffff81002000 t __pfx_cleanup
ffffffff81002010 t cleanup
ffffffff81002200 T __pfx_do_syscall_64
ffffffff81002210 T do_syscall_64
ffffffff81003000 t cleanup
ffffffff81004000 T entry_SYSCALL_64
ffffffff81004034 T entry_SYSCALL_64_safe_stack
ffffffff82000000 D init_task
ffffffff82000000 d alias_of_init_task
ffffffff83000000 B __bss_start
ffffffffc0002000 t cleanup\t[ext4]
ffffffffc0002100 T ext4_fill_super\t[ext4]
"""


@pytest.fixture(scope="module")
def sample() -> Kallsyms:
    return Kallsyms.parse(SAMPLE)


def test_parse_counts_and_types(sample):
    assert len(sample) == 20
    assert sample.lookup("_stext") == 0xFFFFFFFF81000000
    assert sample.symbol("do_syscall_64") == Symbol("do_syscall_64", 0xFFFFFFFF81002210, "T", None)
    assert sample.symbol("ext4_fill_super").module == "ext4"
    assert sample.symbol("fixed_percpu_data").address == 0  # a real zero: not censorship
    assert "do_one_initcall" in sample and "nope" not in sample
    assert [s.address for s in sample] == sorted(s.address for s in sample)


def test_duplicates_are_kept_and_lookup_is_strict(sample):
    every = sample.lookup_all("cleanup")
    assert [(s.address, s.module) for s in every] == [
        (0xFFFFFFFF81002010, None),
        (0xFFFFFFFF81003000, None),
        (0xFFFFFFFFC0002000, "ext4"),
    ]
    with pytest.raises(AmbiguousSymbolError) as e:
        sample.lookup("cleanup")
    msg = str(e.value)
    assert "ambiguous" in msg and "0xffffffff81002010" in msg and "0xffffffff81003000" in msg and "[ext4]" in msg
    assert isinstance(e.value, KeyError)
    assert [s.address for s in sample.lookup_all("cleanup", module=None)] == [0xFFFFFFFF81002010, 0xFFFFFFFF81003000]
    assert sample.lookup("cleanup", module="ext4") == 0xFFFFFFFFC0002000
    with pytest.raises(SymbolLookupError, match=r"no symbol 'nope' in kallsyms \(20 symbols\)"):
        sample.lookup("nope")
    with pytest.raises(SymbolLookupError, match="in module xfs"):
        sample.lookup("cleanup", module="xfs")
    assert sample.get("nope") is None and sample.get("cleanup") is None
    assert sample.get("_stext") == 0xFFFFFFFF81000000


def test_unique_leaves_out_ambiguous_names(sample):
    u = sample.unique()
    assert "cleanup" not in u
    assert u["do_syscall_64"] == 0xFFFFFFFF81002210
    assert u["current_task"] == 0x1FB80
    assert len(u) == 20 - 3  # 20 symbols, "cleanup" x3 left out


def test_symbolize_and_nearest(sample):
    assert sample.symbolize(0xFFFFFFFF81002210 + 0x47) == "do_syscall_64+0x47"
    assert sample.symbolize(0xFFFFFFFF81000000) == "startup_64+0x0"  # first listed of two globals
    assert sample.symbolize(0xFFFFFFFF82000008) == "init_task+0x8"  # global over local alias
    assert sample.symbolize(0xFFFFFFFFC0002105) == "ext4_fill_super+0x5 [ext4]"
    assert sample.symbolize(0xFFFFFFFF81003001) == "cleanup+0x1"
    assert sample.symbolize(0x10) == "fixed_percpu_data+0x10"
    sym, off = sample.nearest(0xFFFFFFFF83000010, text=True)
    assert (sym.name, off) == ("entry_SYSCALL_64_safe_stack", 0xFFFFFFFF83000010 - 0xFFFFFFFF81004034)
    assert sample.nearest(0x10, text=True) is None
    assert sample.symbolize(0x10, text=True) == "0x10"
    empty = Kallsyms.parse("")
    assert len(empty) == 0 and empty.nearest(5) is None and empty.symbolize(5) == "0x5"


def test_next_symbol_address(sample):
    assert sample.next_symbol_address(0xFFFFFFFF81002210) == 0xFFFFFFFF81003000
    assert sample.next_symbol_address(0xFFFFFFFF81000000) == 0xFFFFFFFF81000070  # past the alias
    assert sample.next_symbol_address(0xFFFFFFFF81004000) == 0xFFFFFFFF81004034
    with pytest.raises(SymbolLookupError, match="no symbol above"):
        sample.next_symbol_address(0xFFFFFFFFC0002100)


def test_parse_accepts_bytes_unsorted_blank_lines_and_crlf():
    lines = SAMPLE.splitlines()
    shuffled = "\n".join(reversed(lines)) + "\n\n   \n"
    a, b = Kallsyms.parse(SAMPLE), Kallsyms.parse(shuffled)
    assert sorted(a, key=lambda s: (s.address, s.name)) == sorted(b, key=lambda s: (s.address, s.name))
    assert list(Kallsyms.parse(SAMPLE.encode())) == list(a)
    assert list(Kallsyms.parse(SAMPLE.replace("\n", "\r\n"))) == list(a)
    assert list(Kallsyms.parse(SAMPLE.rstrip("\n"))) == list(a)  # no final newline


@pytest.mark.parametrize(
    "bad, lineno, why",
    [
        ("ffffffff81000000 T", 3, "fewer than 3 fields"),
        ("xyz T foo", 3, "address 'xyz' is not 1-16 hex digits"),
        ("ffffffff810000001234 T foo", 3, "is not 1-16 hex digits"),
        ("ffffffff81000000 TT foo", 3, "type 'TT' is not a single letter"),
        ("ffffffff81000000 T foo bar", 3, "optional '\\[module\\]'"),
        ("ffffffff81000000 T foo\t[ext4", 3, "optional '\\[module\\]'"),
        ("0x81000000 T foo", 3, "not 1-16 hex digits"),
    ],
)
def test_garbage_lines_name_their_number(bad, lineno, why):
    text = "ffffffff81000000 T _stext\n\n" + bad + "\nffffffff81000010 T other\n"
    with pytest.raises(KallsymsParseError, match=f"kallsyms line {lineno}: .*{why}") as e:
        Kallsyms.parse(text)
    assert e.value.lineno == lineno
    assert isinstance(e.value, ValueError)


def test_non_utf8_names_the_line():
    with pytest.raises(KallsymsError, match="line 2: not UTF-8"):
        Kallsyms.parse(b"ffffffff81000000 T a\nffffffff81000010 T \xff\n")


def test_censored_kallsyms_is_an_error():
    censored = "".join(f"0000000000000000 {t} {n}\n"
                       for t, n in (("T", "_stext"), ("t", "cleanup"), ("D", "init_task")))
    with pytest.raises(KallsymsCensoredError, match=r"censored \(every address is 0\).*kptr_restrict"):
        Kallsyms.parse(censored)
    # a text symbol at 0 with real addresses elsewhere is just as impossible
    with pytest.raises(KallsymsCensoredError, match="text symbol _stext is at address 0"):
        Kallsyms.parse("0000000000000000 T _stext\nffffffff82000000 D init_task\n")
    with pytest.raises(KallsymsCensoredError):
        Kallsyms([Symbol("x", 0, "D"), Symbol("y", 0, "d")])
    # per-CPU symbols at 0 alone are not censorship
    assert len(Kallsyms.parse("0000000000000000 A fixed_percpu_data\n")) == 1


def test_cache_round_trip(tmp_path, sample):
    path = tmp_path / "k.txt"
    sample.dump(path, meta={"release": "6.1.0-50-cloud-amd64", "sha256": "ab" * 32})
    back = Kallsyms.load(path)
    assert list(back) == list(sample)
    assert back.meta == {"release": "6.1.0-50-cloud-amd64", "sha256": "ab" * 32}
    assert back.lookup_all("cleanup") == sample.lookup_all("cleanup")
    text = path.read_text()
    assert text.startswith("# harness-kallsyms v1 symbols=20 {")
    assert "ffffffffc0002000 t cleanup\t[ext4]\n" in text
    with pytest.raises(KallsymsError, match="promises 20 symbols, found 19"):
        Kallsyms.loads(text.rsplit("\n", 2)[0] + "\n")
    with pytest.raises(KallsymsParseError, match="line 1: not a kallsyms cache header"):
        Kallsyms.loads(SAMPLE)
    with pytest.raises(KallsymsError, match="cache format v9"):
        Kallsyms.loads(text.replace(" v1 ", " v9 ", 1))
    with pytest.raises(KallsymsParseError, match=r"line 4: "):
        Kallsyms.loads(text.replace("\n", "\nbroken\n", 3).replace("\nbroken\n", "\n", 2))


# --- property tests ---------------------------------------------------------------------------------

_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.$]{0,30}", fullmatch=True)
_symbols = st.builds(
    Symbol,
    name=_names,
    address=st.integers(0x1000, 2**64 - 1),
    type=st.sampled_from("TtDdBbRrAaWwVv"),
    module=st.none() | st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_symbols, max_size=60))
def test_round_trips_through_text_and_cache(symbols):
    table = Kallsyms(symbols)
    text = "\n".join(s.line() for s in symbols)
    assert list(Kallsyms.parse(text)) == list(table)
    assert list(Kallsyms.loads(table.dumps())) == list(table)
    for s in symbols:
        assert s in table.lookup_all(s.name)
        hit = table.nearest(s.address)
        assert hit is not None and hit[0].address == s.address and hit[1] == 0


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_parses_or_raises_kallsyms_error(text):
    try:
        table = Kallsyms.parse(text)
    except KallsymsParseError as e:
        assert f"line {e.lineno}:" in str(e)
        assert e.line == text.split("\n")[e.lineno - 1]
        return
    except KallsymsCensoredError:
        return
    for s in table:
        assert table.lookup_all(s.name)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(SAMPLE.splitlines()) - 1), st.text(st.characters(blacklist_characters="\n"), max_size=40))
def test_one_garbage_line_is_reported_with_its_number(index, junk):
    lines = SAMPLE.splitlines()
    lines[index] = junk
    try:
        table = Kallsyms.parse("\n".join(lines))
    except KallsymsParseError as e:
        assert e.lineno == index + 1
        return
    assert len(table) in (len(lines), len(lines) - 1)  # junk was itself a valid line, or blank


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_cache_bytes_raise_kallsyms_error(data):
    text = data.decode("utf-8", "replace")
    try:
        table = Kallsyms.loads(text)
    except KallsymsError as e:
        if not text.startswith(Kallsyms([]).dumps().split(" ", 1)[0]):  # no cache header: line 1 named
            assert isinstance(e, KallsymsParseError) and e.lineno == 1, repr(e)
        return
    assert Kallsyms.loads(table.dumps()).dumps() == table.dumps()  # what loaded, dumps and loads again


# --- real symbols: the exported ones of the Debian vmlinux (its .symtab is stripped) -----------------


def exported_symbols(path) -> list[tuple[int, str]]:
    """(address, name) from __ksymtab/__ksymtab_gpl: x86-64 PREL32 entries {value, name, namespace}
    (include/linux/export-internal.h), each offset relative to its own field."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        strs = elf.get_section_by_name("__ksymtab_strings")
        sdata, saddr = strs.data(), strs["sh_addr"]
        out = []
        for secname in ("__ksymtab", "__ksymtab_gpl"):
            sec = elf.get_section_by_name(secname)
            if sec is None:
                continue
            for i, (value_off, name_off, _) in enumerate(struct.iter_unpack("<iii", sec.data())):
                entry = sec["sh_addr"] + 12 * i
                name_at = entry + 4 + name_off - saddr
                name = sdata[name_at : sdata.index(b"\0", name_at)].decode()
                out.append(((entry + value_off) & (2**64 - 1), name))
        return out


@pytest.fixture(scope="module", params=["default", "bookworm"])
def real(request):
    """(kernel, Btf, kallsyms-like text of its exported symbols, typed from BTF)."""
    from harness.images.kernel import get_kernel
    from harness.kernel.btf import Btf

    k = get_kernel(request.param)
    btf = Btf.from_elf(k.vmlinux)
    lines = []
    for addr, name in exported_symbols(k.vmlinux):
        letter = "T" if btf.find_all(name, "func") else "D"
        lines.append(f"{addr:016x} {letter} {name}")
    return k, btf, "\n".join(lines) + "\n"


def test_real_exported_symbols(real):
    k, btf, text = real
    syms = Kallsyms.parse(text, source=f"{k.release} exports")
    assert len(syms) > 9000
    for name in ("_printk", "memcpy", "schedule", "__per_cpu_offset", "current_task"):
        assert name in syms, name
    printk = syms.lookup("_printk")
    assert printk >= 0xFFFFFFFF81000000
    assert syms.symbolize(printk + 0x10, text=True) == "_printk+0x10"
    assert syms.next_symbol_address(printk) > printk
    assert syms.symbol("schedule").type == "T"


def test_real_percpu_symbols_agree_with_btf(real):
    """Per-CPU variables: the exported address minus BTF's DATASEC offset is one base for all (0
    on 6.1's zero-based per-CPU area, the section's address on 6.15+)."""
    k, btf, text = real
    syms = Kallsyms.parse(text)
    bases = set()
    for entry in btf.datasec(".data..percpu"):
        addr = syms.get(entry.name)
        if addr is not None:
            bases.add(addr - entry.offset)
    assert len(bases) == 1, bases
    base = bases.pop()
    if k.name == "bookworm":
        assert base == 0
    else:
        assert base >= 0xFFFFFFFF80000000


def test_real_sized_cache_round_trip(tmp_path):
    """A kallsyms-sized table (~150k symbols): 7.3's exports, each also as the local variants a real
    table has (__pfx_, .cold, .isra.0, .constprop.0, .part.0, __ksymtab_, __kstrtab_, .llvm.1), and
    30k module symbols.  It dumps and loads back the same rows; the parse and load times are printed
    by benchmarks/parsers.py, not asserted here (a timed test fails on a loaded machine)."""
    from harness.images.kernel import get_kernel

    k = get_kernel("default")
    exports = exported_symbols(k.vmlinux)
    text = "".join(f"{a:016x} T {n}\n" for a, n in exports)
    extra = [
        f"{0xFFFFFFFF90000000 + 64 * (8 * i + j):016x} t {pre}{n}{suf}"
        for i, (_, n) in enumerate(exports)
        for j, (pre, suf) in enumerate(
            [("__pfx_", ""), ("", ".cold"), ("", ".isra.0"), ("", ".constprop.0"), ("", ".part.0"),
             ("__ksymtab_", ""), ("__kstrtab_", ""), ("", ".llvm.1")]
        )
    ]
    extra += [f"{0xFFFFFFFFC0000000 + 16 * i:016x} t mod_fn_{i}\t[mod{i % 40}]" for i in range(30000)]
    big = text + "\n".join(extra) + "\n"
    table = Kallsyms.parse(big)
    assert len(table) > 100_000
    path = tmp_path / "cache.txt"
    table.dump(path, meta={"release": k.release})
    back = Kallsyms.load(path)
    assert back._rows == table._rows and back.meta == {"release": k.release}
    assert back.lookup("_printk") == table.lookup("_printk")



# --- ELF .symtab, checked against nm -----------------------------------------------------------------


def test_from_elf_stripped_vmlinux_is_a_clear_error():
    from harness.images.kernel import get_kernel

    with pytest.raises(KallsymsError, match="has no .symtab .*use the guest's /proc/kallsyms"):
        Kallsyms.from_elf(get_kernel("default").vmlinux)


def test_from_elf_not_elf(tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x7fELF" + b"\xff" * 60)
    with pytest.raises(KallsymsError, match="not a readable ELF"):
        Kallsyms.from_elf(junk)


C_SOURCE = r"""
int counter = 1;
static int hidden_counter;
const char banner[] = "hi";
static int helper(int x) { return x + hidden_counter; }
int api(int x) { return helper(x) + counter; }
__attribute__((weak)) int maybe(void) { return 0; }
int bss_thing;
"""


def test_from_elf_matches_nm(tmp_path):
    cc, nm = shutil.which("cc") or shutil.which("gcc"), shutil.which("nm")
    require(bool(cc and nm), "needs cc and nm (gcc, binutils: ./dev installs them)")
    src, obj = tmp_path / "t.c", tmp_path / "t.o"
    src.write_text(C_SOURCE)
    subprocess.run([cc, "-O0", "-fno-common", "-c", str(src), "-o", str(obj)], check=True)
    ours = Kallsyms.from_elf(obj)
    nm_out = subprocess.run([nm, str(obj)], check=True, capture_output=True, text=True).stdout
    theirs = sorted((n, int(a, 16), t)
                    for a, t, n in (line.split() for line in nm_out.splitlines() if not line.startswith(" ")))
    assert sorted((s.name, s.address, s.type) for s in ours) == theirs
    assert len(theirs) >= 6
    assert ours.symbol("api").type == "T" and ours.symbol("helper").type == "t"
    assert ours.symbol("maybe").type == "W"
    assert ours.symbol("bss_thing").type == "B" and ours.symbol("banner").type == "R"
