"""Address space (maps, load bias), CFI expression evaluation, symbolization, snapshots: pure parts."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from elftools.dwarf.dwarf_expr import DWARFExprParser
from elftools.dwarf.structs import DWARFStructs

from harness.memory import BufferMemory
from harness.regs import UserRegs
from harness.rule import SAME, FrameRule, ValueRule, apply_rule
from harness.unwind.cfi import UnsupportedCFI, eval_cfa_expression
from harness.unwind.maps import AddressSpace, MapsError, load_image, parse_maps
from harness.unwind.snapshot import Region, Snapshot, SnapshotError
from harness.unwind.symbolize import Symbolizer
from harness.unwind.user import unwind_user
from tests.support.gating import require
from tests.support.layout import loader_maps

MAPS = """\
555555554000-555555555000 r--p 00000000 08:01 1234                       /usr/bin/prog
555555555000-555555556000 r-xp 00001000 08:01 1234                       /usr/bin/prog
555555559000-55555557a000 rw-p 00000000 00:00 0                          [heap]
7ffff7dd3000-7ffff7df9000 r--p 00000000 08:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6
7ffff7ffa000-7ffff7ffe000 r--p 00000000 00:00 0                          [vvar]
7ffff7ffe000-7ffff8000000 r-xp 00000000 00:00 0                          [vdso]
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]
7ffff7fc0000-7ffff7fc1000 rw-p 00000000 00:00 0 
"""


def test_parse_maps_fields_and_order():
    ms = parse_maps(MAPS)
    assert [m.start for m in ms] == sorted(m.start for m in ms)
    prog = ms[1]
    assert (prog.start, prog.end, prog.perms, prog.offset, prog.dev, prog.inode, prog.path) == (
        0x555555555000, 0x555555556000, "r-xp", 0x1000, "08:01", 1234, "/usr/bin/prog")
    assert prog.executable and prog.is_file
    anon = next(m for m in ms if m.start == 0x7FFFF7FC0000)
    assert anon.path == "" and not anon.is_file
    assert parse_maps(prog.to_line())[0] == prog


def test_parse_maps_rejects_garbage_with_line_number():
    with pytest.raises(MapsError) as e:
        parse_maps(MAPS + "not a maps line\n")
    assert e.value.lineno == 9


def test_mapping_lookup_and_unresolved_files():
    space = AddressSpace.from_maps(MAPS, resolve=lambda p: None)
    assert space.mapping_at(0x555555555123).path == "/usr/bin/prog"
    assert space.mapping_at(0x555555556000) is None  # between mappings
    assert space.elf_at(0x555555555123) is None  # no host file: no ELF, no error


def pie_binary() -> Path:
    path = next((Path(p).resolve() for p in ("/usr/bin/true", "/bin/true", "/usr/bin/env") if Path(p).is_file()), None)
    require(path is not None, "no PIE system binary to read (/usr/bin/true, coreutils)")
    return path


def test_load_bias_of_a_pie_from_every_mapping():
    path = pie_binary()
    img = load_image(path)
    assert img.is_pie_or_shared
    base = 0x555555554000
    space = AddressSpace.from_maps(loader_maps(path, base), resolve=lambda p: p)
    for m in space.mappings:
        e = space.elf_at(m.start)
        assert e is not None and e.bias == base, m
    # a second call is served from the cache (same object)
    assert space.elf_at(space.mappings[0].start) is space.elf_at(space.mappings[0].start)


def test_tables_for_builds_one_provider_per_elf():
    path = pie_binary()
    img = load_image(path)
    first = next(s for s in img.segments if s.p_type == "PT_LOAD")
    space = AddressSpace.from_maps(loader_maps(path, 0x555555554000), resolve=lambda p: p)
    made = []
    tables_for = space.tables_for(lambda e: made.append(e) or ("table", e.bias))
    assert tables_for(0x555555554100) == ("table", 0x555555554000 - first.vaddr + first.offset)
    tables_for(0x555555555000)
    assert len(made) == 1
    assert tables_for(0x1000) is None


# --- CFA expressions (the PLT's DW_CFA_def_cfa_expression) ----------------------------------

PLT_EXPR = [119, 8, 128, 0, 63, 26, 59, 42, 51, 36, 34]  # readelf: breg7 8; breg16 0; lit15; and;
# lit11; ge; lit3; shl; plus


def ops(expr):
    return DWARFExprParser(DWARFStructs(little_endian=True, dwarf_format=32, address_size=8)).parse_expr(expr)


@pytest.mark.parametrize("pc,off", [(0x1030, 8), (0x103A, 8), (0x103B, 16), (0x103F, 16)])
def test_plt_cfa_expression(pc, off):
    assert eval_cfa_expression(ops(PLT_EXPR), pc) == ValueRule("sp", off)


def test_cfa_expression_deref_and_rbp():
    # DW_OP_breg6 -8; DW_OP_deref: the DRAP shape, CFA = *(rbp - 8)
    assert eval_cfa_expression(ops([0x76, 0x78, 0x06]), 0) == ValueRule("fp", -8, True)


@pytest.mark.parametrize("expr", [[0x06], [0x77, 0x00, 0x76, 0x00, 0x22], [0x30], [0x96]])
def test_unsupported_cfa_expressions_are_named(expr):
    # bare deref, rsp + rbp, a constant CFA, DW_OP_nop alone
    with pytest.raises(UnsupportedCFI):
        eval_cfa_expression(ops(expr), 0)


# OpenSSL's perlasm (.cfi_cfa_expression %rsp+N,deref,+M): the caller's rsp, saved in a realigned
# or moving frame, plus the return address's slot.  Debian's libcrypto.so.3 has 64 of them
# (readelf --debug-dump=frames: sha256/sha512 AVX2 and SSSE3, AES-NI, ChaCha20, Poly1305, ...).
@pytest.mark.parametrize("expr,want", [
    ([0x77, 0xD8, 0x00, 0x06, 0x23, 8], ValueRule("sp", 88, True, 8)),  # breg7 88; deref; plus_uconst 8
    ([0x77, 0x78, 0x06, 0x23, 8], ValueRule("sp", -8, True, 8)),  # breg7 -8 (below rsp: the red zone)
    ([0x76, 0xD8, 0x00, 0x06, 0x23, 8], ValueRule("fp", 88, True, 8)),  # breg6 88
    ([0x77, 0x10, 0x06, 0x23, 0x40], ValueRule("sp", 16, True, 64)),  # bn_mul4x_mont: plus_uconst 64
    ([0x77, 0x10, 0x06, 0x38, 0x22], ValueRule("sp", 16, True, 8)),  # lit8; plus
    ([0x38, 0x77, 0x10, 0x06, 0x22], ValueRule("sp", 16, True, 8)),  # lit8 under the read; plus
    ([0x77, 0x10, 0x06, 0x31, 0x1C], ValueRule("sp", 16, True, -1)),  # lit1; minus
])
def test_cfa_expression_deref_then_a_constant(expr, want):
    assert eval_cfa_expression(ops(expr), 0) == want


@pytest.mark.parametrize("expr", [
    [0x77, 8, 0x79, 0, 0x38, 0x1E, 0x22, 0x06, 0x23, 8],  # bn_mul_mont: rsp + 8 + r9 * 8, a register times 8
    [0x77, 0, 0x06, 0x38, 0x1E],  # the word read times 8
    [0x77, 0, 0x06, 0x76, 0, 0x22],  # the word read plus rbp
    [0x30, 0x77, 0, 0x06, 0x1C],  # 0 minus the word read
    [0x77, 0, 0x06, 0x23, 8, 0x06],  # read, add, read again
    [0x30, 0x06],  # a read at a constant address
])
def test_cfa_expressions_beyond_a_read_plus_a_constant_are_unsupported(expr):
    with pytest.raises(UnsupportedCFI):
        eval_cfa_expression(ops(expr), 0)


def test_a_value_read_and_added_to():
    """``*(sp + 88) + 8``: the word at sp + 88 is the caller's rsp, the CFA 8 above it."""
    mem = BufferMemory({0x1000: bytes(88) + (0x2000).to_bytes(8, "little"), 0x2000: (0x401234).to_bytes(8, "little")})
    rule = FrameRule(ValueRule("sp", 88, True, 8), ValueRule("cfa", -8, True), ValueRule(SAME))
    read = lambda a: int.from_bytes(mem.read(a, 8), "little")  # noqa: E731
    assert apply_rule(rule, 0x1000, 0x77, read) == (0x2008, 0x401234, 0x77)
    assert str(rule.cfa) == "*(sp+88)+8" and str(ValueRule("fp", -8, True)) == "*(fp-8)"
    with pytest.raises(ValueError):
        ValueRule("sp", 8, False, 8)  # nothing read: the constant is the offset's


