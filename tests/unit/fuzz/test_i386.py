"""i386 (``-m32``) programs in the fuzzer: the ABI drawn with the build flags, built where the
toolchain has the i386 multilib (asked of its own compiler), named in the signature, and checked
statically with the i386 CFI against the kernel's compat frame-pointer walk (4-byte words); the
SFrame steps skipped by name (SFrame has no i386 ABI)."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import given, settings

from harness.fuzz.build import BuildConfig, MatrixError, build, configs, fit_abi, i386_lacks
from harness.fuzz.campaign import examples
from harness.fuzz.finding import Finding
from harness.fuzz.shape import Func, Shape
from harness.fuzz.static import (
    I386_SYNTH,
    X86_64_SYNTH,
    StaticChecker,
    cfi_rows,
    generated_functions,
    instructions,
    synthesize,
)
from harness.regs import UserRegs
from harness.unwind.cfi import CFIRules, cfi_table, unwind_cfi
from harness.unwind.maps import ElfImage
from harness.unwind.user import UnwindConfig, UnwinderType, unwind_user
from tests.support.toolchains import need

F = frozenset
SHAPE = Shape((
    Func("fp", F({"alloca"}), (1, 2), 2),
    Func("nofp", F({"realign", "variadic"}), (3,), 0),
    Func("build", F({"signal"}), (3,), 1),
    Func("fp", F(), (), 3),
))


def test_an_i386_config_has_no_sframe_and_its_signature_says_m32():
    c = BuildConfig("host", "-O2", True, True, False, "bfd", bits=32)
    assert c.sframe is False and c.variant.bits == 32 and c.variant.sframe is False
    assert c.flags == "-O2 fp nosframe dyn m32" and c.compile_flags == "-O2 fp nosframe m32"
    assert c.link_flags == "nosframe dyn m32"
    # x86-64 keeps today's words: a signature of an older campaign is the same signature
    assert BuildConfig("host", "-O2", True, True, False, "bfd").flags == "-O2 fp sframe dyn"
    assert Finding("fp-step", "x", c, "").signature.key.endswith("-O2 fp nosframe dyn m32")
    assert BuildConfig.from_json(c.to_json()) == c
    old = {k: v for k, v in BuildConfig().to_json().items() if k != "bits"}  # a reproducer before the ABI
    assert BuildConfig.from_json(old).bits == 64
    with pytest.raises(MatrixError, match="bits=16"):
        BuildConfig(bits=16)


@settings(max_examples=60, database=None, deadline=None)
@given(configs(("host", "sid"), ("bfd", "lld")))
def test_the_matrix_draws_both_abis(c):
    assert c.bits in (32, 64)
    assert not (c.bits == 32 and c.sframe)


def test_the_drawn_abis_include_i386():
    seen = set()

    @settings(max_examples=80, database=None, deadline=None)
    @given(configs(("host",), ("bfd",)))
    def draw(c):
        seen.add(c.bits)

    draw()
    assert seen == {32, 64}


def test_the_multilib_is_asked_of_each_compiler():
    need("host")
    need("sid")
    assert i386_lacks("host") is None and i386_lacks("sid") is None
    # sid's gcc-11 answers its 64-bit crtbegin.o for -m32: no i386 multilib of its own
    need("sid-gcc11")
    why = i386_lacks("sid-gcc11")
    assert why is not None and "64-bit crtbegin.o" in why
    # no root has an i386 libstdc++ (g++-multilib): C++ stays x86-64
    assert "libstdc++" in (i386_lacks("host", cxx=True) or "")
    c = BuildConfig("sid-gcc11", "-O1", True, True, False, "bfd", bits=32)
    assert fit_abi(c).bits == 64 and fit_abi(dataclasses.replace(c, toolchain="sid")).bits == 32
    assert fit_abi(dataclasses.replace(c, toolchain="sid"), cxx=True).bits == 64


def test_a_drawn_cxx_example_is_never_i386():
    need("host")

    @settings(max_examples=40, database=None, deadline=None)
    @given(examples(("host",), ("bfd",), max_funcs=3))
    def draw(ex):
        if ex.shape.lang == "c++":
            assert ex.config.bits == 64

    draw()


@pytest.mark.parametrize("tc,linker,static", [("host", "bfd", True), ("sid", "lld", True), ("trixie", "mold", True),
                                              ("host", "gold", True), ("sid", "bfd", False)])
def test_i386_programs_build_and_run(tc, linker, static, tmp_path):
    need(tc)
    b = build(SHAPE, BuildConfig(tc, "-O2", False, True, static, linker, bits=32), tmp_path)
    assert b.ok, b.error
    assert any("-m32" in c for c in b.commands)
    with b.binary.open("rb") as fh:
        elf = ELFFile(fh)
        assert elf.elfclass == 32 and elf["e_machine"] == "EM_386"
        assert elf.get_section_by_name(".sframe") is None
    if static:  # a dynamic one's interpreter is the guest's /tc/ROOT/lib32 path
        r = subprocess.run([str(b.binary), "50"], capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
    # the spin is the compat entry (int $0x80), never x86-64's syscall
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(b.binary)], capture_output=True, text=True,
                         check=True).stdout
    assert "int    $0x80" in dis


def test_the_static_checker_steps_an_i386_program_with_the_compat_walk(tmp_path):
    need("host")
    b = build(SHAPE, BuildConfig("host", "-O1", True, True, True, "bfd", bits=32), tmp_path)
    assert b.ok, b.error
    checker = StaticChecker()
    findings = checker(b)
    assert findings == []
    assert checker.expected["sframe-i386-skipped"] == 1  # by name, never silently
    assert checker.instructions > 50
    # the frame-pointer bodies' rows: the compat walk (4-byte words) recovers the CFI's caller; the
    # same stack walked as a 64-bit task (8-byte words) does not (the comparison can fail)
    image = ElfImage.from_path(b.binary)
    cfi = cfi_table(image)
    fp_steps = 0
    for fn in generated_functions(image):
        rules, fp_rows = cfi_rows(cfi, instructions(image, fn))
        for pc in fp_rows:
            synth = synthesize(rules[pc], I386_SYNTH)
            assert synth is not None
            regs = dataclasses.replace(synth.regs, ip=pc)
            truth = unwind_cfi(synth.memory, regs, lambda _pc: CFIRules(cfi, 0), max_entries=2)
            compat = unwind_user(synth.memory, regs, UnwindConfig(max_entries=2))
            assert compat.frames[1].how is UnwinderType.COMPAT_FP
            assert (compat.frames[1].ip, compat.frames[1].sp) == (truth.frames[1].ip, truth.frames[1].sp)
            wide = unwind_user(synth.memory, dataclasses.replace(regs, cs=X86_64_SYNTH.cs), UnwindConfig(max_entries=2))
            assert len(wide.frames) < 2 or wide.frames[1].ip != truth.frames[1].ip
            fp_steps += 1
    assert fp_steps > 10


def test_a_synthesized_i386_stack_fits_in_32_bits():
    assert I386_SYNTH.cfa < 1 << 32 and I386_SYNTH.ra < 1 << 32 and I386_SYNTH.stack[1] < 1 << 32
    assert isinstance(UserRegs(cs=I386_SYNTH.cs).compat, bool) and UserRegs(cs=I386_SYNTH.cs).compat


@pytest.mark.parametrize("tc", ["host", "trixie", "sid"])
def test_an_i386_static_pie_linked_by_lld_dies_at_start_where_ld_bfds_runs(tc, tmp_path):
    """docs/findings.md row 10, the live campaign's three ``live-crash [SIGSEGV]`` signatures: an
    i386 static-pie program linked by lld (Debian 12's LLD 14.0.6, the one the matrix links
    with) dies with SIGSEGV before main, over each suite's i386 glibc (2.36, 2.41, 2.42); the
    same objects linked by ld.bfd run.  Checked by hand beside it: sid's LLD 22.1.8 and 23.1.4
    linking Debian 12's objects die the same way (a call to an unrelocated link-time address
    from __libc_start_call_main).  This test fails the day that changes: then the finding's row
    is to be updated."""
    need(tc)
    ran = {}
    for linker in ("bfd", "lld"):
        b = build(SHAPE, BuildConfig(tc, "-O2", False, True, True, linker, pie=True, bits=32), tmp_path / linker)
        assert b.ok, b.error
        assert any("-static-pie" in c and "-m32" in c for c in b.commands)
        ran[linker] = subprocess.run([str(b.binary), "50"], capture_output=True, timeout=60).returncode
    comment = subprocess.run(["readelf", "-p", ".comment", str(tmp_path / "lld" / "prog")], capture_output=True,
                             text=True, check=True).stdout
    assert "LLD 14.0.6" in comment, comment
    assert ran == {"bfd": 0, "lld": -11}, ran