# --- snapshots ------------------------------------------------------------------------------

def test_snapshot_round_trip_and_file_backed_code(tmp_path):
    path = pie_binary()
    data = path.read_bytes()
    maps = (f"555555554000-555555556000 r-xp 00000000 08:01 1 {path}\n"
            "7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]")
    stack = bytes(range(256)) * 16
    snap = Snapshot("t", UserRegs(ip=0x555555554010, sp=0x7FFFFFFFE000, bp=0), maps,
                    [Region(0x7FFFFFFFE000, stack, "stack")], {str(path): str(path)}, {"why": "test"})
    again = Snapshot.load(snap.save(tmp_path / "s"))
    assert again.regs == snap.regs and again.files == snap.files and again.meta == {"why": "test"}
    mem = again.memory()
    assert mem.read(0x7FFFFFFFE000 + 5, 3) == stack[5:8]
    assert mem.read(0x555555554000, 4) == data[:4] == b"\x7fELF"  # from the host file
    assert unwind_user(mem, again.regs).ips == [0x555555554010]


def test_snapshot_errors_name_the_directory(tmp_path):
    with pytest.raises(SnapshotError, match=str(tmp_path)):
        Snapshot.load(tmp_path)
    (tmp_path / "snapshot.json").write_text('{"format": "core", "version": 9}')
    with pytest.raises(SnapshotError, match="expected unwind-harness-snapshot"):
        Snapshot.load(tmp_path)


def test_symbolizer_uses_call_site_for_return_addresses():
    path = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")
    require(path.is_file(), "no host libc.so.6 to read symbols from (Debian's libc6)")
    img = load_image(path.resolve())
    from harness.unwind.symbolize import symbol_index

    idx = symbol_index(img)
    require(len(idx.symbols) >= 2, f"{path} has too few function symbols")
    pairs = [(a, b) for a, b in itertools.pairwise(idx.symbols) if a.size and a.addr + a.size == b.addr]
    f0, f1 = pairs[0] if pairs else (idx.symbols[0], idx.symbols[1])
    space = AddressSpace.from_maps(loader_maps(path, 0x555555554000), resolve=lambda p: p, memory=BufferMemory())
    bias = space.elf_at(0x555555554000).bias
    sym = Symbolizer(space)
    assert sym.name(f0.addr + bias) == f"{f0.name}+0x0"
    if f0.addr + f0.size == f1.addr:  # a return address at the end of f0 is f0's call site
        assert sym.name(f1.addr + bias, return_address=True) == f"{f0.name}+{f0.size:#x}"


def test_syscall_return_needs_the_syscall_number_the_instruction_and_its_saved_ip():
    """The topmost IP is a syscall's return address only for registers of a task in a syscall
    (orig_ax its number, not -1), with a syscall instruction right before the IP, and for
    ``syscall`` the IP still the one it saved in rcx; int $0x80 (compat) saves none."""
    from harness.regs import USER_CS_32
    from harness.unwind.access import UserAccess
    from harness.unwind.cfi import syscall_return

    code = 0x401000
    mem = BufferMemory({code: b"\x90\x0f\x05\x55\x48\x89\xe5" + b"\x90\xcd\x80\x55\x89\xe5"})
    access = UserAccess(mem)
    mask = (1 << 64) - 1
    after = UserRegs(ip=code + 3, cx=code + 3, orig_ax=231)  # exit_group, at the next function's push %rbp
    assert syscall_return(access, after, mask)
    assert not syscall_return(access, UserRegs(ip=code + 3, cx=code + 3, orig_ax=mask), mask)  # an interrupt there
    assert not syscall_return(access, UserRegs(ip=code + 3, cx=0x402000, orig_ax=59), mask)  # execve's new entry
    assert not syscall_return(access, UserRegs(ip=code + 1, cx=code + 1, orig_ax=0), mask)  # at the syscall: restarted
    assert not syscall_return(access, UserRegs(ip=0x500000, cx=0x500000, orig_ax=0), mask)  # no code there
    compat = UserRegs(ip=code + 10, cx=7, orig_ax=1, cs=USER_CS_32)  # int $0x80: ecx is an argument
    assert syscall_return(UserAccess(mem, 4), compat, 0xFFFFFFFF)


def test_ifunc_symbols_are_functions():
    """glibc's IFUNC symbols (memcpy, strlen, ...: STT_GNU_IFUNC, type 10, which pyelftools 0.33
    names STT_LOOS) name their resolvers: the symbolizer knows them as functions."""
    from elftools.elf.elffile import ELFFile

    from harness.unwind.symbolize import symbol_index

    path = Path("/usr/lib/x86_64-linux-gnu/libc.so.6").resolve()
    require(path.is_file(), "no host libc.so.6 to read symbols from (Debian's libc6)")
    with open(path, "rb") as f:
        ifuncs = {s.name.split("@")[0]: s["st_value"] for s in ELFFile(f).get_section_by_name(".dynsym").iter_symbols()
                  if s["st_info"]["type"] in ("STT_LOOS", "STT_GNU_IFUNC") and s["st_value"]}
    assert "memcpy" in ifuncs and len(ifuncs) > 20
    by_addr = {s.addr: s.name for s in symbol_index(load_image(path)).symbols}
    missing = [n for n, a in ifuncs.items() if a not in by_addr]
    assert not missing, f"{len(missing)} of {len(ifuncs)} IFUNC symbols unknown, e.g. {missing[:5]}"
